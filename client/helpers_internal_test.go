package client

import (
	"context"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
)

// internalTestBroker starts an embedded broker for this package's internal tests, closed at the
// test's end, and returns a function that connects a client to it in a role (closed at the
// test's end too).
func internalTestBroker(t *testing.T, ctx context.Context) func(role string) *Client {
	t.Helper()
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return func(role string) *Client {
		t.Helper()
		c, err := Connect(ctx, Options{URL: b.ClientURL(), Creds: b.CredsPath(role), Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}
