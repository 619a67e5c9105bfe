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
	sent      bool // transmitted, fate not yet known
	ambiguous bool // an anomaly left its fate unknown; only settling ends it
}

type stickySink struct {
	id   SinkID
	recs []*stickyRec // unacknowledged, in send order
}

func (k *stickySink) ambiguous() bool {
	for _, r := range k.recs {
		if r.ambiguous {
			return true
		}
	}
	return false
}

// Sticky is the state machine; NewSticky makes one.
type Sticky struct {
	epoch  int // the epoch new records go to
	next   int // a newer epoch the descriptor shows, waiting for the old sinks (0: none)
	f      KeyPartition
	sinks  []*stickySink // in creation order
	held   []*stickyRec  // produced while the producer moves to epoch next
	closed bool
}

// NewSticky starts a producer at epoch (the descriptor's current one) with no records.
func NewSticky(epoch int, f KeyPartition) *Sticky { return &Sticky{epoch: epoch, f: f} }

func (s *Sticky) sink(id SinkID) *stickySink {
	for _, k := range s.sinks {
		if k.id == id {
			return k
		}
	}
	return nil
}

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
	}
	k.recs = append(k.recs, r)
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
		for _, k := range s.sinks {
			for i, r := range k.recs {
				if r.seq == seq && r.sent && !r.ambiguous {
					k.recs = append(k.recs[:i], k.recs[i+1:]...)
					a.Acked = append(a.Acked, seq)
					break
				}
			}
		}
	}
	return a
}

// Anomaly: the sink's open batch had an anomaly (no reply in time, the connection lost, a PubAck
// not clean or failing its verification): every record it has in flight is ambiguous. Nothing
// moves; a sink already ambiguous stays so (a timeout never ends an ambiguity).
func (s *Sticky) Anomaly(id SinkID) StickyActions {
	if k := s.sink(id); k != nil {
		for _, r := range k.recs {
			if r.sent {
				r.ambiguous = true
			}
		}
	}
	return StickyActions{}
}

// Settled: settling the sink's batch decided its ambiguous records: those in stored are stored,
// the others are not. The stored ones are acknowledged; the rest stay in the sink ahead of its
// later records and are re-sent there when its epoch is current, or moved with them once every
// old sink has settled.
func (s *Sticky) Settled(id SinkID, stored []uint64) (StickyActions, error) {
	var a StickyActions
	k := s.sink(id)
	if k == nil || !k.ambiguous() {
		return a, fmt.Errorf("sink (epoch %d, partition %d) has no ambiguous record to settle", id.Epoch, id.Partition)
	}
	in := map[uint64]bool{}
	for _, q := range stored {
		in[q] = true
	}
	rest := k.recs[:0]
	for _, r := range k.recs {
		if r.ambiguous && in[r.seq] {
			a.Acked = append(a.Acked, r.seq)
			continue
		}
		if r.ambiguous {
			r.ambiguous, r.sent = false, false
		}
		rest = append(rest, r)
	}
	k.recs = rest
	if s.next != 0 {
		return a, s.regather(&a)
	}
	for _, r := range k.recs {
		if !r.sent {
			r.sent = true
			a.Send = append(a.Send, Placed{r.seq, id.Epoch, id.Partition})
		}
	}
	return a, nil
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
		for _, r := range k.recs {
			if r.sent {
				r.ambiguous = true
			}
		}
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
		left = append(left, k.recs...)
	}
	left = append(left, s.held...)
	seqs := make([]uint64, len(left))
	for i, r := range left {
		seqs[i] = r.seq
	}
	s.sinks, s.held, s.epoch, s.next = nil, nil, s.next, 0
	for _, i := range ResendOrder(seqs) {
		r := left[i]
		r.sent, r.ambiguous = false, false
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
	for _, k := range s.sinks {
		for _, r := range k.recs {
			a.Failed = append(a.Failed, r.seq)
		}
	}
	for _, r := range s.held {
		a.Failed = append(a.Failed, r.seq)
	}
	sort.Slice(a.Failed, func(i, j int) bool { return a.Failed[i] < a.Failed[j] })
	s.sinks, s.held, s.closed = nil, nil, true
	return a
}
