//go:build wasip1

// Command kafka-murmur2-go is kafka-murmur2 for pctl, built with the standard
// Go toolchain: the Apache Kafka Java client's default partitioner for keyed
// records, toPositive(murmur2(key)) % n (spec/builtins.md). It must give the
// same partition as plugins/builtin/kafka-murmur2.wasm for every key and n.
//
// It is a WASI reactor (-buildmode=c-shared, //go:wasmexport), so it fits the
// wasi-deterministic profile of spec/abi-v1.md section 6.2: the Go runtime
// imports a few wasi_snapshot_preview1 functions, and nothing here lets a
// result depend on them. It is its own module so that `go vet ./...` at the
// repository root, which builds for the host, skips it. Build rule:
// `murmur2/kafka-murmur2-go.wasm` in plugins/Makefile.
package main

import "unsafe"

const (
	abiVersion = 1
	maxKey     = 65536
	maxBuffer  = 1 << 20
	eInvalid   = -1
)

// buf is the buffer of abi-v1 section 2.2. A package-level array lives in the
// module's data area: the Go garbage collector never moves it.
var buf [maxBuffer]byte

// bufSize is the size the host asked for; 0 until pctl_key_buffer.
var bufSize uint32

var metadata = []byte(`{"name":"kafka-murmur2-go","version":"1.0.0",` +
	`"description":"Kafka Java client default partitioner, built with Go",` +
	`"properties":["compatible:kafka-murmur2"]}`)

// murmur2 is MurmurHash2 exactly as Kafka's Utils.murmur2.
func murmur2(data []byte) uint32 {
	const m = 0x5bd1e995
	const r = 24
	h := uint32(0x9747b28c) ^ uint32(len(data))
	n4 := len(data) / 4
	for i := 0; i < n4; i++ {
		b := data[4*i : 4*i+4]
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[4*n4:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// partitionOf applies Kafka's toPositive (x & 0x7fffffff, not abs) and the
// remainder; n >= 1.
func partitionOf(key []byte, n uint32) uint32 {
	return (murmur2(key) & 0x7fffffff) % n
}

//go:wasmexport pctl_abi_version
func pctlABIVersion() int32 { return abiVersion }

//go:wasmexport pctl_key_buffer
func pctlKeyBuffer(size int32) int32 {
	if size < 1 || size > maxBuffer {
		return 0
	}
	bufSize = uint32(size)
	return int32(uintptr(unsafe.Pointer(&buf[0])))
}

//go:wasmexport pctl_partition
func pctlPartition(keyLen, n int32) int32 {
	if n < 1 || keyLen < 0 || keyLen > maxKey || uint32(keyLen) > bufSize {
		return eInvalid
	}
	return int32(partitionOf(buf[:keyLen], uint32(n)))
}

//go:wasmexport pctl_partition_batch
func pctlPartitionBatch(count, n int32) int32 {
	if n < 1 || count < 1 || uint32(count) > bufSize/4 {
		return eInvalid
	}
	off := 4 * uint32(count)
	for i := uint32(0); i < uint32(count); i++ {
		slot := buf[4*i : 4*i+4]
		l := uint32(slot[0]) | uint32(slot[1])<<8 | uint32(slot[2])<<16 | uint32(slot[3])<<24
		if l > maxKey || l > bufSize-off {
			return eInvalid
		}
		p := partitionOf(buf[off:off+l], uint32(n))
		slot[0], slot[1], slot[2], slot[3] = byte(p), byte(p>>8), byte(p>>16), byte(p>>24)
		off += l
	}
	return 0
}

//go:wasmexport pctl_metadata
func pctlMetadata() int64 {
	return int64(uintptr(unsafe.Pointer(&metadata[0])))<<32 | int64(len(metadata))
}

// main is not called in a reactor (-buildmode=c-shared); the runtime
// initialises in _initialize.
func main() {}
