package client_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// TestProducerSurvivesABrokerRestart kills the embedded broker between two runs of records and
// starts it again on the same port and data, as the client conformance harness's broker-restart
// row does: every record sent after the reconnect must be acknowledged. The harness found the Go
// producer leaving such records unacknowledged for good (its sinks idle, records outstanding).
func TestProducerSurvivesABrokerRestart(t *testing.T) {
	for _, content := range []bool{false, true} {
		t.Run(fmt.Sprint("content tokens ", content), func(t *testing.T) {
			dir := t.TempDir()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			listen := l.Addr().String()
			l.Close()
			start := func() *broker.Broker {
				var b *broker.Broker
				var err error
				for i := 0; i < 50; i++ {
					if b, err = broker.Start(context.Background(), broker.Config{DataDir: dir, Listen: listen, ConformanceKeys: 2000, Logf: t.Logf}); err == nil {
						return b
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Fatal(err)
				return nil
			}
			b := start()
			defer func() { b.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			admin := thinConnect(t, b, broker.RoleAdmin)
			if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 3, Partitioner: "kafka-murmur2"}); err != nil {
				t.Fatal(err)
			}
			c := thinConnect(t, b, broker.RoleProducer)
			opts := client.ProducerOptions{Logf: t.Logf}
			if content {
				opts.ID, opts.ContentTokens = "restart-run", true
			}
			p, err := c.NewProducer(ctx, "t", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			var failed atomic.Int64
			send := func(from, to int) {
				for i := from; i < to; i++ {
					rec := client.Record{Key: []byte(fmt.Sprint("k", i%7)), Value: []byte(fmt.Sprint(i))}
					if err := p.Send(ctx, rec, func(r client.Result) {
						if r.Err != nil && failed.Add(1) <= 3 {
							t.Errorf("record %d: %v", r.ProducerSeq, r.Err)
						}
					}); err != nil {
						t.Fatal(err)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			send(0, 50)
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			b.Abort()
			time.Sleep(300 * time.Millisecond)
			b = start()
			send(50, 75)
			fctx, fcancel := context.WithTimeout(ctx, 45*time.Second)
			defer fcancel()
			if err := p.Flush(fctx); err != nil {
				t.Fatalf("after the broker's restart: %v", err)
			}
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d records failed", n)
			}
		})
	}
}
