package client

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedNATS starts a real nats-server in this process on a random port of 127.0.0.1, with
// JetStream (in a temporary directory) when jetStream is set, and stops it when the test ends.
// The tests of package client and, through this export, of package client_test share it.
func EmbeddedNATS(t testing.TB, jetStream bool) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
	if jetStream {
		o.JetStream, o.StoreDir = true, t.TempDir()
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}
