package proto

import (
	"fmt"
	"sort"
)

// Sticky ambiguity (spec/protocol.md §5.1.2): where a producer's records go, and when, while the
// fate of some of them is unknown. Sticky is the decision as an I/O-free state machine: the
// producer's events (a record produced, records acknowledged, an anomaly on a sink, a sink's
// settling decided, a newer epoch, close) go in, and the actions come out: records to transmit
// to an (epoch, partition), records acknowledged, records failed. It keeps only what the rule
// needs: every unacknowledged record's key, sink and whether it is in flight or ambiguous.
//
// The rule, as §5.1.2 states it:
//   - an anomaly makes every record a sink has in flight ambiguous; while any is, the sink sends
//     nothing more (no later record of any key is stored in that partition ahead of it), and the
//     other partitions' sinks of the same epoch go on;
//   - nothing a sink holds moves to another partition or epoch before the sink has settled: after
//     a newer epoch the producer collects every old sink's records only once every one of them
//     has settled, and re-sends them, with the records produced meanwhile, in their original send
//     order, each to its key's partition in the new epoch;
//   - a record settled as stored is acknowledged where it is; one settled as not stored is
//     re-sent (in its own sink when its epoch is still current), ahead of every later record;
//   - nothing ends an ambiguity but settling: a further anomaly (a timeout) moves nothing, and
//     close fails every unacknowledged record as unavailable.

// SinkID names a producer's sink: one partition of one epoch.
type SinkID struct {
	Epoch     int `json:"epoch"`
	Partition int `json:"partition"`
}

// Placed is a record to transmit now: its Pctl-Seq, to this sink.
type Placed struct {
	Seq       uint64 `json:"seq"`
	Epoch     int    `json:"epoch"`
	Partition int    `json:"partition"`
}

// StickyActions is what the producer does after an event: transmit Send in this order, report
// Acked as acknowledged and Failed as failed (unavailable: closed before acknowledged).
type StickyActions struct {
	Send   []Placed `json:"send"`
	Acked  []uint64 `json:"acked"`
	Failed []uint64 `json:"failed"`
}

// KeyPartition gives a key's partition in an epoch: f_e(k, N_e).
type KeyPartition func(epoch int, key string) (int, error)

type stickyRec struct {
	seq       uint64
	key       string
	sink      *stickySink // nil while held
	sent      bool        // transmitted, fate not yet known
	ambiguous bool        // an anomaly left its fate unknown; only settling ends it
	gone      bool        // acknowledged or failed: no longer the machine's
}

type stickySink struct {
	id   SinkID
	recs []*stickyRec // unacknowledged, in send order (entries gone are skipped)
	live int          // entries of recs not gone
	amb  int          // entries of recs ambiguous
}

// remove takes r (one of k's records) out of the machine.
func (s *Sticky) remove(k *stickySink, r *stickyRec) {
	if r.ambiguous {
		k.amb--
	}
	r.gone, r.ambiguous, r.sent = true, false, false
	delete(s.bySeq, r.seq)
	k.live--
	i := 0
	for i < len(k.recs) && k.recs[i].gone {
		i++
	}
	k.recs = k.recs[i:]
	if len(k.recs) > 2*k.live+64 {
		k.recs = k.records()
	}
}

// records returns k's records not gone, in order.
func (k *stickySink) records() []*stickyRec {
	out := make([]*stickyRec, 0, k.live)
	for _, r := range k.recs {
		if !r.gone {
			out = append(out, r)
		}
	}
	return out
}

func (k *stickySink) ambiguous() bool { return k.amb > 0 }

// mark makes every record k has in flight ambiguous.
func (k *stickySink) mark() {
	for _, r := range k.recs {
		if r.sent && !r.gone && !r.ambiguous {
			r.ambiguous = true
			k.amb++
		}
	}
}

// Sticky is the state machine; NewSticky makes one. It is not safe for concurrent use.
type Sticky struct {
	epoch  int // the epoch new records go to
	next   int // a newer epoch the descriptor shows, waiting for the old sinks (0: none)
	f      KeyPartition
	sinks  []*stickySink // in creation order
	byID   map[SinkID]*stickySink
	bySeq  map[uint64]*stickyRec // every record the machine holds
	held   []*stickyRec          // produced while the producer moves to epoch next
	closed bool
}

// NewSticky starts a producer at epoch (the descriptor's current one) with no records.
func NewSticky(epoch int, f KeyPartition) *Sticky {
	return &Sticky{epoch: epoch, f: f, byID: map[SinkID]*stickySink{}, bySeq: map[uint64]*stickyRec{}}
}

func (s *Sticky) sink(id SinkID) *stickySink { return s.byID[id] }

// place puts r into its key's sink of the current epoch and transmits it unless the sink is
// ambiguous.
func (s *Sticky) place(r *stickyRec, a *StickyActions) error {
	q, err := s.f(s.epoch, r.key)
	if err != nil {
		return err
	}
	id := SinkID{s.epoch, q}
	k := s.sink(id)
	if k == nil {
		k = &stickySink{id: id}
		s.sinks = append(s.sinks, k)
		s.byID[id] = k
	}
	k.recs = append(k.recs, r)
	k.live++
	r.sink = k
	s.bySeq[r.seq] = r
	if !k.ambiguous() {
		r.sent = true
		a.Send = append(a.Send, Placed{r.seq, id.Epoch, id.Partition})
	}
	return nil
}

// Produce: the application sent record seq with key. It goes to its key's partition at once,
// unless that sink is ambiguous (it waits there) or the producer is moving to a newer epoch (it
// waits for the re-send).
func (s *Sticky) Produce(seq uint64, key string) (StickyActions, error) {
	var a StickyActions
	r := &stickyRec{seq: seq, key: key}
	switch {
	case s.closed:
		a.Failed = []uint64{seq}
	case s.next != 0:
		s.held = append(s.held, r)
		s.bySeq[seq] = r
	default:
		if err := s.place(r, &a); err != nil {
			return a, err
		}
	}
	return a, nil
}

// Acked: a clean acknowledgement (a flow ack or a clean PubAck) covers these records in flight.
// An ambiguous record is not acknowledged this way: only settling decides it.
func (s *Sticky) Acked(seqs []uint64) StickyActions {
	var a StickyActions
	for _, seq := range seqs {
		if s.ackOne(seq) {
			a.Acked = append(a.Acked, seq)
		}
	}
	return a
}

// ackOne is Acked for one record, without building actions: whether it was in flight (not
// ambiguous) and is acknowledged now.
func (s *Sticky) ackOne(seq uint64) bool {
	if r := s.bySeq[seq]; r != nil && r.sink != nil && r.sent && !r.ambiguous {
		s.remove(r.sink, r)
		return true
	}
	return false
}

// Anomaly: the sink's open batch had an anomaly (no reply in time, the connection lost, a PubAck
// not clean or failing its verification): every record it has in flight is ambiguous. Nothing
// moves; a sink already ambiguous stays so (a timeout never ends an ambiguity).
func (s *Sticky) Anomaly(id SinkID) StickyActions {
	if k := s.sink(id); k != nil {
		k.mark()
	}
	return StickyActions{}
}

// Settled: settling the sink's batch decided its ambiguous records: those in stored are stored,
// the others are not. The stored ones are acknowledged; the rest stay in the sink ahead of its
// later records and are re-sent there when its epoch is current, or moved with them once every
// old sink has settled.
func (s *Sticky) Settled(id SinkID, stored []uint64) (StickyActions, error) {
	return s.SettledFailing(id, stored, nil)
}

// SettledFailing is Settled where settling also failed some of the sink's ambiguous records for
// good (spec/protocol.md §5.1.2: a refusal 10054 or another permanent error fails that one
// record, "the records after it are re-sent"; §5.1.5: an id stuck in process that settling did
// not find stored): those are reported Failed and never sent again. A record both stored and
// failed counts as stored.
func (s *Sticky) SettledFailing(id SinkID, stored, failed []uint64) (StickyActions, error) {
	var a StickyActions
	k := s.sink(id)
	if k == nil || !k.ambiguous() {
		return a, fmt.Errorf("sink (epoch %d, partition %d) has no ambiguous record to settle", id.Epoch, id.Partition)
	}
	in := map[uint64]bool{}
	for _, q := range stored {
		in[q] = true
	}
	out := map[uint64]bool{}
	for _, q := range failed {
		out[q] = true
	}
	for _, r := range k.records() {
		switch {
		case r.ambiguous && in[r.seq]:
			a.Acked = append(a.Acked, r.seq)
			s.remove(k, r)
		case r.ambiguous && out[r.seq]:
			a.Failed = append(a.Failed, r.seq)
			s.remove(k, r)
		case r.ambiguous:
			r.ambiguous, r.sent = false, false
			k.amb--
		}
	}
	if s.next != 0 {
		return a, s.regather(&a)
	}
	for _, r := range k.records() {
		if !r.sent {
			r.sent = true
			a.Send = append(a.Send, Placed{r.seq, id.Epoch, id.Partition})
		}
	}
	return a, nil
}

// Drop: the producer failed these records for good before they were transmitted (a record its
// connection refuses to publish, a partitioner that fails on a re-sent record's key), wherever
// they wait. Each one the machine holds is reported Failed. Not for records in flight: settling
// decides those (SettledFailing).
func (s *Sticky) Drop(seqs []uint64) StickyActions {
	var a StickyActions
	for _, seq := range seqs {
		r := s.bySeq[seq]
		if r == nil || r.ambiguous {
			continue
		}
		if r.sink != nil {
			s.remove(r.sink, r)
		} else {
			delete(s.bySeq, seq)
			for i, h := range s.held {
				if h == r {
					s.held = append(s.held[:i], s.held[i+1:]...)
					break
				}
			}
		}
		a.Failed = append(a.Failed, seq)
	}
	return a
}

// NewEpoch: the descriptor shows epoch current, newer than the producer's. Every old sink's
// records in flight become ambiguous (the fence may have come in the middle of their batch);
// once every old sink has settled, all their unacknowledged records and those produced since
// are re-sent in send order to their keys' partitions of the new epoch.
func (s *Sticky) NewEpoch(current int) (StickyActions, error) {
	var a StickyActions
	if current <= s.epoch || current <= s.next {
		return a, nil
	}
	s.next = current
	for _, k := range s.sinks {
		k.mark()
	}
	return a, s.regather(&a)
}

// regather moves to epoch next when no old sink is ambiguous any more.
func (s *Sticky) regather(a *StickyActions) error {
	var left []*stickyRec
	for _, k := range s.sinks {
		if k.ambiguous() {
			return nil
		}
		left = append(left, k.records()...)
	}
	left = append(left, s.held...)
	seqs := make([]uint64, len(left))
	for i, r := range left {
		seqs[i] = r.seq
	}
	s.sinks, s.held, s.epoch, s.next = nil, nil, s.next, 0
	s.byID, s.bySeq = map[SinkID]*stickySink{}, map[uint64]*stickyRec{}
	for _, i := range ResendOrder(seqs) {
		r := left[i]
		r.sent, r.ambiguous, r.sink = false, false, nil
		if err := s.place(r, a); err != nil {
			return err
		}
	}
	return nil
}

// Close: the producer is closed. Every unacknowledged record fails (unavailable: closed before
// it was acknowledged), in send order; an ambiguous one is never re-sent elsewhere.
func (s *Sticky) Close() StickyActions {
	var a StickyActions
	for seq := range s.bySeq {
		a.Failed = append(a.Failed, seq)
	}
	sort.Slice(a.Failed, func(i, j int) bool { return a.Failed[i] < a.Failed[j] })
	s.sinks, s.held, s.closed = nil, nil, true
	s.byID, s.bySeq = map[SinkID]*stickySink{}, map[uint64]*stickyRec{}
	return a
}
