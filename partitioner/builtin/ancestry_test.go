package builtin

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkWellFormed verifies the shape promised by Builtin.Ancestry and abi-v1.md §2.7.
func checkWellFormed(t *testing.T, name string, fromN, toN, child int32, rs []Range) {
	t.Helper()
	if len(rs) == 0 {
		t.Fatalf("%s ancestry(%d, %d, %d) is empty", name, fromN, toN, child)
	}
	prevHi := int32(-1)
	for _, r := range rs {
		if r.Lo < 0 || r.Lo >= r.Hi || r.Hi > fromN || r.Lo <= prevHi {
			t.Fatalf("%s ancestry(%d, %d, %d) = %v: ranges must be non-empty, sorted, disjoint, non-adjacent, within [0, %d)",
				name, fromN, toN, child, abbrevRanges(rs), fromN)
		}
		prevHi = r.Hi
	}
}

func contains(rs []Range, p int32) bool {
	for _, r := range rs {
		if p >= r.Lo && p < r.Hi {
			return true
		}
	}
	return false
}

func size(rs []Range) int64 {
	var s int64
	for _, r := range rs {
		s += int64(r.Hi - r.Lo)
	}
	return s
}

func abbrevRanges(rs []Range) string {
	if len(rs) > 6 {
		return fmt.Sprintf("%v … (%d ranges)", rs[:6], len(rs))
	}
	return fmt.Sprint(rs)
}

// ancestryPairs are (fromN, toN) pairs: every pair up to 33 (grow, shrink, equal, across
// powers of two), and pairs of large counts around powers of two and the maximum.
func ancestryPairs() [][2]int32 {
	var pairs [][2]int32
	for f := int32(1); f <= 33; f++ {
		for to := int32(1); to <= 33; to++ {
			pairs = append(pairs, [2]int32{f, to})
		}
	}
	big := []int32{63, 64, 65, 100, 127, 128, 129, 1000, 1023, 1024, 1025, 4096, 65535, 65536,
		1 << 20, 1<<20 + 3, 1<<30 - 1, 1 << 30, 1<<30 + 1, 0x7ffffffe, 0x7fffffff}
	for _, f := range big {
		for _, to := range big {
			pairs = append(pairs, [2]int32{f, to})
		}
		pairs = append(pairs, [2]int32{f, 1}, [2]int32{1, f}, [2]int32{f, 3}, [2]int32{5, f}, [2]int32{f, 31})
	}
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 60; i++ {
		pairs = append(pairs, [2]int32{1 + r.Int32N(0x7fffffff), 1 + r.Int32N(0x7fffffff)})
	}
	return pairs
}

// TestAncestrySound checks, on random keys, that every observed parent of every key is
// declared: parents(child) ⊆ Ancestry(from, to, child), for every builtin that declares.
func TestAncestrySound(t *testing.T) {
	keys := testKeys(3, 3000, 24)
	if testing.Short() {
		keys = keys[:500]
	}
	pairs := ancestryPairs()
	for _, b := range All() {
		if b.Ancestry == nil {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			for _, pr := range pairs {
				from, to := pr[0], pr[1]
				cache := map[int32][]Range{}
				for _, k := range keys {
					parent, child := b.Func(k, from), b.Func(k, to)
					rs, ok := cache[child]
					if !ok {
						rs = b.Ancestry(from, to, child)
						checkWellFormed(t, b.Name, from, to, child, rs)
						cache[child] = rs
					}
					if !contains(rs, parent) {
						t.Fatalf("%s: key %x is in %d under n=%d and in %d under n=%d, but ancestry(%d, %d, %d) = %v omits %d: consumers would not wait for that parent, and per-key order breaks",
							b.Name, k, parent, from, child, to, from, to, child, abbrevRanges(rs), parent)
					}
				}
			}
		})
	}
}

func TestAncestryInvalidArgs(t *testing.T) {
	for _, b := range All() {
		if b.Ancestry == nil {
			continue
		}
		for _, a := range [][3]int32{{0, 1, 0}, {1, 0, 0}, {3, 3, 3}, {3, 3, -1}, {-5, 3, 0}, {3, 2, 7}} {
			if rs := b.Ancestry(a[0], a[1], a[2]); rs != nil {
				t.Errorf("%s ancestry%v = %v, want nil for arguments out of range", b.Name, a, rs)
			}
		}
	}
}

// TestLinearMurmur2AncestryExact: linear-murmur2 declares exact ancestry. Exhaustively over
// hashes: for fromN, toN <= 2^k, a partition depends only on h mod 2^(k+1), so every hash
// residue below 2^(k+1) shows every (parent, child) pair that can occur.
func TestLinearMurmur2AncestryExact(t *testing.T) {
	check := func(from, to int32, period uint32) {
		observed := make(map[int32]map[int32]bool)
		for h := uint32(0); h < period; h++ {
			c, p := linearFromHash(h, uint32(to)), linearFromHash(h, uint32(from))
			if observed[c] == nil {
				observed[c] = map[int32]bool{}
			}
			observed[c][p] = true
		}
		for c := int32(0); c < to; c++ {
			rs := linearMurmur2Ancestry(from, to, c)
			checkWellFormed(t, "linear-murmur2", from, to, c, rs)
			if size(rs) > maxLinearRanges && !(len(rs) == 1 && rs[0] == Range{0, from}) {
				t.Fatalf("ancestry(%d, %d, %d) has %d ranges, over the %d limit", from, to, c, len(rs), maxLinearRanges)
			}
			if len(rs) == 1 && rs[0] == (Range{0, from}) && len(observed[c]) != int(from) {
				// Only allowed as the over-the-limit fallback.
				if int64(len(observed[c])) <= maxLinearRanges {
					t.Fatalf("ancestry(%d, %d, %d) = [0, %d) but only %d parents occur: not exact", from, to, c, from, len(observed[c]))
				}
				continue
			}
			if int64(len(observed[c])) != size(rs) {
				t.Fatalf("ancestry(%d, %d, %d) = %v declares %d parents, %d occur: not exact", from, to, c, abbrevRanges(rs), size(rs), len(observed[c]))
			}
			for p := range observed[c] {
				if !contains(rs, p) {
					t.Fatalf("ancestry(%d, %d, %d) = %v omits parent %d", from, to, c, abbrevRanges(rs), p)
				}
			}
		}
	}
	for from := int32(1); from <= 70; from++ {
		for to := int32(1); to <= 70; to++ {
			check(from, to, 256)
		}
	}
	r := rand.New(rand.NewPCG(11, 11))
	for i := 0; i < 40; i++ {
		from, to := 1+r.Int32N(16383), 1+r.Int32N(16383)
		check(from, to, 1<<15)
		check(from, 1+r.Int32N(7), 1<<15)
		check(1+r.Int32N(7), to, 1<<15)
	}
}

// TestLinearMurmur2AncestryExactOnKeys repeats the exactness check with real keys through
// Func: every declared parent is actually seen.
func TestLinearMurmur2AncestryExactOnKeys(t *testing.T) {
	b, _ := Lookup("linear-murmur2")
	keys := testKeys(5, 40000, 16)
	for _, pr := range [][2]int32{{4, 6}, {6, 4}, {5, 12}, {12, 5}, {1, 9}, {9, 1}, {7, 8}, {8, 7}, {16, 3}, {3, 16}, {10, 10}, {13, 17}} {
		from, to := pr[0], pr[1]
		seen := map[int32]map[int32]bool{}
		for _, k := range keys {
			c := b.Func(k, to)
			if seen[c] == nil {
				seen[c] = map[int32]bool{}
			}
			seen[c][b.Func(k, from)] = true
		}
		for c := int32(0); c < to; c++ {
			rs := b.Ancestry(from, to, c)
			for _, r := range rs {
				for p := r.Lo; p < r.Hi; p++ {
					if !seen[c][p] {
						t.Errorf("linear-murmur2 ancestry(%d, %d, %d) = %v declares parent %d, which no key shows", from, to, c, rs, p)
					}
				}
			}
		}
	}
}

func TestLinearMurmur2AncestryFallback(t *testing.T) {
	// Shrinking from 2^31-1 to 3: child 0 is h ≡ 0 (mod 4), whose parents are the 2^29
	// multiples of 4 below 2^31-1: far over the limit, so the answer is the whole range.
	if rs := linearMurmur2Ancestry(0x7fffffff, 3, 0); len(rs) != 1 || rs[0] != (Range{0, 0x7fffffff}) {
		t.Errorf("ancestry(2^31-1, 3, 0) = %v, want [{0 2147483647}]", abbrevRanges(rs))
	}
	// Exactly at the limit: 8192 parents are listed, 8193 are not.
	if rs := linearMurmur2Ancestry(8192*4, 4, 1); len(rs) != 8192 {
		t.Errorf("ancestry(32768, 4, 1) has %d ranges, want 8192", len(rs))
	}
	if rs := linearMurmur2Ancestry(8192*4+2, 4, 1); len(rs) != 1 || rs[0] != (Range{0, 8192*4 + 2}) {
		t.Errorf("ancestry(32770, 4, 1) = %v, want the whole range", abbrevRanges(rs))
	}
}

// TestLinearHashingSplitsOnePartition: growing from n to n+1 moves keys out of exactly one
// partition, n - 2^floor(log2 n), and only into the new partition n.
func TestLinearHashingSplitsOnePartition(t *testing.T) {
	b, _ := Lookup("linear-murmur2")
	keys := testKeys(9, 20000, 20)
	ns := []int32{}
	for n := int32(1); n <= 300; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 1023, 1024, 65535, 1<<30-1, 1<<30, 0x7ffffffe)
	for _, n := range ns {
		split := n - int32(levelBase(uint32(n)))
		moved := 0
		for _, k := range keys {
			before, after := b.Func(k, n), b.Func(k, n+1)
			if before == after {
				continue
			}
			moved++
			if before != split || after != n {
				t.Fatalf("n=%d→%d: key %x moved %d→%d; only %d→%d may move", n, n+1, k, before, after, split, n)
			}
		}
		if n <= 300 && moved == 0 {
			t.Errorf("n=%d→%d: no key moved; partition %d should split", n, n+1, split)
		}
	}
}

// TestJumpMovesOnlyIntoNewPartitions: the property jump's declared ancestry rests on.
func TestJumpMovesOnlyIntoNewPartitions(t *testing.T) {
	b, _ := Lookup("jump")
	keys := testKeys(13, 5000, 20)
	for _, pr := range [][2]int32{{1, 2}, {2, 3}, {7, 8}, {10, 17}, {100, 101}, {1000, 5000}, {65535, 1 << 20}, {1 << 20, 0x7fffffff}} {
		n, m := pr[0], pr[1]
		for _, k := range keys {
			before, after := b.Func(k, n), b.Func(k, m)
			if before != after && after < n {
				t.Fatalf("jump n=%d→%d: key %x moved %d→%d, into an old partition", n, m, k, before, after)
			}
		}
	}
}
