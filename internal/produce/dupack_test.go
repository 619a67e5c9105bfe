package produce

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
)

// TestDuplicatePubAckAfterAFlowAckFinishesOnce: a record re-sent alone (its first send was
// stored, but its answer lost) is a one-record batch the server deduplicates. Its flow ack counts
// the duplicate as persisted, so the sink acknowledges the record then; the batch's PubAck that
// follows says "duplicate" (spec/protocol.md §5.1.1), which is an anomaly, and settling it must
// not acknowledge the record a second time. Seen in CI (TestHundredThousandRecords under load):
// the producer's sticky check stopped the run at "record 4806 acknowledged in (1,4), where it was
// not transmitted since the machine last sent it"; without the check the user's callback ran
// twice and the producer's buffered count went below zero. A real stream holds the record at the
// sequence the PubAck names.
func TestDuplicatePubAckAfterAFlowAckFinishesOnce(t *testing.T) {
	nc, js := testServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const stream, subj = "DUP", "d.dup"
	batchStream(t, ctx, js, stream, subj)
	p := handBuiltProducer(t, nc, js)
	h := nats.Header{}
	h.Set(wire.HeaderProducer, p.id)
	h.Set(wire.HeaderSeq, "1")
	h.Set(wire.HeaderMsgID, fmt.Sprintf("%s-1-%s", p.id, NewToken()))
	var calls []Result
	pd := &pending{seq: 1, rec: Record{NoKey: true, Value: []byte("value 1")}, hdr: h, floors: map[string]uint64{stream: 0}, sends: 2,
		done: func(r Result) { calls = append(calls, r) }}
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: pd.hdr, Data: pd.rec.Value}) // the first send, stored
	if err != nil {
		t.Fatal(err)
	}
	p.buffered = 1
	s := &sink{p: p, stream: stream, subject: subj, floorKnown: true, wake: make(chan struct{}, 1), replies: make(chan fbReply, 16), done: make(chan struct{}),
		b: &batch{id: "b2", recs: []*pending{pd}, progress: time.Now()}}
	s.ackUpTo(1) // the re-send's flow ack: the duplicate counts as persisted
	if len(calls) != 1 {
		t.Fatalf("the flow ack finished %d records; want 1", len(calls))
	}
	s.b.pubAck = &fbReply{kind: replyPubAck, stream: stream, streamSeq: ack.Sequence, ackBatch: "b2", count: 1, duplicate: true}
	s.b.anomaly = "PubAck of 1 records (batch \"b2\", duplicate true)"
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if _, err := s.settle(sctx, nil); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || p.finished != 1 || p.buffered != 0 {
		t.Fatalf("the record's callback ran %d times (%+v); finished %d, buffered %d: a duplicate PubAck after the flow ack acknowledged it again", len(calls), calls, p.finished, p.buffered)
	}
	if q := s.takeQueue(); len(q) != 0 {
		t.Fatalf("%d records to send again; want none", len(q))
	}
}
