// Package partitioner is pctl's Go API for partition functions.
//
// A Partitioner maps a key to one of n partitions. Two implementations exist and give
// bit-identical results (spec/builtins.md, checked by tests on millions of keys):
//
//   - WASM runs a partitioner module (spec/abi-v1.md) through pctl's wazero host, package
//     runtime. Any module works: the embedded built-ins, a user's own, one fetched by digest.
//   - Native runs a built-in's Go implementation (package partitioner/builtin), the reference and
//     the baseline of the benchmarks.
//
// A Library resolves the references users type (a built-in name, a digest, a file) to module
// bytes, and EncodeConfig turns `--config K=V` flags into the canonical config bytes of
// spec/abi-v1.md §2.5.
//
// Keyless records never reach a partitioner; an empty key is a key (spec/abi-v1.md §1.1).
// This package never imports NATS.
package partitioner
