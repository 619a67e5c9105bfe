package broker_test

import (
	"context"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
)

// startBroker runs a real embedded broker (NATS + JetStream) on a random port in a temp dir.
func startBroker(t testing.TB, dir string) *broker.Broker {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	b, err := broker.Start(context.Background(), broker.Config{DataDir: dir, Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func connect(t testing.TB, b *broker.Broker, role string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(role), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
