package clientconf_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/conformance/clientconf"
)

// The binaries the tests drive, built once per test binary: pctl (the Go client's adapters run
// $PCTL produce / $PCTL consume) and testdata/broken (a wrapper that breaks a sound client).
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func binaries(t *testing.T) (pctl, broken string) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "pctl-clientconf-bin-"); buildErr != nil {
			return
		}
		for _, b := range []struct{ out, pkg string }{
			{"pctl", "pctl.dev/pctl/cmd/pctl"},
			{"broken", "./testdata/broken"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b.out), b.pkg)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v: %s", b.pkg, err, stderr.String())
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "pctl"), filepath.Join(binDir, "broken")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func goAdapter(name string) string {
	p, _ := filepath.Abs(filepath.Join("go", name))
	return p
}

func logf(t *testing.T) func(string, ...any) {
	return func(format string, args ...any) { t.Logf(format, args...) }
}

func runHarness(t *testing.T, opts clientconf.Options) *clientconf.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opts.Logf = logf(t)
	rep, err := clientconf.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", buf.String())
	return rep
}

// TestHarnessFailsBrokenClients: the harness fails a client that breaks a rule, in the row that
// runs it and with the check that owns the rule; the same client unbroken passes that row. Each
// broken client is the sound Go client (pctl produce / pctl consume) behind testdata/broken,
// which drops, reorders, duplicates or misplaces deliveries, or leaves out producer results.
func TestHarnessFailsBrokenClients(t *testing.T) {
	pctl, broken := binaries(t)
	env := []string{"PCTL=" + pctl}
	prod, cons := []string{goAdapter("produce")}, []string{goAdapter("consume")}
	cases := []struct {
		name      string
		producer  []string
		consumer  []string
		scenario  string
		wantFail  string // a substring of the row's failures; "" means the row passes
		wantNoHit string // a substring no failure may contain (the other checks stay quiet)
	}{
		{"sound client", prod, cons, "baseline", "", ""},
		{"drops deliveries", prod, append([]string{broken, "drop"}, cons...), "baseline", "acknowledged records lost", "placement"},
		{"reorders a key", prod, append([]string{broken, "reorder"}, cons...), "baseline", "per-key order violations", "lost"},
		{"misplaces records", prod, append([]string{broken, "misplace"}, cons...), "baseline", "placement (consumer)", "verify"},
		{"duplicates without a crash", prod, append([]string{broken, "duplicate"}, cons...), "baseline", "duplicates and no crash", "lost"},
		{"reports a storage order that breaks a key's", append([]string{broken, "early-seq"}, prod...), cons, "baseline", "order (producer)", "verify"},
		{"leaves out producer results", append([]string{broken, "no-result"}, prod...), cons, "baseline", "producer: no result for", "placement"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runHarness(t, clientconf.Options{Producer: tc.producer, Consumer: tc.consumer, Scenarios: []string{tc.scenario}, Env: env, Seed: 1})
			row := rep.Row(tc.scenario)
			if row == nil {
				t.Fatalf("no row %s in the report", tc.scenario)
			}
			fails := strings.Join(row.Failures, " || ")
			if tc.wantFail == "" {
				if !row.Passed || !rep.Passed {
					t.Fatalf("the sound client failed %s: %s", tc.scenario, fails)
				}
				return
			}
			if row.Passed || rep.Passed {
				t.Fatalf("the broken client passed %s; want a failure with %q", tc.scenario, tc.wantFail)
			}
			if !strings.Contains(fails, tc.wantFail) {
				t.Errorf("row %s failed with %q; want a failure with %q", tc.scenario, fails, tc.wantFail)
			}
			if tc.wantNoHit != "" && strings.Contains(fails, tc.wantNoHit) {
				t.Errorf("row %s failed with %q: another check (%q) fired too", tc.scenario, fails, tc.wantNoHit)
			}
		})
	}
}

// TestUsage: bad options are usage errors (the CLI's exit 2), before any broker starts.
func TestUsage(t *testing.T) {
	ctx := context.Background()
	cases := []clientconf.Options{
		{Consumer: []string{goAdapter("consume")}},
		{Producer: []string{goAdapter("produce")}, Consumer: []string{"/nonexistent/consume"}},
		{Producer: []string{goAdapter("produce")}, Consumer: []string{goAdapter("consume")}, Scenarios: []string{"no-such-row"}},
	}
	for i, o := range cases {
		if _, err := clientconf.Run(ctx, o); err == nil || !strings.Contains(err.Error(), "bad usage") {
			t.Errorf("case %d: Run = %v, want a usage error", i, err)
		}
	}
}

// seeds is how many seeds the implementations' runs take: 1, or PCTL_CLIENTCONF_SEEDS.
func seeds(t *testing.T) []uint64 {
	n := 1
	if s := os.Getenv("PCTL_CLIENTCONF_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("PCTL_CLIENTCONF_SEEDS=%q: give a count of 1 or more", s)
		}
		n = v
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// requireToolchains: CI (scripts/test.sh) sets PCTL_REQUIRE_TOOLCHAINS=1; then an SDK that cannot
// take part fails the test instead of being skipped.
func requireToolchains() bool { return os.Getenv("PCTL_REQUIRE_TOOLCHAINS") == "1" }

// implementation is a client under test: its producer and consumer commands.
type implementation struct {
	name               string
	producer, consumer []string
	ackArgs            []string
	setup              string // the SDK's setup executable, run once per test binary; "" for Go
}

func implementations(t *testing.T) []implementation {
	root, err := filepath.Abs("../../sdk")
	if err != nil {
		t.Fatal(err)
	}
	sdk := func(lang string, ack ...string) implementation {
		d := filepath.Join(root, lang)
		return implementation{name: lang, producer: []string{filepath.Join(d, "produce")}, consumer: []string{filepath.Join(d, "consume")}, ackArgs: ack, setup: filepath.Join(d, "setup")}
	}
	return []implementation{
		{name: "go", producer: []string{goAdapter("produce")}, consumer: []string{goAdapter("consume")}},
		sdk("node"),
		sdk("python", "--ack-timeout", "0.05"), // seconds: the Python SDK's produce takes one
		sdk("java"),
	}
}

// knownFailing are rows an implementation fails today because of a bug in the client, named
// here; CI does not run them (PCTL_CLIENTCONF_ALL=1 runs every row). A row leaves this list
// when the bug is fixed.
var knownFailing = map[string]map[string]string{}

var (
	setupMu   sync.Mutex
	setupDone = map[string]error{}
)

// setupSDK runs an SDK's setup once per test binary.
func setupSDK(im implementation) error {
	setupMu.Lock()
	defer setupMu.Unlock()
	if err, ok := setupDone[im.name]; ok {
		return err
	}
	var err error
	if fi, serr := os.Stat(im.setup); serr != nil || fi.Mode()&0o111 == 0 {
		err = fmt.Errorf("no executable %s", im.setup)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, im.setup)
		cmd.Dir = filepath.Dir(im.setup)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if rerr := cmd.Run(); rerr != nil {
			err = fmt.Errorf("%s: %v: %s", im.setup, rerr, strings.TrimSpace(stderr.String()))
		}
	}
	setupDone[im.name] = err
	return err
}

// TestImplementations runs the harness against the Go client (pctl produce / pctl consume through
// go/produce and go/consume) and every SDK's produce and consume commands: one seed by default
// (PCTL_CLIENTCONF_SEEDS=N for more), every row but the known failing ones (PCTL_CLIENTCONF_ALL=1
// runs those too). An SDK whose setup fails is skipped, unless PCTL_REQUIRE_TOOLCHAINS=1.
func TestImplementations(t *testing.T) {
	pctl, _ := binaries(t)
	all := os.Getenv("PCTL_CLIENTCONF_ALL") == "1"
	for _, im := range implementations(t) {
		t.Run(im.name, func(t *testing.T) {
			if im.setup != "" {
				if err := setupSDK(im); err != nil {
					if requireToolchains() {
						t.Fatalf("sdk/%s cannot take part (PCTL_REQUIRE_TOOLCHAINS=1): %v", im.name, err)
					}
					t.Skipf("sdk/%s cannot take part: %v (with PCTL_REQUIRE_TOOLCHAINS=1 this fails)", im.name, err)
				}
			}
			var rows []string
			for _, s := range clientconf.Scenarios() {
				if bug, ok := knownFailing[im.name][s]; ok && !all {
					t.Logf("ROW NOT RUN: %s %s fails because of a known bug: %s (PCTL_CLIENTCONF_ALL=1 runs it)", im.name, s, bug)
					continue
				}
				rows = append(rows, s)
			}
			for _, seed := range seeds(t) {
				rep := runHarness(t, clientconf.Options{Producer: im.producer, Consumer: im.consumer, AckArgs: im.ackArgs, Seed: seed, Scenarios: rows, Env: []string{"PCTL=" + pctl}})
				for _, row := range rep.Scenarios {
					if !row.Passed {
						t.Errorf("%s, seed %d: row %s failed: %s", im.name, seed, row.Name, strings.Join(row.Failures, " || "))
					}
				}
			}
		})
	}
}
