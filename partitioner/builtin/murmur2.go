package builtin

import (
	"encoding/binary"
	"math/bits"
)

// Murmur2 is the 32-bit MurmurHash2 exactly as the Apache Kafka Java client computes it
// (org.apache.kafka.common.utils.Utils.murmur2: seed 0x9747b28c, little-endian blocks),
// returned as Java's signed int. Kafka's partition is (Murmur2(key) & 0x7fffffff) % n.
func Murmur2(key []byte) int32 {
	const (
		m = 0x5bd1e995
		r = 24
	)
	h := uint32(0x9747b28c) ^ uint32(len(key))
	b := key
	for len(b) >= 4 {
		k := binary.LittleEndian.Uint32(b)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		b = b[4:]
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// kafkaMurmur2 is Kafka's BuiltInPartitioner.partitionForKey: toPositive is x & 0x7fffffff,
// not abs(x).
func kafkaMurmur2(key []byte, n int32) int32 {
	mustN(n)
	return int32((uint32(Murmur2(key)) & 0x7fffffff) % uint32(n))
}

// linearMurmur2 applies linear hashing to the non-negative murmur2 hash.
func linearMurmur2(key []byte, n int32) int32 {
	mustN(n)
	return linearFromHash(uint32(Murmur2(key))&0x7fffffff, uint32(n))
}

// linearFromHash is the linear hashing rule of spec/builtins.md for a 31-bit hash h and
// n >= 1: with b the largest power of two <= n, h % 2b, folded back by b when >= n.
func linearFromHash(h, n uint32) int32 {
	b := levelBase(n)
	p := h & (2*b - 1) // 2b <= 2^31, so 2b-1 fits
	if p >= n {
		p -= b
	}
	return int32(p)
}

// levelBase returns 2^floor(log2(n)) for n >= 1.
func levelBase(n uint32) uint32 {
	return uint32(1) << (bits.Len32(n) - 1)
}

// maxLinearRanges bounds the answer of linearMurmur2Ancestry; above it the answer is the
// whole old range (sound, and what a WASM module with a 64 KiB buffer could still return).
const maxLinearRanges = 8192

// linearMurmur2Ancestry is exact (spec/builtins.md, "Derivation of the ancestry").
//
// Under toN, child c holds exactly the hashes h ≡ c (mod M), with M = 2b' if c < toN-b' or
// c >= b', else M = b' (b' = levelBase(toN)). Every such residue occurs among 31-bit
// hashes. Under fromN (base b), a hash's partition depends only on h mod 2b:
//   - M >= 2b: the class fixes h mod 2b = c mod 2b, so there is one parent;
//   - M <= b: h mod 2b runs over every r ≡ c (mod M) in [0, 2b); those r < fromN stay, the
//     others fold to r-b, again ≡ c (mod M) and < fromN. The parents are therefore exactly
//     {x in [0, fromN) : x ≡ c (mod M)}.
func linearMurmur2Ancestry(fromN, toN, child int32) []Range {
	if !validAncestryArgs(fromN, toN, child) {
		return nil
	}
	c, to, from := uint32(child), uint32(toN), uint32(fromN)
	bt := levelBase(to)
	m := bt
	if c < to-bt || c >= bt {
		m = 2 * bt
	}
	bf := levelBase(from)
	if m >= 2*bf {
		p := linearFromHash(c&(2*bf-1), from)
		return []Range{{p, p + 1}}
	}
	if m == 1 {
		return []Range{{0, fromN}}
	}
	// m >= 2: the parents c mod m, c mod m + m, ... are isolated points.
	first := c & (m - 1)
	count := (from-first-1)/m + 1 // first < m <= bf <= from
	if count > maxLinearRanges {
		return []Range{{0, fromN}}
	}
	out := make([]Range, 0, count)
	for x := first; x < from; x += m {
		out = append(out, Range{int32(x), int32(x) + 1})
	}
	return out
}
