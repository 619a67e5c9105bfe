package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

var readyRE = regexp.MustCompile(`^pctl: broker ready at (nats://127\.0\.0\.1:\d+) \(data (.+); admin credentials (.+)\)\n$`)

// servePctl runs `pctl serve args...` in-process, through runCtx as main does, until the returned
// stop function is called; it waits for the ready line and returns the URL and data directory.
func servePctl(t *testing.T, args ...string) (url, dir string, stop func() cliResult) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runCtx(ctx, append([]string{"serve"}, args...), strings.NewReader(""), &stdout, &stderr)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := readyRE.FindStringSubmatch(stdout.String()); m != nil {
			url, dir = m[1], m[2]
			if m[3] != filepath.Join(dir, "admin.nk") {
				t.Fatalf("ready line names credentials %q, want %q", m[3], filepath.Join(dir, "admin.nk"))
			}
			break
		}
		select {
		case code := <-done:
			cancel()
			t.Fatalf("pctl serve exited %d before it was ready\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("pctl serve printed no ready line within 60s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	}
	stopped := false
	var res cliResult
	stop = func() cliResult {
		if !stopped {
			stopped = true
			cancel()
			res = cliResult{code: <-done, stdout: stdout.String(), stderr: stderr.String()}
		}
		return res
	}
	t.Cleanup(func() { stop() })
	return url, dir, stop
}

func as(t *testing.T, url, dir, role string) *pctlAs {
	return &pctlAs{t: t, url: url, creds: filepath.Join(dir, role+".nk")}
}

func TestServeReadyShutdownRestart(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	url, dir, stop := servePctl(t, "--data", data, "--listen", "127.0.0.1:0")
	if dir != data {
		t.Fatalf("ready line names data %q, want %q", dir, data)
	}
	admin := as(t, url, dir, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "orders", "--partitions", "3", "--partitioner", "kafka-murmur2"), exitOK)
	wasm, _ := plugins.TemplateModule("c")
	file := filepath.Join(t.TempDir(), "p.wasm")
	os.WriteFile(file, wasm, 0o644)
	expect(t, admin.run("", "plugin", "upload", file), exitOK)
	expect(t, as(t, url, dir, broker.RoleProducer).run("a\t1\nb\t2\nc\t3\na\t4\nb\t5\n", "produce", "orders"), exitOK)
	cons := as(t, url, dir, broker.RoleConsumer)
	expect(t, cons.run("", "consume", "orders", "--group", "g", "--from-beginning", "--max", "2"), exitOK, "2 records")

	r := stop()
	expect(t, r, exitOK, "shutting down", "stopped cleanly")
	if n := strings.Count(r.stdout, "\n"); n != 1 {
		t.Fatalf("pctl serve printed %d lines on stdout, want exactly the ready line: %q", n, r.stdout)
	}

	// Same data directory: topics, plugins, records and group positions survive.
	url, dir, stop = servePctl(t, "--data", data, "--listen", "127.0.0.1:0")
	admin, cons = as(t, url, dir, broker.RoleAdmin), as(t, url, dir, broker.RoleConsumer)
	expect(t, admin.run("", "topic", "describe", "orders"), exitOK, "3 partitions", "kafka-murmur2")
	expect(t, admin.listRemote(), exitOK, "my-partitioner", runtime.Digest(wasm)[:12])
	r = cons.run("", "consume", "orders", "--group", "g", "--idle-exit", "700ms")
	expect(t, r, exitOK, "3 records")
	r = cons.run("", "consume", "orders", "--group", "fresh", "--from-beginning", "--idle-exit", "700ms", "--format", "jsonl")
	expect(t, r, exitOK, "5 records")
	expect(t, stop(), exitOK, "stopped cleanly")
}

// TestBrokerSideProduceAcrossRestart: records sent to the produce service without a producer
// identity (a plain NATS request, the thinnest client there is: client.ProduceBrokerSide) before
// and after a restart of the broker must all be stored. It once caught the produce service's
// producer id being fixed per topic, so that a restarted broker's first records were dropped as
// duplicates of older ones (RATIONALE.md: "Why does the produce service use the Go client's
// producer?").
func TestBrokerSideProduceAcrossRestart(t *testing.T) {
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	produce := func(b *broker.Broker, values ...string) {
		c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleProducer)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, v := range values {
			r, err := c.ProduceBrokerSide(ctx, "t", client.Record{Key: []byte("k"), Value: []byte(v)})
			if err != nil {
				t.Fatal(err)
			}
			if r.Duplicate {
				t.Errorf("record %q: the produce service answered Duplicate: true for a record never sent before; it is not stored", v)
			}
		}
	}
	b := testBrokerIn(t, data)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "1", "--partitioner", "jump"), exitOK)
	produce(b, "1", "2", "3")
	b.Close()
	b = testBrokerIn(t, data)
	produce(b, "4", "5", "6")
	if n := stored(t, b, "t"); n != 6 {
		t.Fatalf("%d records stored, want 6: records produced broker-side after a restart were dropped as duplicates", n)
	}
}

func TestServeConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data := filepath.Join(dir, "data")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown field", []string{"--config", write("unknown.json", `{"data": "x", "max_recrod_bytes": 5}`)}, `unknown field "max_recrod_bytes"`},
		{"not JSON", []string{"--config", write("bad.json", `{"data": `)}, "not a valid JSON settings object"},
		{"wrong type", []string{"--config", write("type.json", `{"replicas": "three"}`)}, "not a valid JSON settings object"},
		{"two values", []string{"--config", write("two.json", `{} {}`)}, "more than one JSON value"},
		{"missing file", []string{"--config", filepath.Join(dir, "nope.json")}, "nope.json"},
		{"bad duration", []string{"--config", write("dur.json", `{"produce_timeout": "soon"}`), "--data", data}, `produce_timeout "soon"`},
		{"record larger than a message", []string{"--config", write("big.json", `{"max_record_bytes": 20000000}`), "--data", data}, "more than max_payload"},
		{"nats without creds", []string{"--nats", "nats://127.0.0.1:1", "--data", data}, "--nats needs --creds"},
		{"creds without nats", []string{"--creds", "x.nk", "--data", data}, "--creds is the broker's own credentials with --nats"},
		{"negative max record", []string{"--max-record-bytes", "-1", "--data", data}, "--max-record-bytes -1"},
		{"arguments", []string{"extra", "--data", data}, "takes no arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(context.Background(), nil, strings.NewReader(""), append([]string{"serve"}, tc.args...)...)
			expect(t, r, exitUsage, tc.want)
			if r.stdout != "" {
				t.Errorf("printed on stdout: %q", r.stdout)
			}
		})
	}

	t.Run("port in use", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		// The refusal itself, not a timeout of some later step, is what must come back.
		r := runCLI(context.Background(), nil, strings.NewReader(""), "serve", "--data", data, "--listen", l.Addr().String())
		expect(t, r, exitFailure, "address already in use")
	})

	t.Run("settings from the file, flags win", func(t *testing.T) {
		cfg := write("good.json", `{"data": "`+data+`", "listen": "127.0.0.1:1", "max_record_bytes": 2048, "conformance_keys": 1000}`)
		url, got, stop := servePctl(t, "--config", cfg, "--listen", "127.0.0.1:0")
		if got != data {
			t.Fatalf("data %q, want %q from the config file", got, data)
		}
		expect(t, as(t, url, got, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "1", "--partitioner", "jump"), exitOK)
		r := as(t, url, got, broker.RoleProducer).run("k\t"+strings.Repeat("x", 4096)+"\nk\tsmall\n", "produce", "t")
		expect(t, r, exitFailure, "line 1:", "max record size is 2048 bytes", "1 acknowledged, 1 failed")
		expect(t, stop(), exitOK)
	})
}

func TestServeHelp(t *testing.T) {
	var out, errOut syncBuffer
	if code := runCtx(context.Background(), []string{"serve", "--help"}, strings.NewReader(""), &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"--config", "--listen", "ready", "SIGTERM", "unknown field", "--native-builtins"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help does not mention %q", want)
		}
	}
}

// TestServeNATSMode runs the broker against an existing NATS server with JetStream (--nats,
// --creds): no embedded server, no role credentials of its own.
func TestServeNATSMode(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	dir := t.TempDir()
	creds := filepath.Join(dir, "broker.nk")
	if err := os.WriteFile(creds, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "js"),
		NoLog: true, NoSigs: true, Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)

	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runCtx(ctx, []string{"serve", "--nats", srv.ClientURL(), "--creds", creds, "--data", filepath.Join(dir, "data")},
			strings.NewReader(""), &stdout, &stderr)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), "\n") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no ready line: %s %s", stdout.String(), stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := "pctl: broker ready at " + srv.ClientURL() + " (data " + filepath.Join(dir, "data") + "; connected with " + creds
	if !strings.HasPrefix(stdout.String(), want) {
		cancel()
		t.Fatalf("ready line %q, want it to start with %q", stdout.String(), want)
	}
	p := &pctlAs{t: t, url: srv.ClientURL(), creds: creds}
	expect(t, p.run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	expect(t, p.run("k\tv\n", "produce", "t", "--broker-side"), exitOK, "1 acknowledged")
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}
