package client_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker"
)

// testCluster is a JetStream cluster of real nats-server nodes running in this process, with the
// users of spec/protocol.md §8 (broker and admin: everything; producer and consumer: their role's
// permissions), in the style of nats-server's own createJetStreamClusterExplicit. Shutting a node
// down is abrupt for its peers and its clients: its raft groups, its R1 consumers and the pull
// requests they held are gone without a word.
type testCluster struct {
	t     testing.TB
	nodes []*server.Server
	opts  []*server.Options
	creds map[string]string // user -> seed file
}

func startTestCluster(t testing.TB, n int) *testCluster {
	t.Helper()
	dir := t.TempDir()
	tc := &testCluster{t: t, creds: map[string]string{}}
	var users []*server.NkeyUser
	for _, u := range []string{"broker", broker.RoleAdmin, broker.RoleProducer, broker.RoleConsumer} {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		path := filepath.Join(dir, u+".nk")
		if err := os.WriteFile(path, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		tc.creds[u] = path
		var perms *server.Permissions
		if u == broker.RoleProducer || u == broker.RoleConsumer {
			perms = broker.UserPermissions(u, pub)
		}
		users = append(users, &server.NkeyUser{Nkey: pub, Permissions: perms})
	}
	ports := freePorts(t, n)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for i := 0; i < n; i++ {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   filepath.Join(dir, fmt.Sprintf("n%d", i)),
			MaxPayload: 16 << 20,
			NoSigs:     true,
			NoLog:      true,
			Nkeys:      users,
			Cluster:    server.ClusterOpts{Name: "pctl-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		tc.nodes = append(tc.nodes, s)
		tc.opts = append(tc.opts, o)
	}
	t.Cleanup(tc.shutdown)
	for _, s := range tc.nodes {
		if !s.ReadyForConnections(20 * time.Second) {
			t.Fatalf("node %s did not start", s.Name())
		}
	}
	// JetStream is ready when a meta leader is elected and every node knows it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := anyLeader(tc.nodes)
		for _, s := range tc.nodes {
			ready = ready && s.JetStreamIsCurrent()
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster elected no JetStream meta leader within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return tc
}

func anyLeader(nodes []*server.Server) bool {
	for _, s := range nodes {
		if s.Running() && s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// url is node i's client URL.
func (tc *testCluster) url(i int) string { return tc.nodes[i].ClientURL() }

// node returns the index of the node named name, or -1.
func (tc *testCluster) node(name string) int {
	for i, s := range tc.nodes {
		if s.Name() == name {
			return i
		}
	}
	return -1
}

// kill stops node i at once.
func (tc *testCluster) kill(i int) {
	tc.nodes[i].Shutdown()
	tc.nodes[i].WaitForShutdown()
}

func (tc *testCluster) shutdown() {
	for _, s := range tc.nodes {
		s.Shutdown()
	}
	for _, s := range tc.nodes {
		s.WaitForShutdown()
	}
}

// startClusterBroker runs a pctl broker against the cluster through node i, with R3 buckets and
// topics.
func startClusterBroker(t testing.TB, tc *testCluster, i int) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b *broker.Broker
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		b, err = broker.Start(ctx, broker.Config{DataDir: t.TempDir(), NATSURL: tc.url(i), Creds: tc.creds["broker"], Replicas: len(tc.nodes), ConformanceKeys: 2000, Logf: t.Logf})
		if err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond) // the meta leader may still be settling
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
