package broker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// TestBackfillWarnsWhenItOutlastsTheDeleteRetention: a compacted topic whose backfill runs
// longer than its delete retention (1s here; the step hook slows every copy) gets a warning in
// the broker's log, once: a tombstone written into the new epoch since the backfill began may
// have expired before its key's copy (spec/protocol.md §10.2).
func TestBackfillWarnsWhenItOutlastsTheDeleteRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var lines []string
	logf := func(format string, args ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	hook := func(topic, state string) error {
		if state == "backfill-copy" {
			time.Sleep(10 * time.Millisecond) // past the 256 copies in flight, one copy per 10ms

		}
		return nil
	}
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, StepHook: hook, Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "od", Partitions: 1, Partitioner: "jump", Compact: true, DeleteRetentionMS: 1000}); err != nil {
		t.Fatal(err)
	}
	p, err := admin.NewProducer(ctx, "od", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 400; i++ {
		if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "od", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	waitBackfilled(t, ctx, admin, "od")
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, l := range lines {
		if strings.Contains(l, "backfill has run longer than the topic's delete retention") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d warnings about the delete retention, want 1", n)
	}
}
