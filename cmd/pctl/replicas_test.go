package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// TestTopicReplicasCLI: replicas and placement are flags of topic create and topic set, shown by
// topic describe and in the descriptor; what one server cannot do is refused with a clear error
// and leaves nothing behind. (The cluster side is in broker/cluster_test.go.)
func TestTopicReplicasCLI(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "r", "--partitions", "2", "--partitioner", "jump", "--replicas", "1"), exitOK, "1 replica(s)")
	r := admin.run("", "topic", "describe", "r")
	expect(t, r, exitOK, "replication", "1 replica(s)")
	r = admin.run("", "topic", "describe", "r", "--json")
	var desc wire.Topic
	if err := json.Unmarshal([]byte(r.stdout), &desc); err != nil || desc.Replicas != 1 {
		t.Fatalf("descriptor replicas %d (%v): %s", desc.Replicas, err, r.stdout)
	}

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"three replicas on one server", []string{"topic", "create", "r3", "--partitions", "1", "--partitioner", "jump", "--replicas", "3"}, exitUsage, "need a JetStream cluster"},
		{"replicas out of range", []string{"topic", "create", "r9", "--partitions", "1", "--partitioner", "jump", "--replicas", "9"}, exitUsage, "1 to 5 replicas"},
		{"bad tag", []string{"topic", "create", "rt", "--partitions", "1", "--partitioner", "jump", "--placement-tags", "a, b c"}, exitUsage, "--placement-tags"},
		{"set nothing", []string{"topic", "set", "r"}, exitUsage, "nothing to change"},
		{"set on one server", []string{"topic", "set", "r", "--replicas", "2"}, exitUsage, "need a JetStream cluster"},
		{"set both tag flags", []string{"topic", "set", "r", "--placement-tags", "a", "--clear-placement"}, exitUsage, "exclude each other"},
		{"set unknown topic", []string{"topic", "set", "nope", "--replicas", "1"}, exitUsage, "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, admin.run("", tc.args...), tc.code, tc.want)
		})
	}
	// The refused creation left no topic, and the refused set left r as it was.
	if r := admin.run("", "topic", "describe", "r3"); r.code != exitUsage || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("a creation the server cannot place must be undone: %s", r)
	}
	expect(t, admin.run("", "topic", "describe", "r"), exitOK, "1 replica(s)")
	// Setting what it already has is fine.
	expect(t, admin.run("", "topic", "set", "r", "--replicas", "1"), exitOK, "1 replica(s) on every partition stream")
	// Producing still works.
	expect(t, cliFor(t, b, broker.RoleProducer).run("k\tv\n", "produce", "r"), exitOK, "1 acknowledged")
}

// TestServeReplicationFlags: --replicas and --sync-interval are checked before the broker starts.
func TestServeReplicationFlags(t *testing.T) {
	data := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"replicas without a cluster", []string{"--replicas", "3"}, "needs a JetStream cluster"},
		{"too many replicas", []string{"--replicas", "6", "--nats", "nats://127.0.0.1:1", "--creds", "/dev/null"}, "1 to 5 replicas"},
		{"bad sync interval", []string{"--sync-interval", "sometimes"}, "--sync-interval \"sometimes\""},
		{"sync interval with nats", []string{"--sync-interval", "1m", "--nats", "nats://127.0.0.1:1", "--creds", "/dev/null"}, "the NATS servers' own sync_interval"},
		{"bad retry interval", []string{"--retry-interval", "0s"}, "--retry-interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(context.Background(), nil, strings.NewReader(""), append([]string{"serve", "--data", data}, tc.args...)...)
			expect(t, r, exitUsage, tc.want)
		})
	}
}
