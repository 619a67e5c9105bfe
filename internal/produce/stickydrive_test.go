package produce

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	desc, epoch1 := epochOne(t, ctx, js, topic, 2)
	k := newKeyless(t, ctx, nc, js, topic, desc, 500*time.Millisecond, func(string, ...any) {})
	k.send(200)
	k.flushAll(200)
	// The old subjects go before the producer learns of epoch 2: what it sends now finds no
	// stream, and stays ambiguous until the fence.
	e1 := epoch1
	for q := 0; q < 2; q++ {
		st, err := js.UpdateStream(ctx, partStream(topic, q, 2))
		if err != nil {
			t.Fatal(err)
		}
		e1.Boundaries = append(e1.Boundaries, st.CachedInfo().State.LastSeq)
	}
	if _, err := js.CreateStream(ctx, partStream(topic, 2, 2)); err != nil {
		t.Fatal(err)
	}
	k.send(200)
	time.Sleep(300 * time.Millisecond)
	desc.Store(&wire.Topic{Name: topic, ID: "id1", Epochs: []wire.Epoch{e1, {Epoch: 2, Partitions: 3}}})
	if err := nc.Publish(wire.TopicEventSubject(topic), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	k.send(100)
	k.flushAll(500)
	if k.p.Resent() == 0 {
		t.Fatal("nothing re-sent under epoch 2: the test did not fence records in flight")
	}
	seen := map[uint64]int{}
	for q := 0; q < 3; q++ {
		inSendOrder(t, ctx, js, wire.StreamName(topic, q), seen, fmt.Sprintf("not in send order (spec/protocol.md §5.1.2 step 4); %d records re-sent", k.p.Resent()))
	}
	onceEach(t, seen, 500)
	t.Logf("%d records re-sent under epoch 2, %d batches settled", k.p.Resent(), k.p.Settled())
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
	cfg := partStream(topic, 0, 1)
	desc, _ := epochOne(t, ctx, js, topic, 1)
	k := newKeyless(t, ctx, nc, js, topic, desc, 200*time.Millisecond, func(string, ...any) {})
	k.send(100)
	k.flushAll(100)
	gone := cfg
	gone.Subjects = []string{"elsewhere.>"}
	if _, err := js.UpdateStream(ctx, gone); err != nil {
		t.Fatal(err)
	}
	k.send(50) // no stream answers: the batch is ambiguous
	for i := 0; i < 10; i++ {
		time.Sleep(50 * time.Millisecond)
		k.send(20) // produced while the sink settles
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	k.send(50)
	const total = 400
	k.flushAll(total)
	if k.p.Settled() == 0 {
		t.Fatal("no batch settled: the test made nothing ambiguous")
	}
	seen := map[uint64]int{}
	inSendOrder(t, ctx, js, cfg.Name, seen, fmt.Sprintf("a record sent past an ambiguous batch, or not the rest first (spec/protocol.md §5.1.2); %d batches settled", k.p.Settled()))
	onceEach(t, seen, total)
	t.Logf("%d batches settled", k.p.Settled())
}

// partStream is the config of partition q's stream of topic taking epoch's subject (memory,
// fast batches, the test's duplicate window).
func partStream(topic string, q, epoch int) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: wire.StreamName(topic, q), Subjects: []string{wire.DataSubject(topic, epoch, q)}, Storage: jetstream.MemoryStorage, AllowBatchPublish: true, Duplicates: time.Minute}
}

// epochOne creates topic's streams of epoch 1 with n partitions and returns the test's
// descriptor of it (for newKeyless) and the epoch.
func epochOne(t *testing.T, ctx context.Context, js jetstream.JetStream, topic string, n int) (*atomic.Pointer[wire.Topic], wire.Epoch) {
	for q := 0; q < n; q++ {
		if _, err := js.CreateStream(ctx, partStream(topic, q, 1)); err != nil {
			t.Fatal(err)
		}
	}
	e := wire.Epoch{Epoch: 1, Partitions: n}
	desc := &atomic.Pointer[wire.Topic]{}
	desc.Store(&wire.Topic{Name: topic, ID: "id1", Epochs: []wire.Epoch{e}})
	return desc, e
}

// keyless is a producer of keyless records (no partitioner runs) over a real nats-server, whose
// descriptor is the test's (desc), and what became of its records.
type keyless struct {
	p             *Producer
	acked, failed atomic.Int64
	ctx           context.Context
	t             *testing.T
}

func newKeyless(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream, topic string, desc *atomic.Pointer[wire.Topic], ackTimeout time.Duration, logf func(string, ...any)) *keyless {
	conn := &Conn{NC: nc, JS: js, Timeout: 5 * time.Second, AckTimeout: ackTimeout,
		Topic: func(context.Context, string) (*wire.Topic, error) {
			d := *desc.Load()
			return &d, nil
		},
		Partitioner: func(context.Context, wire.Partitioner) (partitioner.Partitioner, error) { return nil, nil }}
	p, err := New(ctx, conn, topic, Options{Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return &keyless{p: p, ctx: ctx, t: t}
}

// send sends n keyless records.
func (k *keyless) send(n int) {
	for i := 0; i < n; i++ {
		if err := k.p.Send(k.ctx, Record{NoKey: true, Value: []byte(fmt.Sprint("v", i))}, func(r Result) {
			if r.Err != nil {
				k.failed.Add(1)
			} else {
				k.acked.Add(1)
			}
		}); err != nil {
			k.t.Fatal(err)
		}
	}
}

// flushAll flushes and wants every one of total records acknowledged.
func (k *keyless) flushAll(total int64) {
	if err := k.p.Flush(k.ctx); err != nil {
		k.t.Fatal(err)
	}
	if k.acked.Load() != total || k.failed.Load() != 0 {
		k.t.Fatalf("%d acknowledged, %d failed; want all %d acknowledged", k.acked.Load(), k.failed.Load(), total)
	}
}

// inSendOrder reads every message of the stream and wants the producer's records in send order
// (Pctl-Seq ascending); it counts each record's copies in seen.
func inSendOrder(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, seen map[uint64]int, why string) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("%s, stream sequence %d: %v", stream, seq, err)
		}
		n, err := strconv.ParseUint(m.Header.Get(wire.HeaderSeq), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seen[n]++
		if n <= last {
			t.Fatalf("%s stores record %d after record %d (stream sequence %d): %s", stream, n, last, seq, why)
		}
		last = n
	}
}

// onceEach wants records 1..total stored once each.
func onceEach(t *testing.T, seen map[uint64]int, total uint64) {
	for n := uint64(1); n <= total; n++ {
		if seen[n] != 1 {
			t.Fatalf("record %d is stored %d times; want once", n, seen[n])
		}
	}
}
