package main

import (
	"encoding/json"
	"strings"
	"testing"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

func TestTopicCommands(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)

	r := admin.run("", "topic", "create", "orders", "--partitions", "4", "--partitioner", "kafka-murmur2")
	expect(t, r, exitOK, "created topic orders: epoch 1, 4 partitions, partitioner kafka-murmur2 (sha256:")

	r = admin.run("", "topic", "create", "cfg", "--partitions", "2", "--partitioner", "jump", "--json")
	expect(t, r, exitOK)
	var created wire.Topic
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil || created.Name != "cfg" || created.Current().Partitions != 2 {
		t.Fatalf("create --json: %v: %s", err, r)
	}

	r = admin.run("", "topic", "list")
	expect(t, r, exitOK, "orders", "kafka-murmur2", "cfg")
	r = admin.run("", "topic", "list", "--json")
	var list []wire.TopicSummary
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 {
		t.Fatalf("list --json: %v: %s", err, r)
	}

	if r := cliFor(t, b, broker.RoleProducer).run("a\t1\nb\t2\nc\t3\n", "produce", "orders"); r.code != exitOK {
		t.Fatalf("produce: %s", r)
	}
	r = admin.run("", "topic", "expand", "orders", "--partitions", "8")
	expect(t, r, exitOK, "epoch 2 active", "4 -> 8 partitions", "epoch 1 boundaries:")

	r = admin.run("", "topic", "describe", "orders")
	expect(t, r, exitOK, "topic", "orders", "current epoch", "2: 8 partitions", "epoch 1, started", "epoch 2 (current)", "boundaries", "ancestry", "change", "none in progress")

	r = admin.run("", "topic", "describe", "orders", "--json")
	var desc wire.Topic
	if err := json.Unmarshal([]byte(r.stdout), &desc); err != nil || len(desc.Epochs) != 2 || len(desc.Epochs[0].Boundaries) != 4 {
		t.Fatalf("describe --json: %v: %s", err, r)
	}

	r = admin.run("", "topic", "repartition", "orders", "--partitioner", "jump", "--partitions", "3")
	expect(t, r, exitOK, "epoch 3 active", "8 -> 3 partitions", "kafka-murmur2 (sha256:", "-> jump (sha256:")

	r = admin.run("", "topic", "groups", "orders")
	expect(t, r, exitOK, "no consumer groups")
	if r := cliFor(t, b, broker.RoleConsumer).run("", "consume", "orders", "--group", "g1", "--from-beginning", "--max", "3"); r.code != exitOK {
		t.Fatalf("consume: %s", r)
	}
	r = admin.run("", "topic", "groups", "orders")
	expect(t, r, exitOK, "group g1", "PARTITION", "POSITION", "END", "LAG")
	r = admin.run("", "topic", "groups", "orders", "--json")
	var groups []client.GroupLag
	if err := json.Unmarshal([]byte(r.stdout), &groups); err != nil || len(groups) != 1 || len(groups[0].Partitions) != 8 || groups[0].Lag != 0 {
		t.Fatalf("groups --json: %v: %s", err, r)
	}

	r = admin.run("", "topic", "delete", "cfg")
	expect(t, r, exitOK, "deleted topic cfg")
	r = admin.run("", "topic", "describe", "cfg")
	expect(t, r, exitUsage, `topic "cfg" does not exist`)
}

func TestTopicErrors(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	tests := []struct {
		name string
		p    *pctlAs
		args []string
		code int
		want string
	}{
		{"existing topic", admin, []string{"topic", "create", "t", "--partitions", "2", "--partitioner", "jump"}, exitUsage, `topic "t" already exists`},
		{"bad topic name", admin, []string{"topic", "create", "a.b", "--partitions", "2", "--partitioner", "jump"}, exitUsage, "a topic name is 1 to 64 characters"},
		{"zero partitions", admin, []string{"topic", "create", "z", "--partitions", "0", "--partitioner", "jump"}, exitUsage, "a topic has 1 to 16384 partitions"},
		{"too many partitions", admin, []string{"topic", "create", "z", "--partitions", "100000", "--partitioner", "jump"}, exitUsage, "a topic has 1 to 16384 partitions"},
		{"partitions not a number", admin, []string{"topic", "create", "z", "--partitions", "many", "--partitioner", "jump"}, exitUsage, "not an integer"},
		{"missing partitioner", admin, []string{"topic", "create", "z", "--partitions", "2"}, exitUsage, "--partitioner are required"},
		{"unknown partitioner", admin, []string{"topic", "create", "z", "--partitions", "2", "--partitioner", "nope"}, exitUsage, `"nope" is not a built-in`},
		{"unknown digest", admin, []string{"topic", "create", "z", "--partitions", "2", "--partitioner", strings.Repeat("ab", 32)}, exitUsage, "no plugin with digest"},
		{"unknown digest prefix", admin, []string{"topic", "create", "z", "--partitions", "2", "--partitioner", "abcdef12"}, exitUsage, "no plugin's digest starts with abcdef12"},
		{"bad config", admin, []string{"topic", "create", "z", "--partitions", "2", "--partitioner", "jump", "--config", "novalue"}, exitUsage, "has no '='"},
		{"config refused by the module", admin, []string{"topic", "create", "z", "--partitions", "2", "--partitioner", "jump", "--config", "seed=1"}, exitUsage, ""},
		{"unknown topic describe", admin, []string{"topic", "describe", "nope"}, exitUsage, `topic "nope" does not exist`},
		{"unknown topic delete", admin, []string{"topic", "delete", "nope"}, exitUsage, `topic "nope" does not exist`},
		{"unknown topic groups", admin, []string{"topic", "groups", "nope"}, exitUsage, `topic "nope" does not exist`},
		{"unknown topic expand", admin, []string{"topic", "expand", "nope", "--partitions", "3"}, exitUsage, `topic "nope" does not exist`},
		{"expand must grow", admin, []string{"topic", "expand", "t", "--partitions", "2"}, exitUsage, "expand only grows"},
		{"repartition with nothing to change", admin, []string{"topic", "repartition", "t"}, exitUsage, "nothing to change"},
		{"repartition to the same layout", admin, []string{"topic", "repartition", "t", "--partitions", "2"}, exitUsage, "nothing to change"},
		{"no topic name", admin, []string{"topic", "describe"}, exitUsage, "give exactly one topic name"},
		{"unknown subcommand", admin, []string{"topic", "frobnicate"}, exitUsage, `unknown subcommand "frobnicate"`},
		{"producer may not create", cliFor(t, b, broker.RoleProducer), []string{"topic", "create", "p", "--partitions", "2", "--partitioner", "jump"}, exitFailure, "this needs the admin role"},
		{"consumer may not delete", cliFor(t, b, broker.RoleConsumer), []string{"topic", "delete", "t"}, exitFailure, "this needs the admin role"},
		{"producer may not repartition", cliFor(t, b, broker.RoleProducer), []string{"topic", "expand", "t", "--partitions", "3"}, exitFailure, "this needs the admin role"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.p.run("", tc.args...)
			expect(t, r, tc.code, tc.want)
			if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 {
				t.Errorf("want one line on stderr, got %d: %s", lines, r)
			}
		})
	}
	// Nothing above changed the topic.
	r := admin.run("", "topic", "describe", "t", "--json")
	var desc wire.Topic
	if err := json.Unmarshal([]byte(r.stdout), &desc); err != nil || len(desc.Epochs) != 1 {
		t.Fatalf("topic t changed: %v: %s", err, r)
	}
}

func TestDescribeCompact(t *testing.T) {
	b := make([]uint64, 1000)
	for i := range b {
		b[i] = uint64(i)
	}
	if got, want := boundariesText(b), "0 1 2 3 4 5 6 7 ... (1000 partitions)"; got != want {
		t.Errorf("boundariesText: got %q, want %q", got, want)
	}
	if got, want := boundariesText([]uint64{5, 0, 7}), "5 0 7"; got != want {
		t.Errorf("boundariesText: got %q, want %q", got, want)
	}
	all := &wire.Ancestry{Source: "all", Parents: make([][][2]int, 64)}
	for i := range all.Parents {
		all.Parents[i] = [][2]int{{0, 32}}
	}
	if got := ancestryLines(all, 12); len(got) != 1 || got[0] != "0-63 <- 0-31" {
		t.Errorf("ancestryLines(all): %q", got)
	}
	split := &wire.Ancestry{Source: "declared", Parents: make([][][2]int, 2000)}
	for c := range split.Parents {
		split.Parents[c] = [][2]int{{c % 1000, c%1000 + 1}}
	}
	got := ancestryLines(split, 12)
	if len(got) != 13 || got[0] != "0 <- 0" || got[12] != "... (2000 partitions in all)" {
		t.Errorf("ancestryLines(split): %q", got)
	}
	if got := rangesText([][2]int{{0, 1}, {3, 6}}); got != "0, 3-5" {
		t.Errorf("rangesText: %q", got)
	}
}
