package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker"
)

// TestCredsIssueListRevoke: credentials scoped to one topic (and one group) work for that topic
// and group with the ordinary commands, and for nothing else; revoking one shuts it out.
func TestCredsIssueListRevoke(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	for _, name := range []string{"orders", "other"} {
		expect(t, admin.run("", "topic", "create", name, "--partitions", "2", "--partitioner", "kafka-murmur2"), exitOK)
	}
	expect(t, cliFor(t, b, broker.RoleProducer).run("a\t1\nb\t2\nc\t3\n", "produce", "orders"), exitOK)
	dir := t.TempDir()
	cfile, pfile := filepath.Join(dir, "billing.nk"), filepath.Join(dir, "orders-producer.nk")

	expect(t, admin.run("", "creds", "issue", "--role", "consumer", "--topic", "orders", "--group", "billing", "--out", cfile, "--name", "billing service"),
		exitOK, "consumer credential for topic orders, group billing", "accepts it now")
	if st, err := os.Stat(cfile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v %v", st, err)
	}
	expect(t, admin.run("", "creds", "issue", "--role", "producer", "--topic", "orders", "--out", pfile), exitOK, "producer credential for topic orders")

	cons := &pctlAs{t: t, url: b.ClientURL(), creds: cfile}
	r := cons.run("", "consume", "orders", "--group", "billing", "--from-beginning", "--idle-exit", "1s")
	expect(t, r, exitOK, "3 records")
	for _, r := range []cliResult{
		cons.run("", "consume", "orders", "--group", "audit", "--from-beginning", "--idle-exit", "1s"),
		cons.run("", "consume", "other", "--group", "billing", "--from-beginning", "--idle-exit", "1s"),
		cons.run("d\t4\n", "produce", "orders"),
	} {
		expect(t, r, exitFailure, "may not")
		t.Logf("%s", r)
	}

	prod := &pctlAs{t: t, url: b.ClientURL(), creds: pfile}
	expect(t, prod.run("d\t4\ne\t5\n", "produce", "orders"), exitOK)
	expect(t, prod.run("d\t4\n", "produce", "orders", "--broker-side"), exitOK)
	for _, r := range []cliResult{prod.run("x\t1\n", "produce", "other"), prod.run("x\t1\n", "produce", "other", "--broker-side")} {
		expect(t, r, exitFailure, "may not")
		t.Logf("%s", r)
	}
	expect(t, cons.run("", "consume", "orders", "--group", "billing", "--idle-exit", "1s"), exitOK, "3 records")

	r = admin.run("", "creds", "list", "--json")
	expect(t, r, exitOK)
	var users []struct {
		NKey, Role, Topic, Group, Name string
	}
	if err := json.Unmarshal([]byte(r.stdout), &users); err != nil || len(users) != 2 {
		t.Fatalf("creds list --json: %v\n%s", err, r.stdout)
	}
	expect(t, admin.run("", "creds", "list"), exitOK, "billing service", "consumer", "producer")

	expect(t, admin.run("", "creds", "revoke", cfile), exitOK, "revoked")
	expect(t, cons.run("", "consume", "orders", "--group", "billing", "--idle-exit", "1s"), exitFailure)
	expect(t, admin.run("", "creds", "revoke", cfile), exitUsage, "no scoped credential")
	// The role credentials cannot manage credentials.
	expect(t, cliFor(t, b, broker.RoleConsumer).run("", "creds", "list"), exitFailure)
}

func TestCredsIssueUsage(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "orders", "--partitions", "1", "--partitioner", "kafka-murmur2"), exitOK)
	out := filepath.Join(t.TempDir(), "x.nk")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"admin is never scoped", []string{"--role", "admin", "--topic", "orders", "--out", out}, "give producer or consumer"},
		{"consumer without group", []string{"--role", "consumer", "--topic", "orders", "--out", out}, "--group is required"},
		{"producer with group", []string{"--role", "producer", "--topic", "orders", "--group", "g", "--out", out}, "consumer credentials only"},
		{"no out", []string{"--role", "producer", "--topic", "orders"}, "--out FILE is required"},
		{"bad topic", []string{"--role", "producer", "--topic", "a.b", "--out", out}, "--topic"},
		{"unknown topic", []string{"--role", "producer", "--topic", "nope", "--out", out}, "does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			expect(t, admin.run("", append([]string{"creds", "issue"}, c.args...)...), exitUsage, c.want)
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s left a seed file behind", c.name)
			}
		})
	}
	expect(t, admin.run("", "creds", "issue", "--role", "producer", "--topic", "orders", "--out", out), exitOK)
	expect(t, admin.run("", "creds", "issue", "--role", "producer", "--topic", "orders", "--out", out), exitUsage, "exists")
	expect(t, admin.run("", "creds", "issue", "--role", "producer", "--topic", "orders", "--out", out, "--force"), exitOK)
}

// TestCredsIssueExternalServer: with 'pctl serve --nats', the broker cannot add users to the
// cluster: 'creds issue' prints the entry for the nodes' configuration, which nats-server parses.
func TestCredsIssueExternalServer(t *testing.T) {
	dir := t.TempDir()
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	brokerSeed := filepath.Join(dir, "broker.nk")
	if err := os.WriteFile(brokerSeed, append(append([]byte(nil), seed...), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "js"), NoLog: true, NoSigs: true,
		Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)
	b, err := broker.Start(context.Background(), broker.Config{DataDir: filepath.Join(dir, "data"), NATSURL: srv.ClientURL(), Creds: brokerSeed, ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	admin := &pctlAs{t: t, url: srv.ClientURL(), creds: brokerSeed}
	expect(t, admin.run("", "topic", "create", "orders", "--partitions", "2", "--partitioner", "kafka-murmur2"), exitOK)
	out := filepath.Join(dir, "c.nk")
	r := admin.run("", "creds", "issue", "--role", "consumer", "--topic", "orders", "--group", "g", "--out", out)
	expect(t, r, exitOK, "external NATS server", "nkey:")
	entry := r.stdout[strings.Index(r.stdout, "# pctl consumer"):]
	conf := filepath.Join(dir, "n.conf")
	if err := os.WriteFile(conf, []byte("authorization {\n users: [\n"+entry+"\n ]\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server does not parse the printed entry: %v\n%s", err, entry)
	}
	if len(opts.Nkeys) != 1 || opts.Nkeys[0].Permissions == nil || !strings.Contains(strings.Join(opts.Nkeys[0].Permissions.Publish.Allow, " "), ".g.>") {
		t.Fatalf("parsed %+v from\n%s", opts.Nkeys, entry)
	}
	expect(t, admin.run("", "creds", "list"), exitUsage, "external NATS server")
}
