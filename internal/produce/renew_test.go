package produce

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
)

// TestRenewedHoleCountsFromZero: the 10158 count is per message id (spec/protocol.md §5.1.5), and
// a hole re-sent under a new token (Producer.renew, after a read-back did not find it) "is re-sent
// at once under its new token, stuck old id or not". So a record whose old id got 4 answers and
// was then renewed is sent again, not failed, when it is settled; its new id counts from zero and
// is stuck only after 4 answers of its own, and the error then names that id and its 4 answers.
// The events run through the sink's own paths: refused (a 10158 refusal of the record in a fast
// batch), renew, and finishStored (settling, the record not found stored). Expected outcomes are
// written out by hand from §5.1.5's bullets.
func TestRenewedHoleCountsFromZero(t *testing.T) {
	const inProc = ErrCodeMsgIDInProcess
	const renew = -1 // event: the record is renewed (a hole)
	cases := []struct {
		name   string
		events []int
		// resent: settling sends the record again; otherwise it fails as stuck, its error
		// naming the id it had after the last event (oldID: the first one) and 4 answers.
		resent bool
		oldID  bool
	}{
		{"old id stuck, not renewed: fails", []int{inProc, inProc, inProc, inProc}, false, true},
		{"old id stuck, renewed: re-sent at once", []int{inProc, inProc, inProc, inProc, renew}, true, false},
		{"old id stuck, renewed, new id three answers: re-sent", []int{inProc, inProc, inProc, inProc, renew, inProc, inProc, inProc}, true, false},
		{"three old, renewed, one new: re-sent", []int{inProc, inProc, inProc, renew, inProc}, true, false},
		{"old id stuck, renewed, new id stuck: fails naming the new id", []int{inProc, inProc, inProc, inProc, renew, inProc, inProc, inProc, inProc}, false, false},
		{"renewed twice, last id stuck: fails naming it", []int{inProc, renew, inProc, inProc, renew, inProc, inProc, inProc, inProc}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var res []Result
			p := &Producer{id: "p1", opts: Options{Logf: t.Logf}}
			p.cond = sync.NewCond(&p.mu)
			p.buffered = 1
			h := nats.Header{}
			SetIdentity(h, []byte("k"), false, p.id, 7, NewToken())
			first := h.Get(wire.HeaderMsgID)
			pd := &pending{seq: 7, hdr: h, done: func(r Result) { res = append(res, r) }}
			s := &sink{p: p, epoch: 1, partition: 2, b: &batch{id: "b1", recs: []*pending{pd}}}
			ids := map[string]bool{first: true}
			for _, ev := range tc.events {
				if ev == renew {
					p.renew(pd)
					id := pd.hdr.Get(wire.HeaderMsgID)
					if ids[id] || !strings.HasPrefix(id, "p1-7-") {
						t.Fatalf("renew gave id %q (had %v): want a new p1-7-<token>", id, ids)
					}
					ids[id] = true
					continue
				}
				s.refused(fbReply{batch: "b1", seq: 1, kind: replyRefusal, errCode: ev})
			}
			last := pd.hdr.Get(wire.HeaderMsgID)
			rest := s.finishStored(map[int]uint64{})
			if tc.resent {
				if len(rest) != 1 || len(res) != 0 {
					t.Fatalf("settled: %d to re-send, results %v; want the record re-sent (count %d for id %s)", len(rest), res, pd.inProcess.Count(), last)
				}
				return
			}
			if len(rest) != 0 || len(res) != 1 {
				t.Fatalf("settled: %d to re-send, %d results; want the record failed", len(rest), len(res))
			}
			err := res[0].Err
			if !errors.Is(err, ErrMsgIDInProcess) || !errors.Is(err, wire.ErrUnavailable) {
				t.Fatalf("error %v: want ErrMsgIDInProcess and wire.ErrUnavailable", err)
			}
			want := last
			if tc.oldID {
				want = first
			}
			for _, w := range []string{"(id " + want + ")", "refused 4 times", "partition 2"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
