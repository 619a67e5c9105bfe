package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

func TestConsumeMaxCommitsAndResumes(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "1", "--partitioner", "jump"), exitOK)
	var in strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&in, "k\t%d\n", i)
	}
	expect(t, cliFor(t, b, broker.RoleProducer).run(in.String(), "produce", "t"), exitOK)
	cons := cliFor(t, b, broker.RoleConsumer)
	seqs := func(out string) string {
		var s []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Split(line, "\t"); len(f) == 5 {
				s = append(s, f[4])
			}
		}
		return strings.Join(s, ",")
	}
	r := cons.run("", "consume", "t", "--group", "g", "--from-beginning", "--max", "4")
	expect(t, r, exitOK, "4 records", "--max 4 reached")
	if got := seqs(r.stdout); got != "1,2,3,4" {
		t.Fatalf("first run printed %q", got)
	}
	r = cons.run("", "consume", "t", "--group", "g", "--max", "4")
	expect(t, r, exitOK)
	if got := seqs(r.stdout); got != "5,6,7,8" {
		t.Fatalf("second run printed %q: the group must go on from its committed position", got)
	}
	r = cons.run("", "consume", "t", "--group", "g", "--idle-exit", "500ms")
	expect(t, r, exitOK, "2 records", "no new record for 500ms")
	if got := seqs(r.stdout); got != "9,10" {
		t.Fatalf("third run printed %q", got)
	}
	// A new group without --from-beginning starts after the records present.
	r = cons.run("", "consume", "t", "--group", "late", "--idle-exit", "300ms")
	expect(t, r, exitOK, "0 records")
}

func TestConsumeInterrupt(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	expect(t, cliFor(t, b, broker.RoleProducer).run("a\t1\nb\t2\nc\t3\n", "produce", "t"), exitOK)
	// Ctrl-C: runCtx's context is cancelled by SIGINT; here the test cancels it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan cliResult, 1)
	go func() {
		done <- runCLI(ctx, nil, strings.NewReader(""), "consume", "t", "--group", "g", "--from-beginning", "--heartbeat", "100ms",
			"--server", b.ClientURL(), "--creds", b.CredsPath(broker.RoleConsumer))
	}()
	// Wait until the three records are delivered, then interrupt.
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		gs, err := c.Groups(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		var sum uint64
		for _, g := range gs {
			for _, p := range g.Positions {
				sum += p
			}
		}
		if sum == 3 { // committed (every 200ms)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the records were not delivered and committed within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	r := <-done
	expect(t, r, exitOK, "3 records", "interrupted")
	if n := strings.Count(r.stdout, "\n"); n != 3 {
		t.Fatalf("printed %d records, want 3: %s", n, r)
	}
}

func TestConsumeErrors(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	cons := cliFor(t, b, broker.RoleConsumer)
	tests := []struct {
		name string
		p    *pctlAs
		args []string
		code int
		want string
	}{
		{"unknown topic", cons, []string{"consume", "nope", "--group", "g"}, exitUsage, `topic "nope" does not exist`},
		{"no group", cons, []string{"consume", "t"}, exitUsage, "--group is required"},
		{"bad group", cons, []string{"consume", "t", "--group", "a.b"}, exitUsage, "--group:"},
		{"bad format", cons, []string{"consume", "t", "--group", "g", "--format", "csv"}, exitUsage, `--format "csv"`},
		{"negative max", cons, []string{"consume", "t", "--group", "g", "--max", "-1"}, exitUsage, "--max -1"},
		{"producer may not consume", cliFor(t, b, broker.RoleProducer), []string{"consume", "t", "--group", "g", "--idle-exit", "20s"}, exitFailure, "needs the consumer or admin role"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The error's own words: an error that waited for a timeout would say so instead.
			r := tc.p.run("", tc.args...)
			expect(t, r, tc.code, tc.want)
		})
	}
}

func TestTextAndJSONRecords(t *testing.T) {
	tests := []struct {
		name  string
		m     client.Message
		text  string
		jsonl string
	}{
		{"plain", client.Message{Partition: 1, Epoch: 2, Seq: 3, Key: []byte("k"), Value: []byte("v")},
			"1\t2\t3\tk\tv\n", `{"topic":"t","partition":1,"epoch":2,"seq":3,"key":"k","value":"v"}`},
		{"keyless", client.Message{Seq: 1, NoKey: true, Value: []byte("v")},
			"0\t0\t1\t-\tv\n", `{"topic":"t","partition":0,"epoch":0,"seq":1,"value":"v"}`},
		{"empty key and value", client.Message{Seq: 1, Key: []byte{}, Value: []byte{}},
			"0\t0\t1\t\t\n", `{"topic":"t","partition":0,"epoch":0,"seq":1,"key":"","value":""}`},
		{"key that is a dash", client.Message{Seq: 1, Key: []byte("-"), Value: []byte("-")},
			"0\t0\t1\thex:2d\t-\n", `{"topic":"t","partition":0,"epoch":0,"seq":1,"key":"-","value":"-"}`},
		{"tab and newline", client.Message{Seq: 1, Key: []byte("a\tb"), Value: []byte("x\ny")},
			"0\t0\t1\thex:610962\thex:780a79\n", `{"topic":"t","partition":0,"epoch":0,"seq":1,"key":"a\tb","value":"x\ny"}`},
		{"not UTF-8", client.Message{Seq: 1, Key: []byte{0xff}, Value: []byte{0xc3, 0x28}},
			"0\t0\t1\thex:ff\thex:c328\n", `{"topic":"t","partition":0,"epoch":0,"seq":1,"key_b64":"/w==","value_b64":"wyg="}`},
		{"looks like hex", client.Message{Seq: 1, Key: []byte("hex:00"), Value: []byte("hex")},
			"0\t0\t1\thex:6865783a3030\thex\n", `{"topic":"t","partition":0,"epoch":0,"seq":1,"key":"hex:00","value":"hex"}`},
		{"unicode", client.Message{Seq: 1, Key: []byte("clé"), Value: []byte("日本")},
			"0\t0\t1\tclé\t日本\n", `{"topic":"t","partition":0,"epoch":0,"seq":1,"key":"clé","value":"日本"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendTextRecord(nil, &tc.m)); got != tc.text {
				t.Errorf("text: got %q, want %q", got, tc.text)
			}
			if got := string(appendJSONRecord(nil, "t", &tc.m, false, false)); got != tc.jsonl+"\n" {
				t.Errorf("jsonl: got %s, want %s", got, tc.jsonl)
			}
		})
	}
}

// TestConsumerStopDuringRebalanceReleasesLeases: a member that stops cleanly must give back every
// partition it leased, so that the group's next member can read them at once. It once caught
// acquire using Run's context: a lease the server had granted was reported as not acquired when
// the member stopped meanwhile, and stayed with the stopped member until it expired.
func TestConsumerStopDuringRebalanceReleasesLeases(t *testing.T) {
	b := testBroker(t)
	const partitions = 16
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", fmt.Sprint(partitions), "--partitioner", "jump"), exitOK)
	var in strings.Builder
	for i := 0; i < 10*partitions; i++ {
		fmt.Fprintf(&in, "k%d\t%d\n", i, i)
	}
	expect(t, cliFor(t, b, broker.RoleProducer).run(in.String(), "produce", "t"), exitOK)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleConsumer)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	desc, _, err := c.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		group := fmt.Sprintf("g%d", round)
		cn, err := c.NewConsumer(ctx, "t", client.ConsumerOptions{Group: group, FromBeginning: true, Heartbeat: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		err = cn.Run(rctx, func(ctx context.Context, m *client.Message) error {
			stop() // stop at the first record, without acknowledging it
			<-ctx.Done()
			return ctx.Err()
		})
		stop()
		if err != nil {
			t.Fatal(err)
		}
		kv, err := c.JetStream().KeyValue(ctx, wire.GroupsBucket)
		if err != nil {
			t.Fatal(err)
		}
		for q := 0; q < partitions; q++ {
			e, err := kv.Get(ctx, wire.PartitionKey(desc.ID, group, q))
			if err != nil {
				t.Fatal(err)
			}
			var ps wire.PartitionState
			if err := json.Unmarshal(e.Value(), &ps); err != nil {
				t.Fatal(err)
			}
			if ps.Owner == cn.Member() && ps.LeaseEnd > time.Now().UnixMilli() {
				t.Errorf("group %s, partition %d: still leased to member %s for %v after it stopped cleanly; the group's next member cannot read it until then",
					group, q, ps.Owner, time.Until(time.UnixMilli(ps.LeaseEnd)).Round(time.Millisecond))
			}
		}
	}
}

// TestConsumerCommitsWhileRefreshing runs a member whose commit clock and heartbeat (which
// refreshes the descriptor) both tick fast, with records flowing, until the group state shows
// both at work many times over (commits of partition positions, heartbeats of the member). It
// once caught, under -race, the refresh replacing the descriptor while commits read its topic id.
func TestConsumerCommitsWhileRefreshing(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	desc, _, err := c.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := c.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := kv.Watch(ctx, wire.GroupPrefix(desc.ID, "g")+">", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	p, err := c.NewProducer(ctx, "t", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	cn, err := c.NewConsumer(ctx, "t", client.ConsumerOptions{Group: "g", FromBeginning: true, Heartbeat: 5 * time.Millisecond, CommitInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; rctx.Err() == nil; i++ {
			_ = p.Send(rctx, client.Record{Key: []byte(fmt.Sprint(i % 10)), Value: []byte("v")}, nil)
			time.Sleep(time.Millisecond) // a steady flow, so that there is always something to commit
		}
	}()
	const enough = 30
	commits, heartbeats := 0, 0
	go func() {
		defer wg.Done()
		defer stop()
		for commits < enough || heartbeats < enough {
			select {
			case e := <-watch.Updates():
				if e == nil {
					continue
				}
				switch _, kind, _, _ := wire.ParseGroupKey(desc.ID, e.Key()); kind {
				case "p":
					commits++
				case "m":
					heartbeats++
				}
			case <-rctx.Done():
				return
			}
		}
	}()
	if err := cn.Run(rctx, func(context.Context, *client.Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if commits < enough || heartbeats < enough {
		t.Fatalf("the group state saw %d commits and %d heartbeats before the member stopped (%v)", commits, heartbeats, ctx.Err())
	}
}
