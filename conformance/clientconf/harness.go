// Package clientconf is the client conformance harness (spec/client-conformance.md): it drives
// any implementation's producer and consumer commands through a small line protocol on
// stdin/stdout against a real, embedded broker, injects faults (connections cut through a
// loopback proxy, frozen links that make acknowledgements late, a broker crash and restart,
// epoch changes of every kind in the middle of traffic, a member killed with SIGKILL, a member
// joining late) and checks the outcome with client/verify (nothing acknowledged lost, per-key
// order across members, wrong keys, unexpected records, duplicates) and the placement of every
// record against its epoch's WebAssembly module. One scenario is one row of the report.
//
// `pctl conformance client` is its command line; the tests of this package show that the
// harness fails a client that drops, reorders, duplicates or misplaces records, and run it
// against the Go client and every SDK of this repository.
package clientconf

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// Options say what to run.
type Options struct {
	// Producer and Consumer are the commands (and their first arguments) of the client under
	// test; the harness appends the flags of spec/client-conformance.md §1 and §2.
	Producer []string
	Consumer []string
	// AckArgs are extra producer arguments in the ack-timeout scenario (a short acknowledgement
	// timeout, in the client's own syntax: "--ack-timeout 0.05"). None: the client's default.
	AckArgs []string
	// Seed chooses the moments of faults and the member that crashes (>= 1). Default 1.
	Seed uint64
	// Scenarios to run, by name (Scenarios()); default all, in their order.
	Scenarios []string
	// Env is added to the commands' environment (the CLI adds PCTL=<its own executable>).
	Env []string
	// Dir keeps every scenario's files (the commands' stdout and stderr): default a temporary
	// directory, removed at the end.
	Dir string
	// Logf, when set, receives progress (a scenario starting, a fault injected).
	Logf func(format string, args ...any)
}

// Report is the outcome: one row per scenario.
type Report struct {
	Producer  string `json:"producer"`
	Consumer  string `json:"consumer"`
	Seed      uint64 `json:"seed"`
	Passed    bool   `json:"passed"`
	Scenarios []Row  `json:"scenarios"`
}

// Row is one scenario's outcome.
type Row struct {
	Name        string   `json:"name"`
	Passed      bool     `json:"passed"`
	Failures    []string `json:"failures"`
	Faults      []string `json:"faults"`
	Sent        int      `json:"sent"`
	Acked       int      `json:"acked"`
	Delivered   int      `json:"delivered"` // distinct records delivered
	Duplicates  int      `json:"duplicates"`
	Epochs      int      `json:"epochs"`
	DurationMS  int64    `json:"duration_ms"`
	Description string   `json:"description"`
}

// Row returns the row of a scenario, or nil.
func (r *Report) Row(name string) *Row {
	for i := range r.Scenarios {
		if r.Scenarios[i].Name == name {
			return &r.Scenarios[i]
		}
	}
	return nil
}

// ErrUsage marks a bad Options value (the CLI's exit status 2).
var ErrUsage = errors.New("bad usage")

// scenario is one row: its group, its fault and what it allows.
type scenario struct {
	name, description string
	members           int
	proxy             bool
	allowUnacked      bool // the fault may fail records (fewer than half)
	dups              dupRule
	run               func(r *run) error
	compact           bool               // a compacted topic (spec/protocol.md §10)
	prodArgs          []string           // extra producer arguments
	after             func(r *run) error // after the producer is done and the group stopped
	hold              bool               // the broker holds the first backfill at its start (run.held, run.release)
}

type dupRule int

const (
	dupFail   dupRule = iota // any duplicate fails
	dupCount                 // counted only
	dupVictim                // only of records the crashed member delivered first
)

// Scenarios lists the scenario names, in the order they run.
func Scenarios() []string {
	var out []string
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return out
}

// Run runs the scenarios and returns the report; the error is for what stopped the harness
// itself (bad options, no broker), not for a client that fails (that is a failed row).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if len(opts.Producer) == 0 || len(opts.Consumer) == 0 {
		return nil, fmt.Errorf("%w: give both the producer and the consumer command", ErrUsage)
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	var chosen []scenario
	for _, name := range opts.Scenarios {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: no scenario %q; the scenarios are %s", ErrUsage, name, strings.Join(Scenarios(), ", "))
		}
		chosen = append(chosen, scenarios[i])
	}
	if len(opts.Scenarios) == 0 {
		chosen = scenarios
	}
	for _, c := range [][]string{opts.Producer, opts.Consumer} {
		if _, err := lookPath(c[0]); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUsage, err)
		}
	}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "pctl-client-conformance-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	rep := &Report{Producer: strings.Join(opts.Producer, " "), Consumer: strings.Join(opts.Consumer, " "), Seed: opts.Seed, Passed: true}
	for i, s := range chosen {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		sdir := filepath.Join(dir, s.name)
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return nil, err
		}
		row, err := runScenario(ctx, opts, s, sdir, rand.New(rand.NewPCG(opts.Seed, uint64(i+1))))
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", s.name, err)
		}
		rep.Scenarios = append(rep.Scenarios, row)
		if !row.Passed {
			rep.Passed = false
		}
	}
	return rep, nil
}

func lookPath(p string) (string, error) {
	if strings.Contains(p, "/") {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("command %s: %v", p, err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("command %s is not an executable file", p)
		}
		return p, nil
	}
	return execLookPath(p)
}

// freePort reserves a loopback port for the broker (kept across its restart).
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// startBroker starts the embedded broker, retrying briefly while the port is still held by the
// one before (a restart); hook (may be nil) is its step hook (the compacted row holds a backfill).
func startBroker(ctx context.Context, dataDir, listen string, hook func(topic, step string) error) (*broker.Broker, error) {
	var err error
	for i := 0; i < 50; i++ {
		var b *broker.Broker
		b, err = broker.Start(ctx, broker.Config{DataDir: dataDir, Listen: listen, ConformanceKeys: 2000, Testing: testhook.Steps(hook)})
		if err == nil {
			return b, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("start the broker on %s: %w", listen, err)
}

func connectAdmin(ctx context.Context, b *broker.Broker) (*client.Client, error) {
	return client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin), Name: "pctl conformance client (admin)", ReconnectWait: 100 * time.Millisecond})
}
