package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
)

// latestByKey reads consume's jsonl and returns key -> value, or "<tombstone>", of the last
// line of each key, and how many lines were backfilled copies.
func latestByKey(t *testing.T, out string) (map[string]string, int) {
	t.Helper()
	got, copies := map[string]string{}, 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var jr jsonRecord
		if err := json.Unmarshal([]byte(line), &jr); err != nil || jr.Key == nil {
			t.Fatalf("line %q: %v", line, err)
		}
		v := "<tombstone>"
		if !jr.Tombstone {
			v = *jr.Value
		}
		got[*jr.Key] = v
		if jr.Backfill != "" {
			copies++
		}
	}
	return got, copies
}

var noBackfill = regexp.MustCompile(`backfill\s+none running`)

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestCompactedTopicCLI: topic create --compact (and its refusals), produce --tombstones,
// consume --from current-epoch with tombstone and backfill fields, topic describe's compaction,
// backfill and retention lines, and topic retire (refused on a plain topic).
func TestCompactedTopicCLI(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--compact", "--backfill"}, "a compacted topic (--compact) always backfills"},
		{[]string{"--delete-retention", "1h"}, "give --compact too"},
		{[]string{"--compact", "--delete-retention", "10ms"}, "give at least 1s"},
		{[]string{"--backfill", "--delete-retention", "1h"}, "give --compact too"},
	} {
		args := append([]string{"topic", "create", "bad", "--partitions", "2", "--partitioner", "kafka-murmur2"}, c.args...)
		expect(t, admin.run("", args...), exitUsage, c.want)
	}
	expect(t, admin.run("", "topic", "create", "kv", "--partitions", "2", "--partitioner", "kafka-murmur2", "--compacted", "--delete-retention", "1h"),
		exitOK, "compacted (tombstones kept 1h0m0s)")
	expect(t, admin.run("", "topic", "create", "plain", "--partitions", "1", "--partitioner", "jump"), exitOK)
	// A plain topic with --backfill (spec/protocol.md §10.3): created, described as such, and a
	// keyless record is refused on it.
	expect(t, admin.run("", "topic", "create", "hist", "--partitions", "2", "--partitioner", "kafka-murmur2", "--backfill"),
		exitOK, "backfills its history at epoch changes")
	expect(t, admin.run("", "topic", "describe", "hist"), exitOK, "none (plain topic); epoch changes backfill its history")

	prod := cliFor(t, b, broker.RoleProducer)
	dir := t.TempDir()
	sent1, sent2 := filepath.Join(dir, "sent1.jsonl"), filepath.Join(dir, "sent2.jsonl")
	expect(t, prod.run("a\t1\nb\t1\na\t2\nc\t1\nd\t1\n", "produce", "kv", "--log", sent1), exitOK)
	// A tombstone of a key never written (the producer of a key's records must be one for
	// 'pctl verify': a tombstone from another run would leave its earlier value unordered).
	expect(t, prod.run("e\n", "produce", "kv", "--tombstones", "--log", sent2), exitOK)
	// A keyless record cannot be compacted: refused, with the line.
	expect(t, prod.run("keyless\n", "produce", "kv"), exitFailure, "every record needs a key")
	expect(t, prod.run("keyless\n", "produce", "hist"), exitFailure, "a keyless record cannot be backfilled")
	expect(t, prod.run("a\t1\n", "produce", "hist"), exitOK)

	// Written by hand: the latest of every key, e deleted.
	want := map[string]string{"a": "2", "b": "1", "c": "1", "d": "1", "e": "<tombstone>"}
	cons := cliFor(t, b, broker.RoleConsumer)
	r := cons.run("", "consume", "kv", "--group", "g1", "--from", "current-epoch", "--format", "jsonl", "--idle-exit", "700ms")
	expect(t, r, exitOK)
	if got, _ := latestByKey(t, r.stdout); !sameMap(got, want) {
		t.Fatalf("current epoch before any change: %v, want %v", got, want)
	}
	// pctl verify --compacted: a=1 was compacted away (a=2 was delivered), not lost; without
	// --compacted it counts as lost; with a=2's line gone, a's latest is lost either way.
	got1 := filepath.Join(dir, "got1.jsonl")
	if err := os.WriteFile(got1, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "verify", "--sent", sent1, "--sent", sent2, "--delivered", "g1="+got1, "--compacted"), exitOK, "1 compacted away", ": OK")
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "verify", "--sent", sent1, "--sent", sent2, "--delivered", "g1="+got1), exitFailure, "1 lost")
	var noA2 []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.Contains(l, `"value":"2"`) {
			noA2 = append(noA2, l)
		}
	}
	got2 := filepath.Join(dir, "got2.jsonl")
	if err := os.WriteFile(got2, []byte(strings.Join(noA2, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "verify", "--sent", sent1, "--sent", sent2, "--delivered", "g1="+got2, "--compacted"), exitFailure, "2 lost")
	expect(t, cons.run("", "consume", "kv", "--group", "x", "--from", "later"), exitUsage, "give now, beginning or current-epoch")
	expect(t, cons.run("", "consume", "kv", "--group", "x", "--from", "now", "--from-beginning"), exitUsage, "exclude each other")

	// Grow: the backfill carries every key (and the tombstone) into epoch 2.
	expect(t, admin.run("", "topic", "repartition", "kv", "--partitions", "3"), exitOK)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = admin.run("", "topic", "describe", "kv")
		expect(t, r, exitOK, "compaction", "compacted: the latest record of every key; tombstones kept 1h0m0s")
		if noBackfill.MatchString(r.stdout) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backfill has not ended: %s", r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	expect(t, r, exitOK, "done: 5 copies, 0 refused", "retained", "epochs 1-2")
	r = cons.run("", "consume", "kv", "--group", "g2", "--from", "current-epoch", "--format", "jsonl", "--idle-exit", "700ms")
	expect(t, r, exitOK)
	got, copies := latestByKey(t, r.stdout)
	if !sameMap(got, want) || copies != 5 {
		t.Fatalf("current epoch after the backfill: %v (%d copies), want %v (5 copies)", got, copies, want)
	}
	r = cons.run("", "consume", "kv", "--group", "g3", "--from", "current-epoch", "--idle-exit", "700ms")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	sort.Strings(lines)
	var tomb string
	for _, l := range lines {
		if strings.Contains(l, "\te\t") {
			tomb = l
		}
	}
	if f := strings.Split(tomb, "\t"); len(f) != 7 || f[4] != "" || f[5] != "tombstone" || !strings.HasPrefix(f[6], "backfill:1/") {
		t.Fatalf("text line of e's copied tombstone: %q", tomb)
	}

	// Retire epoch 1: refused on a plain topic, done on the compacted one.
	expect(t, admin.run("", "topic", "retire", "plain"), exitUsage, "backfill")
	expect(t, admin.run("", "topic", "retire", "kv", "--through", "-1"), exitUsage, "give an epoch number")
	expect(t, admin.run("", "topic", "retire", "kv"), exitOK, "epochs 1 retired")
	r = admin.run("", "topic", "describe", "kv")
	expect(t, r, exitOK, "retired (records deleted): 1")
	if !regexp.MustCompile(`records\s+retired`).MatchString(r.stdout) {
		t.Fatalf("describe after retiring: %s", r.stdout)
	}
	r = cons.run("", "consume", "kv", "--group", "g4", "--from", "beginning", "--format", "jsonl", "--idle-exit", "700ms")
	if got, _ := latestByKey(t, r.stdout); !sameMap(got, want) {
		t.Fatalf("from the beginning after retiring: %v, want %v", got, want)
	}
}
