//go:build wasip1

// Command my-partitioner is a pctl partitioner (ABI v1) built with the
// standard Go toolchain as a WASI reactor: GOOS=wasip1, -buildmode=c-shared,
// //go:wasmexport. The Go runtime imports a few wasi_snapshot_preview1
// functions (clock, random, fd_write...), so the module has the
// wasi-deterministic profile: hosts give it a fixed clock and a fixed random
// stream, and conformance runs it twice with different ones to prove that no
// result depends on them.
//
//	./build.sh                                   builds my-partitioner.wasm
//	pctl conformance my-partitioner.wasm         checks it
//	pctl partition --plugin ./my-partitioner.wasm --partitions 12 alice bob
//
// The function (the same in pctl's C, Go, Rust and AssemblyScript templates,
// which give identical partitions):
//
//	h = FNV-1a-64 over the key's bytes, starting from 0xcbf29ce484222325 ^ seed
//	h = fmix64(h)                  MurmurHash3's 64-bit finaliser
//	partition = h mod n            unsigned 64-bit remainder
//
// fmix64 is there because FNV-1a's low bits are weak (bit 0 of the hash is
// just the parity of the keys' bit 0s), and "mod n" for a small or
// power-of-two n reads mostly low bits. The seed comes from the optional
// config `seed=<u64>` (pctl ... --config seed=42). No seed means seed 0.
//
// Replace hash with your own function; keep the rest. In Go in particular:
// never let a result depend on map iteration order, math/rand, time.Now or a
// float's NaN bits, and do not allocate per call (the garbage collector is
// work the time limit counts). The build constraint above keeps `go vet` and
// editors on other platforms away from this file: use GOOS=wasip1 GOARCH=wasm.
package main

import "unsafe"

// ABI v1 constants and error codes (spec/abi-v1.md sections 1.3 and 5).
const (
	abiVersion   = 1
	maxKey       = 65536
	maxConfig    = 65536
	maxBuffer    = 1 << 20
	eInvalid     = -1
	eConfig      = -2
	eUnsupported = -3
)

// buf is the buffer (spec 2.2): the host writes keys and config here and reads
// results from here. A package-level array lives in the module's data area,
// and Go's garbage collector never moves it, so its address stays valid.
var buf [maxBuffer]byte

// bufSize is the size the host asked for; 0 until pctl_key_buffer.
var bufSize uint32

// seed is set once by pctl_configure, before any partition call.
var seed uint64

var metadata = []byte(`{"name":"my-partitioner","version":"0.1.0",` +
	`"description":"FNV-1a-64 of the key (optional seed), fmix64, modulo n",` +
	`"properties":["ancestry"]}`)

// hash is the function's 64-bit hash. uint64 arithmetic wraps, as it needs.
func hash(key []byte) uint64 {
	h := uint64(0xcbf29ce484222325) ^ seed
	for _, b := range key {
		h ^= uint64(b)
		h *= 0x100000001b3
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// partitionOf: 1 <= n <= 2^31-1. Unsigned remainder: int64(h) % n would be
// negative for half the keys. The result is < n, so it fits an int32.
func partitionOf(key []byte, n int32) int32 {
	return int32(hash(key) % uint64(n))
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func putLE32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// pctl_abi_version (spec 2.1): the ABI version, nothing else.
//
//go:wasmexport pctl_abi_version
func pctlABIVersion() int32 { return abiVersion }

// pctl_key_buffer (spec 2.2): called once per instance with
// 64 KiB <= size <= 1 MiB; returns the buffer's address. Every size in that
// range must succeed.
//
//go:wasmexport pctl_key_buffer
func pctlKeyBuffer(size int32) int32 {
	if size < 1 || size > maxBuffer {
		return 0
	}
	bufSize = uint32(size)
	return int32(uintptr(unsafe.Pointer(&buf[0])))
}

// pctl_configure (spec 2.5): the config is buf[:configLen], lines "K=V\n"
// sorted by K (pctl makes them from --config K=V). Copy what you need: the
// buffer is overwritten by the next call. Reject what you do not understand,
// unknown keys included: a typo must not silently give another layout.
//
//go:wasmexport pctl_configure
func pctlConfigure(configLen int32) int32 {
	if configLen < 0 || configLen > maxConfig || uint32(configLen) > bufSize {
		return eConfig
	}
	cfg := buf[:configLen]
	var s uint64
	haveSeed := false
	for len(cfg) > 0 {
		eol := indexByte(cfg, '\n')
		if eol < 0 {
			return eConfig // every line ends with '\n'
		}
		line := cfg[:eol]
		cfg = cfg[eol+1:]
		eq := indexByte(line, '=')
		if eq < 0 || string(line[:eq]) != "seed" { // no allocation: the compiler compares in place
			return eConfig // unknown key, or no '='
		}
		v, ok := parseU64(line[eq+1:])
		if haveSeed || !ok {
			return eConfig
		}
		s, haveSeed = v, true
	}
	seed = s
	return 0
}

// indexByte is bytes.IndexByte, without importing bytes.
func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// parseU64 parses 1 to 20 decimal digits, no sign, without overflow.
func parseU64(b []byte) (uint64, bool) {
	if len(b) < 1 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		d := uint64(c) - '0'
		if d > 9 || v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// pctl_partition (spec 2.3): the key is buf[:keyLen]. Must not write to the
// buffer. Check the arguments: never read past the key or the buffer.
//
//go:wasmexport pctl_partition
func pctlPartition(keyLen, n int32) int32 {
	if n < 1 || keyLen < 0 || keyLen > maxKey || uint32(keyLen) > bufSize {
		return eInvalid
	}
	return partitionOf(buf[:keyLen], n)
}

// pctl_partition_batch (spec 2.4): buf holds count u32 lengths, then the keys'
// bytes. Result i overwrites len[i], after len[i] was read; keys are found by
// the running sum of lengths. Results must equal pctl_partition's, key by key.
//
//go:wasmexport pctl_partition_batch
func pctlPartitionBatch(count, n int32) int32 {
	if n < 1 || count < 1 || uint32(count) > bufSize/4 {
		return eInvalid
	}
	off := 4 * uint32(count) // where the next key starts
	for i := uint32(0); i < uint32(count); i++ {
		slot := buf[4*i : 4*i+4]
		l := le32(slot)
		if l > maxKey || l > bufSize-off {
			return eInvalid
		}
		putLE32(slot, uint32(partitionOf(buf[off:off+l], n)))
		off += l
	}
	return 0
}

// pctl_metadata (spec 2.6): the same JSON document on every call.
//
//go:wasmexport pctl_metadata
func pctlMetadata() int64 {
	return int64(uintptr(unsafe.Pointer(&metadata[0])))<<32 | int64(len(metadata))
}

// pctl_ancestry (spec 2.7, optional): which partitions of fromN can a key of
// partition child of toN come from? For h mod n there is an exact answer when
// toN is a multiple of fromN (h mod fromN = (h mod toN) mod fromN): one
// parent. Otherwise decline, and hosts compute ancestry per key. Delete this
// export, and "ancestry" from the metadata, if your function has no such rule.
//
//go:wasmexport pctl_ancestry
func pctlAncestry(fromN, toN, child int32) int32 {
	if fromN < 1 || toN < 1 || child < 0 || child >= toN {
		return eInvalid
	}
	if toN%fromN != 0 {
		return eUnsupported
	}
	parent := uint32(child % fromN)
	putLE32(buf[0:4], parent)   // lo
	putLE32(buf[4:8], parent+1) // hi, exclusive
	return 1
}

// main is never called in a reactor (-buildmode=c-shared): the runtime starts
// in _initialize, which hosts call once per instance.
func main() {}
