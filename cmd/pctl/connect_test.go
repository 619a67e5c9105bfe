package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// testBroker runs a real embedded broker (NATS + JetStream) on a random port in a temp dir.
func testBroker(t testing.TB) *broker.Broker {
	t.Helper()
	return testBrokerIn(t, t.TempDir())
}

func testBrokerIn(t testing.TB, dir string) *broker.Broker {
	t.Helper()
	b, err := broker.Start(context.Background(), broker.Config{DataDir: dir, Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// cliResult is what one in-process run of pctl printed and returned.
type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// pctlAs drives the CLI in-process against a broker, with a role's credentials.
type pctlAs struct {
	t      testing.TB
	url    string
	creds  string
	getenv func(string) string
}

func cliFor(t testing.TB, b *broker.Broker, role string) *pctlAs {
	return &pctlAs{t: t, url: b.ClientURL(), creds: b.CredsPath(role)}
}

// run runs "pctl args... --server URL --creds FILE" with stdin.
func (p *pctlAs) run(stdin string, args ...string) cliResult {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append(append([]string(nil), args...), "--server", p.url, "--creds", p.creds)
	if args[0] == "consume" {
		full = append(full, "--heartbeat", "100ms") // stops sooner
	}
	return runCLI(ctx, p.getenv, strings.NewReader(stdin), full...)
}

// runCLI is runCtx without its process-wide side effects (helpOut), so that commands can run
// while a `pctl serve` runs in another goroutine; getenv (nil: an empty environment) keeps the
// tests independent of the caller's PCTL_SERVER and PCTL_CREDS.
func runCLI(ctx context.Context, getenv func(string) string, stdin io.Reader, args ...string) cliResult {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	var stdout, stderr syncBuffer
	e := &env{ctx: ctx, stdin: stdin, stdout: &stdout, stderr: &stderr, getenv: getenv}
	code := -1
	for _, c := range commands {
		if c.name == args[0] {
			code = c.run(e, args[1:])
		}
	}
	if code == -1 {
		panic("no command " + args[0])
	}
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// expect checks an exit status and that stderr (one clear line for errors) contains want.
func expect(t testing.TB, r cliResult, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) && !strings.Contains(r.stdout, w) {
			t.Fatalf("output does not mention %q: %s", w, r)
		}
	}
}

func TestConnDefaults(t *testing.T) {
	xdg := t.TempDir()
	t.Setenv("XDG_DATA_HOME", xdg)
	vars := map[string]string{}
	e := &env{getenv: func(k string) string { return vars[k] }}
	cf := &connFlags{}
	if url, creds := cf.resolve(e); url != "nats://127.0.0.1:4222" || creds != "" {
		t.Fatalf("no flags, no env, no local broker: got %q %q", url, creds)
	}
	admin := filepath.Join(xdg, "pctl", "admin.nk")
	if err := os.MkdirAll(filepath.Dir(admin), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(admin, []byte("seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, creds := cf.resolve(e); creds != admin {
		t.Fatalf("the local broker's admin.nk should be the default credentials: got %q, want %q", creds, admin)
	}
	vars["PCTL_SERVER"], vars["PCTL_CREDS"] = "nats://env:1", "/env.nk"
	if url, creds := cf.resolve(e); url != "nats://env:1" || creds != "/env.nk" {
		t.Fatalf("environment: got %q %q", url, creds)
	}
	cf = &connFlags{server: "nats://flag:2", creds: "/flag.nk"}
	if url, creds := cf.resolve(e); url != "nats://flag:2" || creds != "/flag.nk" {
		t.Fatalf("flags win: got %q %q", url, creds)
	}
}

func TestConnErrors(t *testing.T) {
	b := testBroker(t)
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	random := filepath.Join(dir, "random.nk")
	notSeed := filepath.Join(dir, "not-a-seed.nk")
	if err := os.WriteFile(random, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notSeed, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		server string
		creds  string
		code   int
		want   string
	}{
		{"random seed is refused", b.ClientURL(), random, exitFailure, "refused the credentials"},
		{"no credentials are refused", b.ClientURL(), "", exitFailure, "refused the credentials"},
		{"not a seed file", b.ClientURL(), notSeed, exitUsage, "not-a-seed.nk"},
		{"missing credentials file", b.ClientURL(), filepath.Join(dir, "missing.nk"), exitUsage, "missing.nk: no such file"},
		{"unreachable broker", "nats://127.0.0.1:1", b.CredsPath(broker.RoleAdmin), exitFailure, "is 'pctl serve' running?"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &pctlAs{t: t, url: tc.server, creds: tc.creds}
			if tc.creds == "" {
				// An empty --creds falls back to the environment and the local broker: point
				// both at nothing.
				t.Setenv("XDG_DATA_HOME", t.TempDir())
			}
			r := p.run("", "topic", "list")
			expect(t, r, tc.code, tc.want)
			if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
				t.Errorf("want one line on stderr, got %d: %s", n+1, r.stderr)
			}
		})
	}
}

func TestExitFor(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code int
		want string
	}{
		{"bad request", &wire.RemoteError{Code: "bad_request", Message: "bad request: --partitions 0: nope"}, exitUsage, "pctl x: --partitions 0: nope\n"},
		{"not found", &wire.RemoteError{Code: "not_found", Message: "not found: topic \"t\" does not exist"}, exitUsage, "pctl x: topic \"t\" does not exist\n"},
		{"exists", &wire.RemoteError{Code: "exists", Message: "already exists: topic \"t\" already exists"}, exitUsage, "pctl x: topic \"t\" already exists\n"},
		{"permission", fmt.Errorf("%w: needs admin", wire.ErrPermission), exitFailure, "pctl x: permission denied: needs admin\n"},
		{"in use", &wire.RemoteError{Code: "in_use", Message: "in use: used by t"}, exitFailure, "pctl x: in use: used by t\n"},
		{"rejected", &wire.RemoteError{Code: "plugin_rejected", Message: "plugin rejected: x"}, exitFailure, "pctl x: plugin rejected: x\n"},
		{"unavailable", fmt.Errorf("%w: down", wire.ErrUnavailable), exitFailure, "pctl x: unavailable: down\n"},
		{"multi-line message", errors.New("a\nb"), exitFailure, "pctl x: a; b\n"},
		{"interrupted", context.Canceled, exitFailure, "pctl x: interrupted\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			e := &env{stderr: &stderr}
			if code := exitFor(e, "x", tc.err); code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if stderr.String() != tc.want {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.want)
			}
		})
	}
}
