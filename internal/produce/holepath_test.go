package produce

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// TestReadBackReachesTheLeadersEnd: a batch read back after a leader change (confirm) gives
// every record it does not find a new deduplication id, so a stored record the read misses is
// stored a second time (spec/protocol.md §5.1.2, "the read-back's end"). The read's end must not
// be the stream info's last sequence: while a stream has no leader, nats-server answers
// STREAM.INFO from every member with its own state, and a member that lags names a last sequence
// below records already stored. Here the read is given such a last sequence (the stream's true
// state, minus what a lagging member has not applied yet) against a real server, whose
// STREAM.MSG.GET answers stand for the leader's: the record stored above it must be found. The
// same when the stream's last message is gone (the leader names no last message: the read goes
// on message by message), and a record that is not stored must not be found. (Memory storage:
// the same cases pass on file storage, which once refused to create a stream here under load.)
func TestReadBackReachesTheLeadersEnd(t *testing.T) {
	nc, js := testServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &Producer{conn: &Conn{NC: nc, JS: js, AckTimeout: 5 * time.Second}, id: "p1", opts: Options{Logf: t.Logf}}
	record := func(n uint64) *pending {
		key := []byte(fmt.Sprint("k", n))
		h := nats.Header{}
		h.Set(wire.HeaderProducer, p.id)
		h.Set(wire.HeaderSeq, fmt.Sprint(n))
		h.Set(wire.HeaderMsgID, fmt.Sprintf("%s-%d-%s", p.id, n, NewToken()))
		h.Set(wire.HeaderKey, wire.EncodeKey(key))
		return &pending{seq: n, rec: Record{Key: key, Value: []byte(fmt.Sprint("value ", n))}, hdr: h}
	}
	for n, tc := range []struct {
		name string
		// before: other producers' messages stored before the record; stored: whether the
		// record is stored (after them); after: messages stored after it, deleted when gone.
		before, after int
		stored, gone  bool
		// infoLast is the last sequence the stream info named: a lagging member's.
		infoLast uint64
	}{
		{name: "info-lags-behind-the-record", before: 3, stored: true, infoLast: 3},
		{name: "info-lags-last-message-gone", before: 3, stored: true, after: 2, gone: true, infoLast: 3},
		{name: "empty-stream-info-lags", before: 0, stored: true, infoLast: 0},
		{name: "not-stored", before: 3, after: 1, gone: true, infoLast: 3},
		{name: "info-current", before: 3, stored: true, after: 1, infoLast: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := fmt.Sprint("S", n)
			subj := "d." + stream
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subj}, Storage: jetstream.MemoryStorage, AllowBatchPublish: true, Duplicates: time.Minute}); err != nil {
				t.Fatal(err)
			}
			defer js.DeleteStream(ctx, stream)
			other := func(i int) {
				if _, err := js.Publish(ctx, subj, []byte(fmt.Sprint("other ", i))); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < tc.before; i++ {
				other(i)
			}
			floor := uint64(tc.before)
			pd := record(7)
			pd.floors = map[string]uint64{stream: floor}
			var at uint64
			if tc.stored {
				ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: pd.hdr, Data: pd.rec.Value})
				if err != nil {
					t.Fatal(err)
				}
				at = ack.Sequence
			}
			var afters []uint64
			for i := 0; i < tc.after; i++ {
				ack, err := js.Publish(ctx, subj, []byte(fmt.Sprint("after ", i)))
				if err != nil {
					t.Fatal(err)
				}
				afters = append(afters, ack.Sequence)
			}
			if tc.gone {
				st, err := js.Stream(ctx, stream)
				if err != nil {
					t.Fatal(err)
				}
				for _, seq := range afters {
					if err := st.DeleteMsg(ctx, seq); err != nil {
						t.Fatal(err)
					}
				}
			}
			s := &sink{p: p, stream: stream, floor: floor, floorKnown: true, verify: true, b: &batch{id: "b1", recs: []*pending{pd}}}
			found, err := s.readBack(ctx, tc.infoLast)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := found[0]
			switch {
			case tc.stored && !ok:
				t.Fatalf("the record stored at %d was not found by a read whose stream info named last sequence %d: confirm would give it a new id and it would be stored twice", at, tc.infoLast)
			case tc.stored && got != at:
				t.Fatalf("the record stored at %d was found at %d", at, got)
			case !tc.stored && ok:
				t.Fatalf("a record that is not stored was found at %d", got)
			}
		})
	}
}
