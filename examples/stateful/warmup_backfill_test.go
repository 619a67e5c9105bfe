package stateful_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/examples/stateful"
)

// A warm-up on a compacted changelog after a backfill reads the current epoch alone
// (spec/protocol.md §6.10 step 3, §10.5: client.ChangelogReadStart). The changelog (compacted,
// linear hashing at 4) gets 3 states of each of 500 keys (compaction keeps the last: 500
// records), is expanded to 8 (the backfill copies every key into epoch 2: 500 copies), and then
// 100 keys get a fourth state in epoch 2 (each replaces its key's copy). So the streams hold
// 1,000 records: 500 of epoch 1 and 500 of epoch 2, counted by hand. The warm-up reads 500 (the
// old reader, the control, reads 1,000) and ends with lag 0 and the state of every key as sent
// (the last state of each key, computed from what the test sent); loading every key from the
// warmed index gives those states too. On the old code the warm-up read 1,000.
func TestWarmUpReadsCurrentEpochAfterBackfill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	began := time.Now()
	connect := func(role string) *client.Client {
		c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(role)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	admin := connect(broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "cl", Partitions: 4, Partitioner: "linear-murmur2", Compact: true}); err != nil {
		t.Fatal(err)
	}
	const keys, updated = 500, 100
	want := map[string]stateful.State{}
	send := func(round int, n int) {
		p, err := connect(broker.RoleProducer).NewProducer(ctx, "cl", client.ProducerOptions{ID: fmt.Sprint("w", round)})
		if err != nil {
			t.Fatal(err)
		}
		failed := make(chan error, n)
		for i := 0; i < n; i++ {
			k := fmt.Sprint("k", i)
			st := stateful.State{Total: int64(100*round + i), Count: int64(round)}
			body, _ := json.Marshal(st)
			if err := p.Send(ctx, client.Record{Key: []byte(k), Value: body}, func(res client.Result) {
				if res.Err != nil {
					failed <- res.Err
				}
			}); err != nil {
				t.Fatal(err)
			}
			want[k] = st
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-failed:
			t.Fatalf("round %d: %v", round, err)
		default:
		}
		t.Logf("round %d sent (%d records) at %v", round, n, time.Since(began).Round(time.Millisecond))
	}
	for round := 1; round <= 3; round++ {
		send(round, keys)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "cl", Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		d, _, err := admin.Topic(ctx, "cl")
		if err != nil {
			t.Fatal(err)
		}
		if bf := d.Current().Backfill; d.Current().Epoch == 2 && bf != nil && bf.State == wire.BackfillDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backfill of epoch 2 did not end in 60 s: %+v", d.Current().Backfill)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("backfill done at %v", time.Since(began).Round(time.Millisecond))
	send(4, updated)

	cons := connect(broker.RoleConsumer)
	all, nAll, err := stateful.ReadChangelogEveryEpoch(ctx, cons, "cl", map[int]uint64{}, map[string]stateful.State{})
	if err != nil {
		t.Fatal(err)
	}
	if nAll != 2*keys {
		t.Errorf("the reader of every epoch read %d records, want %d (500 of epoch 1, 500 of epoch 2)", nAll, 2*keys)
	}
	cur, nCur, err := stateful.ReadChangelog(ctx, cons, "cl", map[int]uint64{}, map[string]stateful.State{})
	if err != nil {
		t.Fatal(err)
	}
	p := stateful.New(cons, "cl", nil)
	lag, err := p.Warm(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	warmRead := p.Stats().ChangelogRead
	if warmRead != keys || nCur != keys || lag != 0 {
		t.Errorf("the warm-up read %d records (a fresh reader %d) and has lag %d, want %d (epoch 2 alone) and 0", warmRead, nCur, lag, keys)
	}
	for name, idx := range map[string]map[string]stateful.State{"every epoch": all, "current epoch": cur} {
		if len(idx) != len(want) {
			t.Errorf("the %s reader has %d keys, want %d", name, len(idx), len(want))
		}
		for k, w := range want {
			if idx[k] != w {
				t.Errorf("the %s reader has key %s at %+v, want %+v (the last state sent)", name, k, idx[k], w)
				break
			}
		}
	}
	ks := client.KeySet{}
	for k := range want {
		ks.Keys = append(ks.Keys, []byte(k))
	}
	if err := p.Load(ctx, ks); err != nil {
		t.Fatal(err)
	}
	got := p.Totals()
	bad := 0
	for k, w := range want {
		if got[k] != w {
			bad++
		}
	}
	if bad > 0 || p.Stats().ChangelogRead != keys {
		t.Errorf("after loading every key from the warmed index: %d keys differ from what was sent, %d records read in all (want 0 and %d)", bad, p.Stats().ChangelogRead, keys)
	}
	t.Logf("warm-up on a compacted changelog after its backfill: %d records read (epoch 2 alone), the reader of every epoch %d: %.2f of the records, same state for all %d keys",
		warmRead, nAll, float64(warmRead)/float64(nAll), len(want))
}
