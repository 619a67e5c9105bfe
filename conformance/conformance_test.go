package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pctl.dev/pctl/conformance"
	"pctl.dev/pctl/partitioner/builtin"
	"pctl.dev/pctl/plugins"
)

// testOptions are the options of the tests: the default key count, or fewer under -race.
func testOptions() conformance.Options {
	if raceEnabled {
		return conformance.Options{Keys: 1500}
	}
	return conformance.Options{}
}

func check(t *testing.T, wasm []byte, opts conformance.Options) *conformance.Report {
	t.Helper()
	rep, err := conformance.Check(context.Background(), wasm, opts)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if got := names(rep.Results); !slices.Equal(got, conformance.Checks()) {
		t.Fatalf("results %v, want every check in order %v", got, conformance.Checks())
	}
	for _, r := range rep.Results {
		if r.Reason == "" || strings.ContainsAny(r.Reason, "\r\n") {
			t.Errorf("%s: reason %q must be one non-empty line", r.Name, r.Reason)
		}
	}
	return rep
}

func names(rs []conformance.Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

func status(t *testing.T, rep *conformance.Report, name string) conformance.Result {
	t.Helper()
	r, ok := rep.Result(name)
	if !ok {
		t.Fatalf("no result %q", name)
	}
	return r
}

func table(rep *conformance.Report) string {
	var b bytes.Buffer
	rep.WriteText(&b)
	return b.String()
}

// wantStatus fails unless the named check has one of the statuses.
func wantStatus(t *testing.T, rep *conformance.Report, name string, want ...conformance.Status) {
	t.Helper()
	if r := status(t, rep, name); !slices.Contains(want, r.Status) {
		t.Errorf("%s: %s (%s), want %v\n%s", name, r.Status, r.Reason, want, table(rep))
	}
}

// TestBuiltinsPass: every built-in module passes every check, and each verifies its own
// compatible:<name> claim against the reference vectors. A failure here means a built-in module
// breaks the ABI or no longer matches its reference client: keys would remap for its users.
func TestBuiltinsPass(t *testing.T) {
	for _, name := range plugins.BuiltinNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wasm, _ := plugins.Builtin(name)
			rep := check(t, wasm, testOptions())
			if !rep.Passed {
				t.Fatalf("built-in %s fails conformance:\n%s", name, table(rep))
			}
			for _, c := range []string{conformance.CheckABI, conformance.CheckImports, conformance.CheckRange, conformance.CheckDeterminism, conformance.CheckCompatibility} {
				wantStatus(t, rep, c, conformance.StatusPass)
			}
			wantStatus(t, rep, conformance.CheckLimits, conformance.StatusPass, conformance.StatusWarn) // wall-clock: warn only
			b, _ := builtin.Lookup(name)
			if b.Ancestry != nil {
				wantStatus(t, rep, conformance.CheckAncestry, conformance.StatusPass)
			} else {
				wantStatus(t, rep, conformance.CheckAncestry, conformance.StatusSkip)
			}
			if name == "linear-murmur2" {
				// Linear hashing is unbalanced by design when n is not a power of two: partitions
				// [n-b, b) hold twice the keys of the others (spec/builtins.md). The check says so.
				wantStatus(t, rep, conformance.CheckBalance, conformance.StatusWarn)
			} else {
				wantStatus(t, rep, conformance.CheckBalance, conformance.StatusPass)
			}
			if rep.Module.Name != name || rep.Module.Profile != "portable" || !strings.HasPrefix(table(rep), "CHECK") ||
				!strings.Contains(table(rep), "PASS: "+name+" sha256:"+rep.Module.Digest[:12]) {
				t.Errorf("module info %+v, table:\n%s", rep.Module, table(rep))
			}
		})
	}
}

// TestMurmur2BuildsPass: kafka-murmur2 built by C, Go, AssemblyScript and Rust passes, and each
// build's compatible:kafka-murmur2 claim holds. The Go build is wasi-deterministic, so its
// determinism check also reruns it with another clock and random seed.
func TestMurmur2BuildsPass(t *testing.T) {
	for toolchain, wasm := range plugins.Murmur2Builds() {
		t.Run(toolchain, func(t *testing.T) {
			t.Parallel()
			opts := testOptions()
			opts.CacheDir = t.TempDir() // the Go build is compiled by two compiler runtimes
			rep := check(t, wasm, opts)
			if !rep.Passed {
				t.Fatalf("kafka-murmur2 (%s) fails conformance:\n%s", toolchain, table(rep))
			}
			wantStatus(t, rep, conformance.CheckCompatibility, conformance.StatusPass)
			wantStatus(t, rep, conformance.CheckDeterminism, conformance.StatusPass)
			det := status(t, rep, conformance.CheckDeterminism).Details.(conformance.DeterminismDetails)
			clock := det.Runs[0]
			if clock.Name != conformance.RunClockRandom {
				t.Fatalf("first determinism run is %q", clock.Name)
			}
			wantClock := conformance.StatusSkip
			if toolchain == "go" {
				wantClock = conformance.StatusPass
			}
			if clock.Status != wantClock || (wantClock == conformance.StatusPass && clock.Calls == 0) {
				t.Errorf("clock-and-random run: %+v, want %s", clock, wantClock)
			}
		})
	}
}

func hostile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "runtime", "testdata", "hostile", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostileModules: every module of runtime/testdata/hostile fails exactly the checks that
// catch what it does, and the first failing check's reason says what. (config-echo is benign
// and passes; see TestConfig.) spec/conformance.md has the same table.
func TestHostileModules(t *testing.T) {
	tests := []struct {
		file    string
		fail    []string // exactly these checks fail
		mention string   // the first failure's reason contains this
	}{
		{"loop-forever.wasm", []string{"range", "limits"}, "time limit"},
		{"exponential.wasm", []string{"range", "limits"}, "time limit"},
		{"memory-grow.wasm", []string{"range", "limits"}, "memory limit"},
		{"recurse.wasm", []string{"range", "limits"}, "call stack exhausted"},
		{"trap-some-keys.wasm", []string{"range"}, "key 0xff (1 byte), n=1: pctl_partition: plugin trapped"},
		{"out-of-range.wasm", []string{"range"}, "out of range"},
		{"proc-exit.wasm", []string{"range"}, "proc_exit(3)"},
		{"rand-clock.wasm", []string{"determinism"}, "depends on the clock/random stream"},
		{"forbidden-import.wasm", []string{"imports"}, "env.now"},
		{"forbidden-wasi-import.wasm", []string{"imports"}, "wasi_snapshot_preview1.fd_read"},
		{"wasi-wrong-signature.wasm", []string{"imports"}, "random_get"},
		{"missing-export.wasm", []string{"abi"}, `"pctl_partition"`},
		{"bad-signature.wasm", []string{"abi"}, `"pctl_partition" has signature (i32) -> (i32)`},
		{"abi-v2.wasm", []string{"abi"}, "ABI version 2"},
		{"not-wasm.wasm", []string{"abi"}, "not a WebAssembly module"},
		{"truncated.wasm", []string{"abi"}, "invalid WebAssembly module"},
		{"oversize.wasm", []string{"limits"}, "module too large: 8388906 bytes, the limit is 8388608"},
		{"memory-initial.wasm", []string{"limits"}, "513 initial memory pages"},
		{"config-echo.wasm", nil, ""},
		// Issue 11: bulk work, the table limit, what every host loads, limits hit at start.
		{"bulk-memory.wasm", []string{"range", "limits"}, "time limit"},
		{"bulk-table.wasm", []string{"range", "limits"}, "time limit"},
		{"wasi-bulk.wasm", []string{"range", "limits"}, "time limit"},
		{"bulk-trigger.wasm", nil, ""}, // hostile for one key conformance never tries: the broker test's module
		{"fuel-edge.wasm", nil, ""},    // hostile only for keys that start with "fuel" and have 9 bytes
		{"table-huge.wasm", []string{"limits"}, "table limit exceeded: table 0 declares 134217728 initial elements"},
		{"table-grow.wasm", nil, ""},
		{"elem-out-of-bounds.wasm", []string{"abi"}, "element segment 0 writes elements [1, 2) of table 0"},
		{"data-out-of-bounds.wasm", []string{"abi"}, "data segment 0 writes bytes [1114111, 1114113)"},
		{"start-loop.wasm", []string{"limits"}, "time limit exceeded: while loading: start"},
		{"start-memory.wasm", []string{"limits"}, "memory limit exceeded: while loading: start"},
		{"metadata-invalid-utf8.wasm", []string{"abi"}, "not valid UTF-8"},
		{"metadata-bom.wasm", []string{"abi"}, "byte-order mark"},
		{"metadata-nan.wasm", []string{"abi"}, "invalid plugin metadata"},
		{"metadata-deep.wasm", []string{"abi"}, "nest 2001 deep"},
		{"metadata-key-case.wasm", []string{"abi"}, `metadata name ""`},
		{"metadata-null-property.wasm", []string{"abi"}, "list of strings"},
		{"metadata-description-type.wasm", []string{"abi"}, `"description" must be a string`},
		{"metadata-big-number.wasm", nil, ""},
	}
	files, _ := filepath.Glob(filepath.Join("..", "runtime", "testdata", "hostile", "*.wasm"))
	if len(files) != len(tests) {
		t.Errorf("runtime/testdata/hostile has %d modules, this table %d: add the new ones", len(files), len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			rep := check(t, hostile(t, tc.file), testOptions())
			if got := rep.Failed(); !slices.Equal(got, tc.fail) {
				t.Fatalf("failed checks %v, want %v\n%s", got, tc.fail, table(rep))
			}
			if rep.Passed != (len(tc.fail) == 0) {
				t.Fatalf("Passed = %v with failures %v", rep.Passed, tc.fail)
			}
			if len(tc.fail) == 0 {
				return
			}
			if r := status(t, rep, tc.fail[0]); !strings.Contains(r.Reason, tc.mention) {
				t.Errorf("%s reason %q does not mention %q", r.Name, r.Reason, tc.mention)
			}
			if !strings.Contains(table(rep), "FAIL: ") {
				t.Errorf("no FAIL summary:\n%s", table(rep))
			}
		})
	}
}

// TestRuleBreakers: one small module per rule that the hostile modules do not break, and the
// check (and for determinism, the run) that must catch it. Sources in modules_test.go.
func TestRuleBreakers(t *testing.T) {
	tests := []struct {
		module  string
		fail    string // the one failing check ("" = passes)
		run     string // for determinism: the first failing run
		warn    string // a check that must warn
		mention string
	}{
		{module: "stateful", fail: "determinism", run: conformance.RunFresh, mention: "depends on call history"},
		{module: "batch-differs", fail: "determinism", run: conformance.RunBatch, mention: "batch and single calls disagree"},
		{module: "metadata-shifts", fail: "determinism", run: conformance.RunInterleaved, mention: "pctl_metadata/pctl_ancestry change results"},
		{module: "false-compat", fail: "compatibility", mention: "not compatible with kafka-murmur2: key"},
		{module: "unknown-compat", fail: "compatibility", mention: "compatible:no-such-builtin, which is not a built-in"},
		{module: "bad-ancestry", fail: "ancestry", mention: "is not a declared parent"},
		{module: "coarse-ancestry"},
		{module: "declines-ancestry", warn: "ancestry", mention: "declined all"},
		{module: "big-memory", warn: "limits", mention: "memory grew to 300 pages"},
	}
	for _, tc := range tests {
		t.Run(tc.module, func(t *testing.T) {
			t.Parallel()
			rep := check(t, testModuleNamed(t, tc.module), testOptions())
			var want []string
			if tc.fail != "" {
				want = []string{tc.fail}
			}
			if got := rep.Failed(); !slices.Equal(got, want) {
				t.Fatalf("failed checks %v, want %v\n%s", got, want, table(rep))
			}
			if tc.mention != "" {
				name := tc.fail + tc.warn
				if r := status(t, rep, name); !strings.Contains(r.Reason, tc.mention) {
					t.Errorf("%s reason %q does not mention %q", name, r.Reason, tc.mention)
				}
			}
			if tc.warn != "" {
				wantStatus(t, rep, tc.warn, conformance.StatusWarn)
			}
			if tc.run != "" {
				det := status(t, rep, conformance.CheckDeterminism).Details.(conformance.DeterminismDetails)
				first := ""
				for _, r := range det.Runs {
					if r.Status == conformance.StatusFail {
						first = r.Name
						break
					}
				}
				if first != tc.run {
					t.Errorf("first failing determinism run %q, want %q: %+v", first, tc.run, det.Runs)
				}
			}
		})
	}
}

// TestConfig: the config reaches every instance; a config the module rejects, or a config for a
// module that takes none, fails abi with a reason that says so, and nothing else runs.
func TestConfig(t *testing.T) {
	echo := hostile(t, "config-echo.wasm")
	t.Run("accepted", func(t *testing.T) {
		opts := testOptions()
		opts.Config = []byte("a=1\n")
		rep := check(t, echo, opts)
		if !rep.Passed || rep.Options.Config != "a=1\n" {
			t.Fatalf("config-echo with a config: passed=%v options=%+v\n%s", rep.Passed, rep.Options, table(rep))
		}
		if r := status(t, rep, conformance.CheckABI); !strings.Contains(r.Reason, "config of 4 bytes accepted") {
			t.Errorf("abi reason %q", r.Reason)
		}
	})
	for _, tc := range []struct {
		name, module string
		config       string
		mention      string
	}{
		{"rejected", "config-echo", "!x=1\n", `plugin rejected the config "!x=1\n"`},
		{"not configurable", "kafka-murmur2", "a=1\n", "plugin takes no configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wasm := echo
			if tc.module != "config-echo" {
				wasm, _ = plugins.Builtin(tc.module)
			}
			opts := testOptions()
			opts.Config = []byte(tc.config)
			rep := check(t, wasm, opts)
			if got := rep.Failed(); !slices.Equal(got, []string{"abi"}) {
				t.Fatalf("failed %v, want [abi]\n%s", got, table(rep))
			}
			if r := status(t, rep, conformance.CheckABI); !strings.Contains(r.Reason, tc.mention) {
				t.Errorf("abi reason %q does not mention %q", r.Reason, tc.mention)
			}
			wantStatus(t, rep, conformance.CheckImports, conformance.StatusPass)
			for _, c := range conformance.Checks()[2:] {
				wantStatus(t, rep, c, conformance.StatusSkip)
			}
		})
	}
}

// TestReportIsReproducible: the same module and options give the same report, except for the
// wall-clock timings of limits; a different seed gives different keys.
func TestReportIsReproducible(t *testing.T) {
	wasm, _ := plugins.Builtin("jump")
	opts := testOptions()
	opts.Keys = 500
	strip := func(rep *conformance.Report) string {
		for i := range rep.Results {
			if rep.Results[i].Name == conformance.CheckLimits {
				rep.Results[i].Reason, rep.Results[i].Details = "", nil
			}
		}
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a, b := strip(check(t, wasm, opts)), strip(check(t, wasm, opts))
	if a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
	opts.Seed = 2
	if c := strip(check(t, wasm, opts)); c == a {
		t.Fatal("seed 2 gives the same report as seed 1")
	}
}

// TestJSONSchema pins the report's JSON field names (spec/conformance.md): tools parse them.
func TestJSONSchema(t *testing.T) {
	wasm, _ := plugins.Builtin("linear-murmur2")
	opts := testOptions()
	opts.Keys = 300
	rep := check(t, wasm, opts)
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	wantKeys := func(what string, m map[string]any, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s has no %q: %v", what, k, m)
			}
		}
	}
	wantKeys("report", doc, "schema", "module", "options", "results", "passed")
	if doc["schema"] != float64(1) {
		t.Errorf("schema %v", doc["schema"])
	}
	wantKeys("module", doc["module"].(map[string]any), "digest", "name", "version", "abi_version", "profile", "size", "imports", "exports", "properties")
	wantKeys("options", doc["options"].(map[string]any), "keys", "seed", "config", "engine")
	details := map[string][]string{
		"abi":           {"abi_version", "exports", "initial_memory_pages", "configurable", "config_bytes"},
		"imports":       {"profile", "imports"},
		"range":         {"partitions", "keys", "fixed_keys", "max_key_bytes", "calls"},
		"determinism":   {"partitions", "keys", "interpreter_keys", "runs"},
		"limits":        {"calls", "time_p50_ns", "time_p99_ns", "time_max_ns", "work_p99", "work_max", "work_limit", "peak_memory_pages", "memory_limit_pages", "module_bytes", "module_limit_bytes"},
		"ancestry":      {"pairs"},
		"compatibility": {"claims"},
		"balance":       {"tests"},
	}
	for _, r := range doc["results"].([]any) {
		res := r.(map[string]any)
		wantKeys("result", res, "name", "status", "reason", "details")
		wantKeys(res["name"].(string)+" details", res["details"].(map[string]any), details[res["name"].(string)]...)
	}
}

// TestNotLoadedModuleJSON: a module that did not load still gives a full report.
func TestNotLoadedModuleJSON(t *testing.T) {
	rep := check(t, []byte("not a module"), testOptions())
	if rep.Passed || rep.Module.Digest == "" || rep.Module.Size != 12 {
		t.Fatalf("%+v", rep)
	}
	var buf bytes.Buffer
	rep.WriteJSON(&buf)
	if !strings.Contains(buf.String(), `"error": "module: not a WebAssembly module`) {
		t.Errorf("abi details lack the runtime's error:\n%s", buf.String())
	}
}

func TestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wasm, _ := plugins.Builtin("kafka-murmur2")
	if _, err := conformance.Check(ctx, wasm, testOptions()); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
