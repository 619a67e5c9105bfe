package produce

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// TestProducerRunsTheStickyCheck: in tests a real producer runs the sticky-ambiguity machine
// beside its decisions (spec/protocol.md §5.1.2, proto.StickyCheck), fed by every record it
// produces, transmits and has acknowledged, and by an epoch change with records in flight (the
// fence, the hand-backs, the re-send). A decision of the producer that is not the machine's
// panics with the events that led to it; this test fails if the check is not wired in at all.
// Keyless records, so that no partitioner runs: the streams are real, the descriptor is the
// test's (no broker in this package).
func TestProducerRunsTheStickyCheck(t *testing.T) {
	nc, js := testServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "sc"
	stream := func(q, epoch int) jetstream.StreamConfig { return partStream(topic, q, epoch) }
	desc, epoch1 := epochOne(t, ctx, js, topic, 2)
	k := newKeyless(t, ctx, nc, js, topic, desc, 2*time.Second, t.Logf)
	p, send := k.p, k.send
	if p.check == nil {
		t.Fatal("no sticky machine in the producer (it decides, and checks the rest)")
	}
	send(300)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	send(300) // in flight at the fence
	// Epoch 2, three partitions: the old subjects go (the fence), the new ones come.
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
	desc.Store(&wire.Topic{Name: topic, ID: "id1", Epochs: []wire.Epoch{e1, {Epoch: 2, Partitions: 3}}})
	if err := nc.Publish(wire.TopicEventSubject(topic), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	send(300)
	k.flushAll(900)
	if p.Epoch() != 2 {
		t.Fatalf("the producer is at epoch %d; want 2", p.Epoch())
	}
	// Every record is produced and transmitted (2 events); its acknowledgement is one event more
	// when a PubAck brings it, but a batch settled as stored acknowledges its records in one
	// event (a clean-clone CI run: 2,557 events, 150 records settled at once).
	if n := p.check.Events(); n < 2*900 {
		t.Fatalf("the sticky check took %d events for 900 records; want at least 2 a record (produced, transmitted)", n)
	}
	t.Logf("sticky check: %d events; %d records re-sent under epoch 2, %d batches settled", p.check.Events(), p.Resent(), p.Settled())
}
