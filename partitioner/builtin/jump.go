package builtin

// Jump is the jump consistent hash of Lamping and Veach ("A Fast, Minimal Memory,
// Consistent Hash Algorithm", 2014) for n >= 1 buckets, exactly as the paper's C++: the
// same 64-bit LCG and the same floating-point expression, evaluated in the same order
// (2^31 / ((key>>33)+1) first, then times (b+1), each rounded to nearest binary64, then
// truncated). Reordering it, as Guava's consistentHash does, changes some results.
func Jump(key uint64, n int32) int32 {
	mustN(n)
	b, j := int64(-1), int64(0)
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		// The explicit float64 conversions forbid the compiler from fusing or
		// re-associating the two operations (Go spec, "Floating-point operators").
		q := float64(float64(int64(1)<<31) / float64((key>>33)+1))
		j = int64(float64(float64(b+1) * q))
	}
	return int32(b)
}

func jumpPartition(key []byte, n int32) int32 {
	return Jump(XXH64(key, 0), n)
}

// jumpAncestry is the declared ancestry of spec/builtins.md. Growing from n to m > n moves
// keys only into [n, m): child c < n has parent c, child c >= n has parents [0, n).
// Shrinking to m < n: child c has parents {c} ∪ [m, n). Equal counts: {c}.
func jumpAncestry(fromN, toN, child int32) []Range {
	if !validAncestryArgs(fromN, toN, child) {
		return nil
	}
	switch {
	case toN >= fromN:
		if child < fromN {
			return []Range{{child, child + 1}}
		}
		return []Range{{0, fromN}}
	default: // shrink: child < toN < fromN
		if child+1 == toN {
			return []Range{{child, fromN}}
		}
		return []Range{{child, child + 1}, {toN, fromN}}
	}
}
