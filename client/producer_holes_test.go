package client_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
)

// TestServerHolesKeepKeyOrder: nats-server 2.15.2, on a cluster, may count a fast-batch record
// whose raft proposal a term change dropped as persisted (spec/protocol.md §5.1.2): the batch's
// stored records are then not a prefix, the producer finds the hole when it reads the batch back,
// and re-sends the record after the batch's later records. Here the server's fault is made
// deterministic: after the clean PubAck of every third batch (from the first) of two or more records, the test
// deletes that batch's first stored record before the producer confirms the batch (a real
// embedded server; the producer reads every batch back, as on a cluster). With the per-key rule
// the hole is the only record of its key in its batch, so its re-send keeps the key's order:
// the storage check must pass with holes > 0. The control turns the rule off (batches of hundreds
// of records of 4 keys): the same holes must break the order, or the check cannot fail.
func TestServerHolesKeepKeyOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noRule  bool
		wantBad bool
	}{
		{"per-key-rule", false, false},
		{"control-rule-off", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const topic = "holes"
			b := testBroker(t, topic, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			admin := thinConnect(t, b, broker.RoleAdmin)
			var mu sync.Mutex
			batches, made := 0, 0
			holes := func(stream string, first, last uint64) {
				if last == first {
					return
				}
				mu.Lock()
				batches++
				hit := batches%3 == 1
				mu.Unlock()
				if !hit {
					return
				}
				s, err := admin.JetStream().Stream(ctx, stream)
				if err == nil {
					err = s.DeleteMsg(ctx, first)
				}
				if err != nil {
					t.Errorf("making a hole at %s %d: %v", stream, first, err)
					return
				}
				mu.Lock()
				made++
				mu.Unlock()
			}
			opts := client.WithServerHoles(client.ProducerOptions{Logf: quietLogf(t)}, holes)
			if tc.noRule {
				opts = client.WithoutKeyRule(opts)
			}
			p, err := thinConnect(t, b, broker.RoleProducer).NewProducer(ctx, topic, opts)
			if err != nil {
				t.Fatal(err)
			}
			var sent []verify.Sent
			rng := rand.New(rand.NewSource(1))
			for i := 0; i < 3000; i++ {
				key := []byte(fmt.Sprint("hot", rng.Intn(4)))
				if err := p.Send(ctx, client.Record{Key: key, Value: []byte(fmt.Sprint(i))}, func(r client.Result) {
					mu.Lock()
					sent = append(sent, verify.Sent{Producer: p.ID(), PSeq: r.ProducerSeq, Key: key, Acked: r.Err == nil})
					mu.Unlock()
				}); err != nil {
					t.Fatal(err)
				}
				if i%300 == 299 {
					if err := p.Flush(ctx); err != nil { // rounds of 300: several batches without the rule too
						t.Fatal(err)
					}
				}
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			stored := storedInOrder(ctx, t, admin.JetStream(), topic, 2)
			mu.Lock()
			defer mu.Unlock()
			res := verify.Check(sent, stored, verify.Options{Groups: []string{"storage"}})
			t.Logf("%d records, %d stored; %d holes made, %d found and re-sent by the producer", len(sent), len(stored), made, p.Holes())
			if made == 0 || p.Holes() != int64(made) {
				t.Fatalf("%d holes made, the producer found %d: the test proves nothing", made, p.Holes())
			}
			for _, s := range sent {
				if !s.Acked {
					t.Fatalf("record %d failed", s.PSeq)
				}
			}
			if tc.wantBad {
				if res.OK() {
					t.Fatalf("with the per-key rule off, %d holes kept every key in order: the check cannot fail", made)
				}
				t.Logf("control: the check fails as it must:\n%s", res)
				return
			}
			if !res.OK() {
				t.Fatalf("storage check failed with the per-key rule on:\n%s", res)
			}
		})
	}
}
