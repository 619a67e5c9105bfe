package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// freePort returns a port free on 127.0.0.1 right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestNATSServerConfigFiles checks what 'pctl nats-server config' writes, read back with
// nats-server's own parser: JetStream with sync always, 16 MiB payloads, full routes with a
// password, four users, and secrets in mode 0600 files.
func TestNATSServerConfigFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	r := runCLI(context.Background(), nil, strings.NewReader(""), "nats-server", "config", "--dir", dir, "--port", "14222", "--cluster-port", "16222", "--http-port", "18222")
	expect(t, r, 0, "3-node cluster", "pctl nats-server -c "+filepath.Join(dir, "node-3.conf"),
		"pctl serve --nats nats://127.0.0.1:14222,nats://127.0.0.1:14223,nats://127.0.0.1:14224 --creds "+filepath.Join(dir, "broker.nk")+" --replicas 3")
	for _, name := range []string{"node-1.conf", "node-2.conf", "node-3.conf", "broker.nk", "admin.nk", "producer.nk", "consumer.nk"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600 (it holds a secret)", name, st.Mode().Perm())
		}
	}
	for i := 1; i <= 3; i++ {
		o, err := server.ProcessConfigFile(filepath.Join(dir, fmt.Sprintf("node-%d.conf", i)))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case o.ServerName != fmt.Sprintf("node-%d", i):
			t.Errorf("node %d: server_name %q", i, o.ServerName)
		case o.Port != 14221+i || o.HTTPPort != 18221+i || o.Cluster.Port != 16221+i:
			t.Errorf("node %d: ports %d/%d/%d", i, o.Port, o.Cluster.Port, o.HTTPPort)
		case !o.JetStream || !o.SyncAlways || o.StoreDir != filepath.Join(dir, fmt.Sprintf("node-%d", i)):
			t.Errorf("node %d: jetstream %v, sync always %v, store %s", i, o.JetStream, o.SyncAlways, o.StoreDir)
		case o.MaxPayload != 16<<20:
			t.Errorf("node %d: max_payload %d, want 16 MiB", i, o.MaxPayload)
		case len(o.Routes) != 2 || o.Cluster.Password == "" || len(o.Cluster.Password) < 32:
			t.Errorf("node %d: %d routes, route password %q", i, len(o.Routes), o.Cluster.Password)
		case len(o.Nkeys) != 4:
			t.Errorf("node %d: %d users, want broker, admin, producer, consumer", i, len(o.Nkeys))
		}
	}

	// Existing files are kept unless --force.
	r = runCLI(context.Background(), nil, strings.NewReader(""), "nats-server", "config", "--dir", dir)
	expect(t, r, 2, "exists; --force overwrites it")
	r = runCLI(context.Background(), nil, strings.NewReader(""), "nats-server", "config", "--dir", dir, "--force", "--nodes", "2", "--sync-interval", "30s")
	expect(t, r, 0, "2-node cluster", "warning: 2 nodes stop JetStream when 1 are down")
	o, err := server.ProcessConfigFile(filepath.Join(dir, "node-1.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if o.SyncAlways || o.SyncInterval != 30*time.Second {
		t.Errorf("--sync-interval 30s: sync always %v, interval %v", o.SyncAlways, o.SyncInterval)
	}
}

// TestNATSServerConfigHosts checks the one-node-per-machine layout: every node on the base
// ports on all interfaces, routes to the other hosts by name, the given store directory.
func TestNATSServerConfigHosts(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(context.Background(), nil, strings.NewReader(""), "nats-server", "config", "--dir", dir, "--hosts", "nats-a,nats-b,nats-c", "--store-dir", "/var/lib/nats")
	expect(t, r, 0, "Copy node-N.conf to host N", "pctl serve --nats nats://nats-a:4222,nats://nats-b:4222,nats://nats-c:4222")
	o, err := server.ProcessConfigFile(filepath.Join(dir, "node-2.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, u := range o.Routes {
		routes = append(routes, u.Host)
	}
	if o.HTTPHost != "127.0.0.1" || o.HTTPPort != 8222 {
		t.Errorf("node-2: monitoring on %s:%d, want 127.0.0.1:8222 (it has no authentication)", o.HTTPHost, o.HTTPPort)
	}
	if o.Host != "0.0.0.0" || o.Port != 4222 || o.Cluster.Port != 6222 || o.StoreDir != "/var/lib/nats" ||
		strings.Join(routes, ",") != "nats-a:6222,nats-c:6222" {
		t.Errorf("node-2: host %s port %d route port %d store %s routes %v", o.Host, o.Port, o.Cluster.Port, o.StoreDir, routes)
	}
}

func TestNATSServerConfigUsage(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no dir", []string{}, "--dir is required"},
		{"bad sync", []string{"--dir", dir, "--sync-interval", "sometimes"}, `--sync-interval "sometimes" is neither "always" nor a positive duration`},
		{"small payload", []string{"--dir", dir, "--max-payload", "1000"}, "--max-payload 1000 is out of range"},
		{"no nodes", []string{"--dir", dir, "--nodes", "0"}, "--nodes 0 is out of range"},
		{"empty host", []string{"--dir", dir, "--hosts", "a,,c"}, "empty host name"},
		{"bad port", []string{"--dir", dir, "--port", "70000"}, "--port 70000 is not a port"},
		{"overlapping ports", []string{"--dir", dir, "--port", "4222", "--cluster-port", "4223"}, "overlap"},
		{"argument", []string{"--dir", dir, "extra"}, `takes no arguments (got "extra")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(context.Background(), nil, strings.NewReader(""), append([]string{"nats-server", "config"}, tc.args...)...)
			expect(t, r, 2, tc.want)
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused commands wrote %d files", len(entries))
	}
}

// TestNATSServerRunsNode runs 'pctl nats-server -c FILE' in-process on a configuration that
// 'pctl nats-server config' wrote, and checks the node from outside: it takes JetStream requests
// from the broker's user, refuses a forbidden publish of the producer role (spec/protocol.md §8),
// and stops when its context ends.
func TestNATSServerRunsNode(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	r := runCLI(context.Background(), nil, strings.NewReader(""), "nats-server", "config", "--dir", dir, "--nodes", "1", "--port", fmt.Sprint(port), "--http-port", "0")
	expect(t, r, 0, "1-node cluster")
	conf := filepath.Join(dir, "node-1.conf")

	r = runCLI(context.Background(), nil, strings.NewReader(""), "nats-server", "-c", conf, "-t")
	expect(t, r, 0, "is valid")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan cliResult, 1)
	logFile := filepath.Join(dir, "node.log") // a flag on top of the file, as nats-server takes
	go func() { done <- runCLI(ctx, nil, strings.NewReader(""), "nats-server", "-c", conf, "-l", logFile) }()
	defer func() {
		cancel()
		select {
		case res := <-done:
			if res.code != 0 {
				t.Errorf("pctl nats-server exited %s", res)
			}
		case <-time.After(30 * time.Second):
			t.Error("pctl nats-server did not stop within 30s of its context's end")
		}
	}()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	connect := func(role string) *nats.Conn {
		t.Helper()
		opt, err := nats.NkeyOptionFromSeed(filepath.Join(dir, role+".nk"))
		if err != nil {
			t.Fatal(err)
		}
		var nc *nats.Conn
		for deadline := time.Now().Add(20 * time.Second); ; {
			nc, err = nats.Connect(url, opt)
			if err == nil {
				return nc
			}
			if time.Now().After(deadline) {
				t.Fatalf("connect as %s: %v", role, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	bnc := connect("broker")
	defer bnc.Close()
	msg, err := bnc.Request("$JS.API.INFO", nil, 5*time.Second)
	if err != nil || !strings.Contains(string(msg.Data), `"type":"io.nats.jetstream.api.v1.account_info_response"`) {
		t.Fatalf("JetStream account info: %v %s", err, msgData(msg))
	}
	if mp := bnc.MaxPayload(); mp != 16<<20 {
		t.Errorf("max_payload %d, want 16 MiB", mp)
	}

	errs := make(chan error, 4)
	opt, _ := nats.NkeyOptionFromSeed(filepath.Join(dir, "producer.nk"))
	pnc, err := nats.Connect(url, opt, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer pnc.Close()
	if err := pnc.Publish("pctl.admin.topic.create", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	pnc.Flush()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("forbidden publish: %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a producer published to pctl.admin.> without a permissions violation")
	}
	if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "Server is ready") {
		t.Errorf("-l %s: the node did not log there:\n%s", logFile, b)
	}
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

func TestNATSServerBadConfig(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.conf")
	os.WriteFile(bad, []byte("jetstream {\n  sync_interval: \"soon\"\n"), 0o600)
	r := runCLI(context.Background(), nil, strings.NewReader(""), "nats-server", "-c", bad)
	expect(t, r, 2, "pctl nats-server:", bad)
	if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("error is not one line: %q", r.stderr)
	}
	r = runCLI(context.Background(), nil, strings.NewReader(""), "nats-server", "-c", filepath.Join(t.TempDir(), "missing.conf"))
	expect(t, r, 2, "missing.conf")
	r = runCLI(context.Background(), nil, strings.NewReader(""), "nats-server", "--help")
	expect(t, r, 0, "pctl nats-server config", "nats-server v"+server.VERSION)
}
