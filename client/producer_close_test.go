package client_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
)

// TestProducerCloseWithTheBrokerGone: the broker (and its embedded NATS server) goes away with
// records in flight and more sent after; Close must return (the old one waited in Flush for
// ever: the client reconnects for ever, so the records never finish), fail every record not
// acknowledged (each callback exactly once), and a second Close is a no-op. Both a Close with a
// deadline and one with none (bounded by CloseIdle) are tried.
func TestProducerCloseWithTheBrokerGone(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline bool
	}{{"ctx-deadline", true}, {"no-deadline", false}} {
		t.Run(tc.name, func(t *testing.T) {
			const topic = "gone"
			b := testBroker(t, topic, 2)
			cl := thinConnect(t, b, broker.RoleProducer)
			p, err := cl.NewProducer(context.Background(), topic, client.ProducerOptions{Logf: quietLogf(t), CloseIdle: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var calls, failed atomic.Int64
			const n = 200
			send := func(from int) {
				for i := from; i < from+n/2; i++ {
					if err := p.Send(context.Background(), client.Record{Key: []byte(fmt.Sprint("k", i%7)), Value: []byte("v")}, func(r client.Result) {
						calls.Add(1)
						if r.Err != nil {
							failed.Add(1)
						}
					}); err != nil {
						t.Fatal(err)
					}
				}
			}
			send(0)
			b.Close() // the broker and its NATS server are gone
			send(n / 2)
			ctx := context.Background()
			if tc.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
			}
			closed := make(chan error, 1)
			go func() { closed <- p.Close(ctx) }()
			select {
			case err := <-closed:
				t.Logf("Close: %v", err)
			case <-time.After(2 * time.Minute): // a hang detector, not a speed check
				buf := make([]byte, 1<<20)
				t.Fatalf("Close hangs with the broker gone:\n%s", buf[:runtime.Stack(buf, true)])
			}
			if got := calls.Load(); got != n {
				t.Fatalf("%d callbacks for %d records after Close (each record's callback runs exactly once, before Close returns)", got, n)
			}
			if err := p.Close(context.Background()); err != nil {
				t.Fatalf("second Close: %v (want a no-op)", err)
			}
			if err := p.Send(context.Background(), client.Record{Key: []byte("late")}, nil); err == nil {
				t.Fatal("Send after Close succeeded")
			}
			t.Logf("%d of %d records failed (the rest were acknowledged before the broker went)", failed.Load(), n)
		})
	}
}
