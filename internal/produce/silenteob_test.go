package produce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// TestSettleReadsBackWhenTheEOBIsNeverAnswered: settling a batch that got no reply, the sink
// closes it with an EOB; nats-server 2.15.2 may never answer that EOB. A fast batch whose commit
// waits for proposals a stream's replica or placement change dropped stays "committing" on the
// server for good (its cleanup timer is stopped at commit), and every later message of it is
// skipped without a reply, while the stream takes new batches (seen in TestClusterReplicas under
// load: R3 -> R1 on n1, one partition's producer closed the batch every 5 s for 30 s and then
// failed its records). The sink must then read the partition back (spec/protocol.md §5.1.2,
// settle 1) rather than close the batch forever. Here the stream is a real one holding the
// batch's first 2 of 3 records, and the batch's EOB subject has a real subscriber that never
// answers, standing for the server's committing batch: settle must finish, find the 2 records
// and re-send the third.
func TestSettleReadsBackWhenTheEOBIsNeverAnswered(t *testing.T) {
	nc, js := testServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const stream, subj, eob = "SILENT", "d.silent", "e.silent"
	batchStream(t, ctx, js, stream, subj)
	eobs := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(eob, eobs) // takes every EOB, answers none
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if _, err := js.Publish(ctx, subj, []byte("someone else's")); err != nil {
		t.Fatal(err)
	}
	p := handBuiltProducer(t, nc, js)
	var recs []*pending
	for n := uint64(1); n <= 3; n++ {
		h := nats.Header{}
		h.Set(wire.HeaderProducer, p.id)
		h.Set(wire.HeaderSeq, fmt.Sprint(n))
		h.Set(wire.HeaderMsgID, fmt.Sprintf("%s-%d-%s", p.id, n, NewToken()))
		recs = append(recs, &pending{seq: n, rec: Record{NoKey: true, Value: []byte(fmt.Sprint("value ", n))}, hdr: h, floors: map[string]uint64{stream: 1}, sends: 1,
			done: func(Result) {}})
	}
	for _, pd := range recs[:2] { // the server stored the batch's first two records
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: pd.hdr, Data: pd.rec.Value}); err != nil {
			t.Fatal(err)
		}
	}
	p.buffered = len(recs)
	s := &sink{p: p, stream: stream, subject: eob, floor: 1, floorKnown: true, wake: make(chan struct{}, 1), replies: make(chan fbReply, 16), done: make(chan struct{}),
		b: &batch{id: "b1", recs: recs, commit: 4, anomaly: "no reply within 300ms", progress: time.Now()}}
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	start := time.Now()
	fenced, err := s.settle(sctx, nil)
	if err != nil {
		t.Fatalf("settle did not finish within %v (%v) after %d unanswered EOBs: a batch the server never answers must be read back, not closed forever", time.Since(start).Round(time.Millisecond), err, len(eobs))
	}
	if fenced != nil {
		t.Fatalf("settle says the partition was fenced (%+v)", fenced)
	}
	if len(eobs) == 0 {
		t.Fatal("settle read back without closing the batch first")
	}
	if p.finished != 2 {
		t.Fatalf("%d records acknowledged; want the 2 stored", p.finished)
	}
	if q := s.takeQueue(); len(q) != 1 || q[0] != recs[2] {
		t.Fatalf("to re-send: %d records; want only the third", len(q))
	}
	t.Logf("settled after %d unanswered EOBs in %v", len(eobs), time.Since(start).Round(time.Millisecond))
}

// batchStream creates a memory stream that takes fast batches, with a deduplication window.
func batchStream(t *testing.T, ctx context.Context, js jetstream.JetStream, stream, subject string) {
	t.Helper()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage, AllowBatchPublish: true, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

// handBuiltProducer is a Producer with only what a hand-built sink uses: its id, log, condition
// and connection (a 300 ms ack timeout; no broker to ask for descriptors).
func handBuiltProducer(t *testing.T, nc *nats.Conn, js jetstream.JetStream) *Producer {
	noBroker := errors.New("no broker in this test")
	p := &Producer{id: "p1", opts: Options{Logf: t.Logf}, conn: &Conn{NC: nc, JS: js, AckTimeout: 300 * time.Millisecond,
		Topic: func(context.Context, string) (*wire.Topic, error) { return nil, noBroker }}}
	p.cond = sync.NewCond(&p.mu)
	return p
}
