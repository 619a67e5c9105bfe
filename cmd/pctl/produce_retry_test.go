package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
)

// TestBrokerSideProduceRetriesAcrossARestart: 'pctl produce --broker-side' keeps going when one
// member of the produce service hangs (takes requests, never answers) and when the broker crashes
// in the middle of the input and comes back: records without an answer are sent
// again, in order, with the same producer id and sequence, so every line is stored once and the
// command exits 0. Before the thin client retried, the records in flight failed (no answer, or "no
// produce service answers") and the command exited 1.
func TestBrokerSideProduceRetriesAcrossARestart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	start := func() *broker.Broker {
		b, err := broker.Start(context.Background(), broker.Config{DataDir: dir, Listen: addr, ConformanceKeys: 2000})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := start()
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "3", "--partitioner", "jump"), exitOK)
	url, creds := b.ClientURL(), b.CredsPath(broker.RoleProducer)
	// A second "broker" in the produce service's queue group that takes requests and never
	// answers: a broker that hangs (a paused process, a stuck node).
	hung := hangingBroker(t, url, b.CredsPath(broker.RoleAdmin))
	defer hung.Close()

	pr, pw := io.Pipe()
	done := make(chan cliResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		done <- runCLI(ctx, nil, pr, "produce", "t", "--broker-side", "--timeout", "60s", "--server", url, "--creds", creds)
	}()
	const n = 600
	for i := 0; i < n; i++ {
		if i == n/2 {
			time.Sleep(20 * time.Millisecond) // some of the first half in flight, or just answered
			b.Abort()                         // as a crash: what it holds is never answered
			time.Sleep(500 * time.Millisecond)
			b = start()
		}
		fmt.Fprintf(pw, "k%d\t%d\n", i%20, i)
		if i%50 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	pw.Close()
	r := <-done
	defer b.Close()
	expect(t, r, exitOK, fmt.Sprintf("%d acknowledged", n))
	if strings.Contains(r.stderr, "failed") && !strings.Contains(r.stderr, "0 failed") {
		t.Fatalf("records failed across the restart:\n%s", r)
	}
	if got := stored(t, b, "t"); got != n {
		t.Fatalf("%d records stored, want %d (each line once)", got, n)
	}
	// Per-key order, as a consumer group sees it.
	out := cliFor(t, b, broker.RoleConsumer).run("", "consume", "t", "--group", "g", "--from-beginning", "--max", fmt.Sprint(n), "--format", "jsonl")
	expect(t, out, exitOK)
	last := map[string]int{}
	for _, rec := range consumed(t, out.stdout) {
		var v int
		fmt.Sscan(*rec.Value, &v)
		if prev, ok := last[*rec.Key]; ok && v <= prev {
			t.Fatalf("key %s: %d delivered after %d: per-key order broken across the restart", *rec.Key, v, prev)
		}
		last[*rec.Key] = v
	}
}

// hangingBroker joins the produce service's queue group on every topic and never answers.
func hangingBroker(t *testing.T, url, creds string) *nats.Conn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(creds)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opt, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.QueueSubscribe("pctl.produce.*", "pctl-broker", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc
}
