package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// values returns the value field of every text line consume printed.
func values(out string) string {
	var s []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Split(line, "\t"); len(f) == 5 {
			s = append(s, f[4])
		}
	}
	return strings.Join(s, ",")
}

// TestGroupResets: 'pctl topic groups --reset' and 'pctl consume --reset-to' move a group to
// the beginning, the end and a time, and the group's next members go on from there.
func TestGroupResets(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "t", "--partitions", "1", "--partitioner", "jump"), exitOK)
	prod := cliFor(t, b, broker.RoleProducer)
	var in strings.Builder
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&in, "k\t%d\n", i)
	}
	expect(t, prod.run(in.String(), "produce", "t"), exitOK)
	cons := cliFor(t, b, broker.RoleConsumer)
	r := cons.run("", "consume", "t", "--group", "g", "--from-beginning", "--idle-exit", "500ms")
	if got := values(r.stdout); got != "1,2,3,4,5,6" {
		t.Fatalf("first run printed %q", got)
	}

	// Back to the beginning: everything again.
	r = cons.run("", "topic", "groups", "t", "--group", "g", "--reset", "earliest")
	expect(t, r, exitOK, "group g of topic t reset to beginning: generation 1")
	r = cons.run("", "consume", "t", "--group", "g", "--idle-exit", "500ms")
	if got := values(r.stdout); got != "1,2,3,4,5,6" {
		t.Fatalf("after --reset earliest: printed %q", got)
	}

	// To the end: nothing, then only what comes next.
	r = cons.run("", "topic", "groups", "t", "--group", "g", "--reset", "latest", "--json")
	expect(t, r, exitOK)
	var rv resetView
	if err := json.Unmarshal([]byte(r.stdout), &rv); err != nil || rv.Generation != 2 || rv.To != "end" || len(rv.Positions) != 1 || rv.Positions[0] != 6 {
		t.Fatalf("--reset latest --json: %v %+v", err, rv)
	}
	expect(t, cons.run("", "consume", "t", "--group", "g", "--idle-exit", "500ms"), exitOK, "0 records")
	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	expect(t, prod.run("k\t7\nk\t8\n", "produce", "t"), exitOK)
	r = cons.run("", "consume", "t", "--group", "g", "--idle-exit", "500ms")
	if got := values(r.stdout); got != "7,8" {
		t.Fatalf("after --reset latest and two new records: printed %q", got)
	}

	// To a time, by the member itself: the records stored at or after it.
	r = cons.run("", "consume", "t", "--group", "g", "--reset-to", mid.UTC().Format(time.RFC3339Nano), "--idle-exit", "500ms")
	expect(t, r, exitOK, "group g reset to ", "generation 3")
	if got := values(r.stdout); got != "7,8" {
		t.Fatalf("--reset-to %v: printed %q", mid, got)
	}
	// A duration ago, with a new group (created by the reset).
	r = cons.run("", "consume", "t", "--group", "fresh", "--reset-to", "10m", "--idle-exit", "500ms")
	if got := values(r.stdout); got != "1,2,3,4,5,6,7,8" {
		t.Fatalf("--reset-to 10m on a new group: printed %q", got)
	}
	r = cons.run("", "consume", "t", "--group", "fresh", "--reset-to", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "--idle-exit", "500ms")
	expect(t, r, exitOK, "0 records")

	// Bad input says what is wrong.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "groups", "t", "--group", "g"}, "--group is only for --reset"},
		{[]string{"topic", "groups", "t", "--reset", "earliest"}, "--reset needs --group"},
		{[]string{"topic", "groups", "t", "--group", "g", "--reset", "yesterday"}, "give earliest, latest, an RFC 3339 time"},
		{[]string{"topic", "groups", "t", "--group", "bad group", "--reset", "earliest"}, "--group"},
		{[]string{"consume", "t", "--group", "g", "--reset-to", "-5m"}, "give earliest, latest"},
		{[]string{"consume", "t", "--group", "g", "--headers"}, "--headers needs --format jsonl"},
	} {
		expect(t, cons.run("", tc.args...), exitUsage, tc.want)
	}
	// The producer role may not reset a group.
	r = prod.run("", "topic", "groups", "t", "--group", "g", "--reset", "earliest")
	if r.code == exitOK {
		t.Fatalf("a producer credential reset a group: %s", r)
	}
}

// TestConsumeHeaders: 'pctl consume --format jsonl --headers' prints a record's application
// headers (several values of one name in order; protocol headers and reserved names left out)
// and its timestamps: the producer's Pctl-Time when well-formed, else the store time.
func TestConsumeHeaders(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "h", "--partitions", "1", "--partitioner", "jump"), exitOK)
	opt, err := nats.NkeyOptionFromSeed(b.CredsPath(broker.RoleProducer))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.ClientURL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pub := func(seq int, h nats.Header) {
		t.Helper()
		h.Set(wire.HeaderKey, "b64:"+"aw==") // key "k"
		h.Set(wire.HeaderProducer, "raw")
		h.Set(wire.HeaderSeq, fmt.Sprint(seq))
		m := &nats.Msg{Subject: wire.DataSubject("h", 1, 0), Header: h, Data: []byte(fmt.Sprint("v", seq))}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := nc.RequestMsgWithContext(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(-time.Second).UnixMilli()
	pub(1, nats.Header{"X-Trace": {"a", "b c"}, "tenant.id_2": {""}, "Pctl-Time": {"1700000000123"}, "pctl-custom": {"no"}})
	pub(2, nats.Header{"Pctl-Time": {"0123"}}) // malformed: the store time is the timestamp
	after := time.Now().Add(time.Second).UnixMilli()
	r := cliFor(t, b, broker.RoleConsumer).run("", "consume", "h", "--group", "g", "--from-beginning", "--format", "jsonl", "--headers", "--idle-exit", "500ms")
	expect(t, r, exitOK, "2 records")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("printed %d lines: %s", len(lines), r)
	}
	var recs [2]struct {
		Headers map[string][]string `json:"headers"`
		Time    int64               `json:"time"`
		Stored  int64               `json:"stored"`
	}
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{"X-Trace": {"a", "b c"}, "tenant.id_2": {""}}
	if fmt.Sprint(recs[0].Headers) != fmt.Sprint(want) {
		t.Errorf("headers %v, want %v (line %s)", recs[0].Headers, want, lines[0])
	}
	if recs[0].Time != 1700000000123 {
		t.Errorf("time %d, want the producer's 1700000000123", recs[0].Time)
	}
	for i, rec := range recs {
		if rec.Stored < before || rec.Stored > after {
			t.Errorf("record %d: stored %d, not between %d and %d", i+1, rec.Stored, before, after)
		}
	}
	if recs[1].Headers != nil || recs[1].Time != recs[1].Stored {
		t.Errorf("record 2: headers %v, time %d, stored %d: want no headers and the store time (Pctl-Time 0123 is malformed)", recs[1].Headers, recs[1].Time, recs[1].Stored)
	}
	if strings.Contains(lines[0], "Pctl-") || strings.Contains(lines[0], "pctl-custom") {
		t.Errorf("protocol or reserved headers printed: %s", lines[0])
	}
}

// TestGroupResetsWithScopedCredential: a consumer credential scoped to one topic and group can
// reset that group, to a time too (the target comes from a reader created at that time, which the
// credential allows; a direct get of the stream is not allowed to it), and consume it again; it
// cannot reset another group.
func TestGroupResetsWithScopedCredential(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "orders", "--partitions", "2", "--partitioner", "kafka-murmur2"), exitOK)
	prod := cliFor(t, b, broker.RoleProducer)
	expect(t, prod.run("a\t1\nb\t2\nc\t3\n", "produce", "orders"), exitOK)
	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	expect(t, prod.run("a\t4\nb\t5\n", "produce", "orders"), exitOK)
	cfile := t.TempDir() + "/billing.nk"
	expect(t, admin.run("", "creds", "issue", "--role", "consumer", "--topic", "orders", "--group", "billing", "--out", cfile), exitOK)
	cons := &pctlAs{t: t, url: b.ClientURL(), creds: cfile}
	expect(t, cons.run("", "consume", "orders", "--group", "billing", "--from-beginning", "--idle-exit", "1s"), exitOK, "5 records")
	expect(t, cons.run("", "topic", "groups", "orders", "--group", "billing", "--reset", mid.UTC().Format(time.RFC3339Nano)), exitOK, "generation 1")
	r := cons.run("", "consume", "orders", "--group", "billing", "--idle-exit", "1s")
	expect(t, r, exitOK, "2 records")
	if got := values(r.stdout); got != "4,5" && got != "5,4" {
		t.Fatalf("after a reset to a time with a scoped credential: printed %q, want the two later records", got)
	}
	r = cons.run("", "consume", "orders", "--group", "billing", "--reset-to", "earliest", "--idle-exit", "1s")
	expect(t, r, exitOK, "5 records", "generation 2")
	expect(t, cons.run("", "topic", "groups", "orders", "--group", "audit", "--reset", "earliest"), exitFailure, "may not")
}

// TestTopicGroupsShowsAssignor: 'pctl consume --assignor sticky' creates a sticky group, 'pctl
// topic groups' names each group's assignor and the sticky group's recorded assignments, and a
// member asking an existing sticky group for modulo is refused (exit status of a conflict).
func TestTopicGroupsShowsAssignor(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "t", "--partitions", "4", "--partitioner", "linear-murmur2"), exitOK)
	cons := cliFor(t, b, broker.RoleConsumer)
	expect(t, cons.run("", "consume", "t", "--group", "s", "--assignor", "sticky", "--heartbeat", "100ms", "--idle-exit", "700ms"), exitOK)
	expect(t, cons.run("", "consume", "t", "--group", "plain", "--heartbeat", "100ms", "--idle-exit", "300ms"), exitOK)
	r := cons.run("", "topic", "groups", "t")
	expect(t, r, exitOK, "assignor sticky", "assignor modulo", "assignment 1: epoch 1, 1 member(s), 4 partition(s): first assignment")
	r = cons.run("", "topic", "groups", "t", "--json")
	var views []client.GroupLag
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil || len(views) != 2 || views[1].Assignor != "sticky" || len(views[1].Assignments) != 1 {
		t.Fatalf("--json: %v %+v", err, views)
	}
	r = cons.run("", "consume", "t", "--group", "s", "--assignor", "modulo", "--idle-exit", "300ms")
	if r.code == exitOK || !strings.Contains(r.stderr, `uses the assignor "sticky"`) {
		t.Fatalf("asking a sticky group for modulo: exit %d, stderr %s", r.code, r.stderr)
	}
}
