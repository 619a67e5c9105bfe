// Package plugins holds pctl's own partitioner modules as WebAssembly bytes:
// the six built-ins of spec/builtins.md, built from C, and kafka-murmur2
// built by three more toolchains (Go, AssemblyScript, Rust) so that every
// host and the conformance suite can check that one partition function gives
// the same partitions whatever language produced its module.
//
// The .wasm files are committed next to their sources and embedded here; they
// are rebuilt by `make plugins` (plugins/Makefile), and reproducible_test.go
// checks that the committed bytes are exactly what the pinned toolchains
// produce. A module is identified by the SHA-256 of its bytes (spec/abi-v1.md
// section 1), so a change to any byte here is a different partitioner: the
// bytes returned are shared, and callers must not modify them.
//
// The package has no dependencies beyond the standard library, and all its
// functions are safe for concurrent use.
package plugins

import (
	"embed"
	"sort"
)

//go:embed builtin/*.wasm murmur2/*.wasm
var files embed.FS

// builtinNames are the built-ins of spec/builtins.md, each in
// builtin/<name>.wasm (from builtin/c/<name>.c).
var builtinNames = []string{
	"jump",
	"kafka-murmur2",
	"librdkafka-consistent",
	"librdkafka-fnv1a",
	"linear-murmur2",
	"sarama-fnv1a",
}

// murmur2Files maps a toolchain to its build of kafka-murmur2.
var murmur2Files = map[string]string{
	"c":              "builtin/kafka-murmur2.wasm",
	"go":             "murmur2/kafka-murmur2-go.wasm",
	"assemblyscript": "murmur2/kafka-murmur2-as.wasm",
	"rust":           "murmur2/kafka-murmur2-rust.wasm",
}

func mustRead(path string) []byte {
	b, err := files.ReadFile(path)
	if err != nil {
		// The go:embed pattern above and the tables here disagree: a build
		// defect, not a runtime condition.
		panic("plugins: embedded module missing: " + path + ": " + err.Error())
	}
	return b
}

// Builtin returns the WebAssembly module of the built-in partitioner name
// (one of BuiltinNames), and whether there is one. The module is a
// `portable` one (no imports) implementing ABI v1, with the exports
// pctl_partition, pctl_partition_batch and pctl_metadata, and pctl_ancestry
// for linear-murmur2 and jump. The returned slice is shared: do not modify it.
func Builtin(name string) ([]byte, bool) {
	i := sort.SearchStrings(builtinNames, name)
	if i == len(builtinNames) || builtinNames[i] != name {
		return nil, false
	}
	return mustRead("builtin/" + name + ".wasm"), true
}

// BuiltinNames returns the names of the built-in partitioners, sorted. The
// slice is a fresh copy.
func BuiltinNames() []string {
	return append([]string(nil), builtinNames...)
}

// Murmur2Builds returns the builds of kafka-murmur2 by toolchain: "c" (the
// built-in, freestanding C), "go" (GOOS=wasip1, the wasi-deterministic
// profile), "assemblyscript" and "rust" (both portable). All four must give
// bit-identical partitions; each declares "compatible:kafka-murmur2" in its
// metadata under its own name (kafka-murmur2, kafka-murmur2-go,
// kafka-murmur2-as, kafka-murmur2-rust). The map is a fresh copy; the byte
// slices are shared: do not modify them.
func Murmur2Builds() map[string][]byte {
	m := make(map[string][]byte, len(murmur2Files))
	for toolchain, path := range murmur2Files {
		m[toolchain] = mustRead(path)
	}
	return m
}
