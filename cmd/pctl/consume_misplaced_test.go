package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// TestConsumeMisplaced: a hostile client with the producer credential publishes key "a" straight
// to each of the 4 partitions (only one can be the key's); pctl consume stops before the first
// misplaced record by default, prints the three flagged with --misplaced deliver (so that 'pctl
// verify' can count them), and goes past them with --misplaced skip.
func TestConsumeMisplaced(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "4", "--partitioner", "kafka-murmur2"), exitOK)
	opt, err := nats.NkeyOptionFromSeed(b.CredsPath(broker.RoleProducer))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.ClientURL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for q := 0; q < 4; q++ {
		m := nats.NewMsg(wire.DataSubject("t", 1, q))
		m.Header.Set(wire.HeaderKey, wire.EncodeKey([]byte("a")))
		m.Data = []byte("hostile")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	cons := cliFor(t, b, broker.RoleConsumer)

	r := cons.run("", "consume", "t", "--group", "stop", "--from-beginning", "--idle-exit", "2s")
	expect(t, r, exitFailure, "misplaced record in topic t", "--misplaced deliver|skip")

	r = cons.run("", "consume", "t", "--group", "deliver", "--from-beginning", "--format", "jsonl", "--misplaced", "deliver", "--idle-exit", "1s")
	expect(t, r, exitOK, "4 records", "3 misplaced (deliver)")
	home, flagged := -1, 0
	var expected []int
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var rec struct {
			Partition int    `json:"partition"`
			Key       string `json:"key"`
			Misplaced bool   `json:"misplaced"`
			Expected  *int   `json:"expected_partition"`
			Reason    string `json:"misplaced_reason"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if !rec.Misplaced {
			home = rec.Partition
			continue
		}
		flagged++
		if rec.Expected == nil || rec.Reason == "" {
			t.Errorf("flagged line without expected_partition or reason: %s", line)
		} else {
			expected = append(expected, *rec.Expected)
		}
	}
	if flagged != 3 || home < 0 {
		t.Fatalf("%d lines flagged (want 3), unflagged partition %d:\n%s", flagged, home, r.stdout)
	}
	for _, x := range expected {
		if x != home {
			t.Errorf("expected_partition %d, but key a's record in its place is in partition %d", x, home)
		}
	}

	r = cons.run("", "consume", "t", "--group", "skip", "--from-beginning", "--misplaced", "skip", "--idle-exit", "1s")
	expect(t, r, exitOK, "1 record in", "3 misplaced (skip)")

	r = cons.run("", "consume", "t", "--group", "bad", "--misplaced", "ignore")
	expect(t, r, exitUsage, "give stop, deliver or skip")
}
