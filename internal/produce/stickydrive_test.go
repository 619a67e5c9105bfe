package produce

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner"
)

// TestFenceResendFollowsTheMachine: records sent after the old epoch's subjects are gone (no
// stream answers them: every batch is ambiguous and settles until the producer learns the newer
// epoch) are re-sent under the new epoch as the sticky machine's plan says, which the
// spec fixes (spec/protocol.md §5.1.2 step 4: "in their original send order", each to its
// partition in the new epoch). So every partition stores this producer's records in send order
// (Pctl-Seq ascending) and every record exactly once; keyless records, spread round robin in the
// order they are placed, put records of both old sinks into each new partition, so a re-send in
// any other order shows. A real nats-server; the descriptor is the test's.
func TestFenceResendFollowsTheMachine(t *testing.T) {
	nc, js := testServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "fr"
	stream := func(q, epoch int) jetstream.StreamConfig {
		return jetstream.StreamConfig{Name: wire.StreamName(topic, q), Subjects: []string{wire.DataSubject(topic, epoch, q)}, Storage: jetstream.MemoryStorage, AllowBatchPublish: true, Duplicates: time.Minute}
	}
	for q := 0; q < 2; q++ {
		if _, err := js.CreateStream(ctx, stream(q, 1)); err != nil {
			t.Fatal(err)
		}
	}
	epoch1 := wire.Epoch{Epoch: 1, Partitions: 2}
	var desc atomic.Pointer[wire.Topic]
	desc.Store(&wire.Topic{Name: topic, ID: "id1", Epochs: []wire.Epoch{epoch1}})
	conn := &Conn{NC: nc, JS: js, Timeout: 5 * time.Second, AckTimeout: 500 * time.Millisecond,
		Topic: func(context.Context, string) (*wire.Topic, error) {
			d := *desc.Load()
			return &d, nil
		},
		Partitioner: func(context.Context, wire.Partitioner) (partitioner.Partitioner, error) { return nil, nil }}
	p, err := New(ctx, conn, topic, Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	var acked, failed atomic.Int64
	send := func(n int) {
		for i := 0; i < n; i++ {
			if err := p.Send(ctx, Record{NoKey: true, Value: []byte(fmt.Sprint("v", i))}, func(r Result) {
				if r.Err != nil {
					failed.Add(1)
				} else {
					acked.Add(1)
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(200)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The old subjects go before the producer learns of epoch 2: what it sends now finds no
	// stream, and stays ambiguous until the fence.
	e1 := epoch1
	for q := 0; q < 2; q++ {
		st, err := js.UpdateStream(ctx, stream(q, 2))
		if err != nil {
			t.Fatal(err)
		}
		e1.Boundaries = append(e1.Boundaries, st.CachedInfo().State.LastSeq)
	}
	if _, err := js.CreateStream(ctx, stream(2, 2)); err != nil {
		t.Fatal(err)
	}
	send(200)
	time.Sleep(300 * time.Millisecond)
	desc.Store(&wire.Topic{Name: topic, ID: "id1", Epochs: []wire.Epoch{e1, {Epoch: 2, Partitions: 3}}})
	if err := nc.Publish(wire.TopicEventSubject(topic), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	send(100)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if acked.Load() != 500 || failed.Load() != 0 {
		t.Fatalf("%d acknowledged, %d failed; want all 500 acknowledged", acked.Load(), failed.Load())
	}
	if p.Resent() == 0 {
		t.Fatal("nothing re-sent under epoch 2: the test did not fence records in flight")
	}
	seen := map[uint64]int{}
	for q := 0; q < 3; q++ {
		st, err := js.Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		var last uint64
		for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatalf("partition %d, stream sequence %d: %v", q, seq, err)
			}
			n, err := strconv.ParseUint(m.Header.Get(wire.HeaderSeq), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			seen[n]++
			if n <= last {
				t.Fatalf("partition %d stores record %d after record %d (stream sequence %d): not in send order (spec/protocol.md §5.1.2 step 4); %d records re-sent", q, n, last, seq, p.Resent())
			}
			last = n
		}
	}
	for n := uint64(1); n <= 500; n++ {
		if seen[n] != 1 {
			t.Fatalf("record %d is stored %d times; want once", n, seen[n])
		}
	}
	t.Logf("%d records re-sent under epoch 2, %d batches settled", p.Resent(), p.Settled())
}

// TestSettlingSendsTheRestFirst: while a sink's batch is ambiguous (no stream answers its
// subject for a while; the epoch does not change) the records produced meanwhile wait, and once
// it settled the records it found not stored go first, then the later ones (spec/protocol.md
// §5.1.2: "while it lasts, the sink sends nothing more"; "only a record settled as not stored
// moves, ahead of every record sent after it"): the partition stores the producer's records in
// send order, each once. What the sink transmits is the sticky machine's decision, so a machine
// that sent past an ambiguous batch would show here. A real nats-server.
func TestSettlingSendsTheRestFirst(t *testing.T) {
	nc, js := testServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "rf"
	cfg := jetstream.StreamConfig{Name: wire.StreamName(topic, 0), Subjects: []string{wire.DataSubject(topic, 1, 0)}, Storage: jetstream.MemoryStorage, AllowBatchPublish: true, Duplicates: time.Minute}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := &wire.Topic{Name: topic, ID: "id1", Epochs: []wire.Epoch{{Epoch: 1, Partitions: 1}}}
	conn := &Conn{NC: nc, JS: js, Timeout: 5 * time.Second, AckTimeout: 200 * time.Millisecond,
		Topic: func(context.Context, string) (*wire.Topic, error) {
			c := *d
			return &c, nil
		},
		Partitioner: func(context.Context, wire.Partitioner) (partitioner.Partitioner, error) { return nil, nil }}
	p, err := New(ctx, conn, topic, Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	var acked, failed atomic.Int64
	send := func(n int) {
		for i := 0; i < n; i++ {
			if err := p.Send(ctx, Record{NoKey: true, Value: []byte(fmt.Sprint("v", i))}, func(r Result) {
				if r.Err != nil {
					failed.Add(1)
				} else {
					acked.Add(1)
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(100)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	gone := cfg
	gone.Subjects = []string{"elsewhere.>"}
	if _, err := js.UpdateStream(ctx, gone); err != nil {
		t.Fatal(err)
	}
	send(50) // no stream answers: the batch is ambiguous
	for i := 0; i < 10; i++ {
		time.Sleep(50 * time.Millisecond)
		send(20) // produced while the sink settles
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	send(50)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	const total = 400
	if acked.Load() != total || failed.Load() != 0 {
		t.Fatalf("%d acknowledged, %d failed; want all %d acknowledged", acked.Load(), failed.Load(), total)
	}
	if p.Settled() == 0 {
		t.Fatal("no batch settled: the test made nothing ambiguous")
	}
	st, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]int{}
	var last uint64
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream sequence %d: %v", seq, err)
		}
		n, err := strconv.ParseUint(m.Header.Get(wire.HeaderSeq), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seen[n]++
		if n <= last {
			t.Fatalf("the partition stores record %d after record %d (stream sequence %d): a record sent past an ambiguous batch, or not the rest first (spec/protocol.md §5.1.2); %d batches settled", n, last, seq, p.Settled())
		}
		last = n
	}
	for n := uint64(1); n <= total; n++ {
		if seen[n] != 1 {
			t.Fatalf("record %d is stored %d times; want once", n, seen[n])
		}
	}
	t.Logf("%d batches settled", p.Settled())
}
