// Package conformance checks a partitioner module against ABI v1 (spec/abi-v1.md): the checker
// behind `pctl conformance`, and what the broker runs before it trusts a plugin.
//
// Check runs eight checks, always in this order and under these stable names:
//
//	abi            required exports and signatures, memory, ABI version; instance set-up with the config
//	imports        the module fits the portable or the wasi-deterministic import profile
//	range          every key and n of a fixed set: a partition in [0, n), no trap, no limit hit
//	determinism    the same results however they are computed (fresh or long-used instances, reverse
//	               order, batches, metadata/ancestry calls in between, the interpreter, another
//	               WASI clock and random seed)
//	limits         time and deterministic work per call, peak memory, module size
//	ancestry       declared split ancestry contains every observed parent
//	compatibility  each compatible:<builtin> claim holds on the reference vectors and random keys
//	balance        chi-square of the partition histogram (warns only)
//
// Each yields a Result with a Status (pass, fail, warn, skip), a one-line Reason and typed
// Details (RangeDetails, DeterminismDetails, ...). A Report passes when no result fails; warnings
// do not fail it. Everything wrong with a module is a failed Result, never an error: even bytes
// that are not WebAssembly give a report (abi fails). A module the runtime refuses fails the check
// that owns the broken rule (imports for imports; limits for size, initial memory and limits hit
// while initialising; abi for the rest) and the checks that need a running module are skipped.
//
// The checks run on pctl's own runtime (package runtime, wazero) with the default limits of
// spec/abi-v1.md §7, on the compiler and, for determinism, the interpreter. Keys are the fixed
// keys (the empty key, every single byte, all 256 byte values, long keys up to PCTL_MAX_KEY) and
// Options.Keys distinct random keys (binary and UTF-8) from Options.Seed: the same module, options
// and pctl version give the same report, except for wall-clock times in limits.
//
// spec/conformance.md documents every check's parameters, the JSON report (Report, field by
// field, with each check's Details), and which hostile module of runtime/testdata/hostile each
// check catches.
package conformance
