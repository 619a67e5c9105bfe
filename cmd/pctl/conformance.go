package main

import (
	"fmt"

	"pctl.dev/pctl/conformance"
	"pctl.dev/pctl/internal/progress"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/runtime"
)

func init() {
	register(command{name: "conformance", summary: "check a plugin against ABI v1: exports, imports, range, determinism, limits, ancestry, compatibility ('conformance client': a client, with faults)", run: cmdConformance})
}

const conformanceHelp = `
Checks a partitioner module against spec/abi-v1.md and prints one line per check, then PASS or
FAIL. The checks, in order:

  abi            required exports and signatures, memory, ABI version, instance set-up with --config
  imports        fits the portable or the wasi-deterministic import profile
  range          every key (empty, every byte, up to 64 KiB, random) and n (1 to 2^31-1): a
                 partition in [0, n), no trap, no limit
  determinism    the same results from fresh and long-used instances, in reverse order, in batches,
                 with metadata/ancestry calls in between, on the interpreter, and (wasi modules)
                 with another clock and random seed
  limits         time and work per call, peak memory, module size (warns; fails on a hit limit)
  ancestry       declared parents contain every key's old partition (if "ancestry" is declared)
  compatibility  bit-identical to each claimed built-in on its reference vectors and random keys
  balance        chi-square of the partition sizes (warns only)

A module the runtime refuses (not WebAssembly, a missing export, a forbidden import, too large)
fails the check that owns the rule, with the runtime's message; checks that need a running
module are then skipped. A config the module rejects fails abi.

Exit status: 0 all checks pass (warnings allowed), 1 a check failed, 2 bad usage (unknown
plugin, unreadable file, bad flags). --json prints the report as JSON (schema:
spec/conformance.md). Same module, keys and seed: same report, timings aside.

'pctl conformance client --producer CMD --consumer CMD' checks a client instead (any language:
its produce and consume commands, against a real broker with faults); see its --help.

Examples:
  pctl conformance kafka-murmur2
  pctl conformance ./my-partitioner.wasm --json > report.json
  pctl conformance ./my-partitioner.wasm --config mode=fast --keys 200000 --seed 7
`

// maxConformanceKeys bounds --keys: the checks hold every key and result in memory.
const maxConformanceKeys = 10_000_000

func cmdConformance(e *env, args []string) int {
	if len(args) > 0 && args[0] == "client" {
		return cmdConformanceClient(e, args[1:]) // conformance_client.go (a plugin file named client: ./client)
	}
	fs := newFlags(e, "conformance", "conformance NAME|sha256:DIGEST|FILE.wasm [--json] [--keys N] [--seed S] [--config K=V ...]", conformanceHelp)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	keys := fs.Int("keys", conformance.DefaultKeys, "random keys per check, besides the fixed ones (the interpreter gets a thirtieth)")
	seed := fs.Uint64("seed", 1, "seed of the random keys (>= 1); the same seed gives the same keys")
	var config multiFlag
	fs.Var(&config, "config", "partitioner config `K=V` given to every instance (repeatable)")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) != 1 {
		return usageErr(e, "conformance", "give exactly one plugin (a built-in name, sha256:DIGEST or a .wasm file); see 'pctl plugin list'")
	}
	if *keys < 1 || *keys > maxConformanceKeys {
		return usageErr(e, "conformance", "--keys %d is out of range; give 1 to %d", *keys, maxConformanceKeys)
	}
	if *seed == 0 {
		return usageErr(e, "conformance", "--seed 0: give a seed of 1 or more")
	}
	cfg, err := partitioner.EncodeConfig(config)
	if err != nil {
		return usageErr(e, "conformance", "%v", err)
	}
	if len(cfg) > runtime.MaxConfigBytes {
		return usageErr(e, "conformance", "config of %d bytes; the limit is %d (spec/abi-v1.md §2.5)", len(cfg), runtime.MaxConfigBytes)
	}

	// The library only resolves the reference (built-in, digest or file); Check makes its own
	// runtimes, sharing the on-disk compilation cache.
	lib, err := newLibrary(e, runtime.Config{})
	if err != nil {
		return failErr(e, "conformance", err)
	}
	wasm, src, err := lib.Resolve(pos[0])
	lib.Runtime().Close(e.ctx)
	if err != nil {
		return openErr(e, "conformance", err)
	}
	bar := progress.New(e.stderr, e.getenv, 8, "conformance: loading", "checks")
	rep, err := conformance.Check(e.ctx, wasm, conformance.Options{Keys: *keys, Seed: *seed, Config: cfg, CacheDir: cacheDir(e),
		Progress: func(check string, i, n int) {
			bar.Set(int64(2 + i)) // abi and imports are done before the first of these
			bar.Describe("conformance: %s", check)
		}})
	bar.Finish()
	if err != nil {
		if e.ctx.Err() != nil {
			return usageFail(e, "conformance", "interrupted: no report (the checks did not finish)")
		}
		return failErr(e, "conformance", err)
	}
	rep.Module.Source = src
	if *asJSON {
		err = rep.WriteJSON(e.stdout)
	} else {
		err = rep.WriteText(e.stdout)
	}
	if err != nil {
		return failErr(e, "conformance", fmt.Errorf("write report: %w", err))
	}
	if !rep.Passed {
		return exitFailure
	}
	return exitOK
}
