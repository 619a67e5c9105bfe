package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// backfillHook records what HookBackfill is told.
type backfillHook struct {
	mu    sync.Mutex
	calls []string
}

func (h *backfillHook) OnBackfill(topic string, epoch int, copied, newer int64, done, partitions int, finished bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, fmt.Sprintf("%s/%d copied=%d newer=%d done=%d/%d finished=%v", topic, epoch, copied, newer, done, partitions, finished))
}

// TestBackfillReportsProgress: a backfill's progress reaches pctl.events.backfill.<topic> and
// the broker's HookBackfill, ending with every old partition done and one copy per key written
// (nothing writes during it), and the descriptor's backfill says the same.
func TestBackfillReportsProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hook := &backfillHook{}
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Hooks: []any{hook}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "ev", Partitions: 3, Partitioner: "kafka-murmur2", Compact: true}); err != nil {
		t.Fatal(err)
	}
	events := make(chan *nats.Msg, 64)
	sub, err := admin.Conn().ChanSubscribe(wire.BackfillSubject("ev"), events)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	p, err := admin.NewProducer(ctx, "ev", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 150
	for round := 0; round < 2; round++ {
		for i := 0; i < keys; i++ {
			if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint(round))}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "ev", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	var last wire.BackfillEvent
	for last.State != wire.BackfillDone {
		select {
		case m := <-events:
			if err := json.Unmarshal(m.Data, &last); err != nil {
				t.Fatalf("backfill event %q: %v", m.Data, err)
			}
		case <-ctx.Done():
			t.Fatalf("no backfill event with state done; last: %+v", last)
		}
	}
	want := wire.BackfillEvent{Topic: "ev", Epoch: 2, DonePartitions: 3, Partitions: 3, Copied: keys, State: wire.BackfillDone}
	if last != want {
		t.Fatalf("last backfill event %+v, want %+v", last, want)
	}
	desc := waitBackfilled(t, ctx, admin, "ev")
	if bf := desc.Current().Backfill; bf.Copied != keys || bf.Newer != 0 || bf.Ended == nil || len(bf.Done) != 3 {
		t.Fatalf("descriptor's backfill %+v", *bf)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if n := len(hook.calls); n == 0 || hook.calls[n-1] != fmt.Sprintf("ev/2 copied=%d newer=0 done=3/3 finished=true", keys) {
		t.Fatalf("HookBackfill calls: %q", hook.calls)
	}
}
