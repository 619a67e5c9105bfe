package protovec

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/proto"
)

// Core is the implementation a replay checks: internal/proto's functions by default (GoCore); a
// test replaces one with a wrong rule to show that the vectors catch it.
type Core struct {
	GateRecord     func(t *wire.Topic, drained, x, p int, f proto.PartitionOf, pos proto.Positions) (proto.Gate, error)
	DrainedThrough func(t *wire.Topic, from int, pos proto.Positions) int
	Assignable     func(t *wire.Topic, pos proto.Positions) []int
	PastBoundary   func(t *wire.Topic, q int, b uint64, pos proto.Positions, leased bool) bool
	LeaseLive      func(owner string, leaseEnd, now int64, skew time.Duration) bool
	MaxClockSkew   func(session time.Duration) time.Duration
	MayAcquire     func(me, owner string, leaseEnd, now int64, skew time.Duration) bool
	MayDeliver     func(leaseUntil, now int64, session time.Duration) bool
	FenceMarker    func(t *wire.Topic, q int, seq uint64, fence int, done func(int) bool) proto.Marker
	Revokes        func(t *wire.Topic, q int, pos uint64, done func(int) bool) []int
	Passed         func(t *wire.Topic, q int, start uint64) []int
	ResendOrder    func(seqs []uint64) []int
	SearchFloor    func(sinkFloor uint64, firstSent []uint64) uint64
	SearchTop      func(fenced bool, boundary uint64) (uint64, bool)
	Batches        func(keys []string, keyless []bool, perKey bool, size int) [][]int
	// NewSticky starts the producer's sticky-ambiguity state machine (proto.NewSticky).
	NewSticky func(epoch int, f proto.KeyPartition) StickyCore
}

// StickyCore is the producer's sticky-ambiguity state machine (spec/protocol.md §5.1.2), as
// proto.Sticky implements it: one method per event, each returning the actions.
type StickyCore interface {
	Produce(seq uint64, key string) (proto.StickyActions, error)
	Acked(seqs []uint64) proto.StickyActions
	Anomaly(id proto.SinkID) proto.StickyActions
	SettledFailing(id proto.SinkID, stored, failed []uint64) (proto.StickyActions, error)
	Drop(seqs []uint64) proto.StickyActions
	NewEpoch(current int) (proto.StickyActions, error)
	Close() proto.StickyActions
}

// GoCore is internal/proto.
func GoCore() Core {
	return Core{
		GateRecord: proto.GateRecord, DrainedThrough: proto.DrainedThrough, Assignable: proto.Assignable,
		PastBoundary: proto.PastBoundary, LeaseLive: proto.LeaseLive, MaxClockSkew: proto.MaxClockSkew,
		MayAcquire: proto.MayAcquire, MayDeliver: proto.MayDeliver, FenceMarker: proto.FenceMarker,
		Revokes: proto.Revokes, Passed: proto.Passed,
		ResendOrder: proto.ResendOrder, SearchFloor: proto.SearchFloor, SearchTop: proto.SearchTop, Batches: proto.Batches,
		NewSticky: func(epoch int, f proto.KeyPartition) StickyCore { return proto.NewSticky(epoch, f) },
	}
}

// Mismatch is a step whose decision differs from the vector's.
type Mismatch struct {
	Rule, Trace string
	Step        int
	Event       string
	Got, Want   string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s / %s step %d %s: got %s, want %s", m.Rule, m.Trace, m.Step, m.Event, m.Got, m.Want)
}

// Replay runs one JSONL file against c and returns every mismatch (an error for a malformed file).
func Replay(data []byte, c Core) ([]Mismatch, int, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var hdr File
	var out []Mismatch
	steps := 0
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if n == 1 {
			if err := json.Unmarshal(line, &hdr); err != nil || hdr.Format != Format {
				return nil, 0, fmt.Errorf("line 1: not a %s header: %s", Format, line)
			}
			continue
		}
		var raw struct {
			Trace
			Steps []struct {
				Event  Event           `json:"event"`
				Expect json.RawMessage `json:"expect"`
			} `json:"steps"`
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&raw); err != nil {
			return nil, 0, fmt.Errorf("%s line %d: %w", hdr.Rule, n, err)
		}
		r := newReplayer(raw.Trace, c)
		for i, st := range raw.Steps {
			got, err := r.step(st.Event)
			if err != nil {
				return nil, 0, fmt.Errorf("%s / %s step %d: %w", hdr.Rule, raw.Name, i, err)
			}
			if got == nil {
				continue
			}
			steps++
			gj, _ := json.Marshal(got)
			var g, w any
			_ = json.Unmarshal(gj, &g)
			if err := json.Unmarshal(st.Expect, &w); err != nil {
				return nil, 0, fmt.Errorf("%s / %s step %d: expect: %w", hdr.Rule, raw.Name, i, err)
			}
			if !reflect.DeepEqual(g, w) {
				ej, _ := json.Marshal(st.Event)
				out = append(out, Mismatch{Rule: hdr.Rule, Trace: raw.Name, Step: i, Event: string(ej), Got: string(gj), Want: string(st.Expect)})
			}
		}
	}
	return out, steps, sc.Err()
}

type replayer struct {
	c       Core
	tr      Trace
	topic   *wire.Topic
	pos     map[int]uint64
	leases  map[int]Lease
	now     int64
	revoked map[[2]int]bool
	sticky  StickyCore // started at the first sticky event
}

func newReplayer(tr Trace, c Core) *replayer {
	return &replayer{c: c, tr: tr, topic: toWire(tr.Topic), pos: map[int]uint64{}, leases: map[int]Lease{}, revoked: map[[2]int]bool{}}
}

func toWire(t Topic) *wire.Topic {
	w := &wire.Topic{}
	for _, e := range t.Epochs {
		w.Epochs = append(w.Epochs, wire.Epoch{Epoch: e.Epoch, Partitions: e.Partitions, Boundaries: e.Boundaries})
	}
	return w
}

func (r *replayer) positions(q int) uint64 { return r.pos[q] }

// f looks up f_epoch(key) in the trace's table.
func (r *replayer) f(ep *wire.Epoch, keyHex string) (int, error) {
	for _, v := range r.tr.F {
		if v.Epoch == ep.Epoch && v.KeyHex == keyHex {
			return v.Partition, nil
		}
	}
	return 0, fmt.Errorf("the trace gives no f for key %s in epoch %d", keyHex, ep.Epoch)
}

func (r *replayer) session() time.Duration { return time.Duration(r.tr.SessionMS) * time.Millisecond }

func (r *replayer) step(e Event) (any, error) {
	c := r.c
	switch {
	case e.Positions != nil:
		for _, k := range sortedKeys(e.Positions) {
			q, err := strconv.Atoi(k)
			if err != nil {
				return nil, fmt.Errorf("positions: partition %q is not a number", k)
			}
			r.pos[q] = e.Positions[k]
		}
	case e.Lease != nil:
		r.leases[e.Lease.Partition] = *e.Lease
	case e.Now != nil:
		r.now = *e.Now
	case e.Descriptor != nil:
		r.topic = toWire(*e.Descriptor)
	case e.Record != nil:
		m := e.Record
		f := func(ep *wire.Epoch) (int, error) { return r.f(ep, m.KeyHex) }
		d := c.DrainedThrough(r.topic, 0, r.positions)
		g, err := c.GateRecord(r.topic, d, m.Epoch, m.Partition, f, r.positions)
		if err != nil {
			return nil, err
		}
		out := GateOut{Refresh: g.Refresh, Waits: []Wait{}, Parent: g.Parent}
		for _, w := range g.Waits {
			out.Waits = append(out.Waits, Wait(w))
		}
		if g.Assigned != nil {
			a := Wait(*g.Assigned)
			out.Assigned = &a
		}
		return out, nil
	case e.DrainedThrough != nil:
		return DrainedOut{c.DrainedThrough(r.topic, 0, r.positions)}, nil
	case e.Assignable != nil:
		a := c.Assignable(r.topic, r.positions)
		if a == nil {
			a = []int{}
		}
		return AssignableOut{a}, nil
	case e.PastBoundary != nil:
		l := r.leases[e.PastBoundary.Partition]
		live := c.LeaseLive(l.Owner, l.LeaseEnd, r.now, c.MaxClockSkew(r.session()))
		return PastOut{c.PastBoundary(r.topic, e.PastBoundary.Partition, e.PastBoundary.Boundary, r.positions, live)}, nil
	case e.MaxSkew != nil:
		return SkewOut{c.MaxClockSkew(r.session()).Milliseconds()}, nil
	case e.Acquire != nil:
		return AcquireOut{c.MayAcquire(r.tr.Member, e.Acquire.Owner, e.Acquire.LeaseEnd, r.now, c.MaxClockSkew(r.session()))}, nil
	case e.Deliver != nil:
		return DeliverOut{c.MayDeliver(e.Deliver.LeaseUntil, r.now, r.session())}, nil
	case e.Marker != nil:
		m := e.Marker
		d := c.FenceMarker(r.topic, m.Partition, m.Seq, m.Fence, r.done(m.Partition))
		r.run(m.Partition, d.Revoke)
		out := MarkerOut{Refresh: d.Refresh, Revoke: d.Revoke, Position: d.Position, Commit: d.Commit}
		if out.Revoke == nil {
			out.Revoke = []int{}
		}
		return out, nil
	case e.At != nil:
		rv := c.Revokes(r.topic, e.At.Partition, e.At.Position, r.done(e.At.Partition))
		r.run(e.At.Partition, rv)
		if rv == nil {
			rv = []int{}
		}
		return AtOut{Revoke: rv, Commit: len(rv) > 0}, nil
	case e.Acquired != nil:
		p := c.Passed(r.topic, e.Acquired.Partition, e.Acquired.Position)
		r.run(e.Acquired.Partition, p)
		if p == nil {
			p = []int{}
		}
		return AcquiredOut{p}, nil
	case e.FenceResend != nil:
		recs := e.FenceResend.Records
		seqs := make([]uint64, len(recs))
		for i, x := range recs {
			seqs[i] = x.Seq
		}
		out := ResendOut{Order: []uint64{}, Partitions: []PartitionSeqs{}}
		per := map[int][]uint64{}
		cur := r.topic.Current()
		for _, i := range c.ResendOrder(seqs) {
			out.Order = append(out.Order, recs[i].Seq)
			if recs[i].Keyless {
				continue
			}
			q, err := r.f(cur, recs[i].KeyHex)
			if err != nil {
				return nil, err
			}
			per[q] = append(per[q], recs[i].Seq)
		}
		for q := 0; q < cur.Partitions; q++ {
			if len(per[q]) > 0 {
				out.Partitions = append(out.Partitions, PartitionSeqs{q, per[q]})
			}
		}
		return out, nil
	case e.Search != nil:
		top, readLast := c.SearchTop(e.Search.Fenced, e.Search.Boundary)
		return SearchOut{Low: c.SearchFloor(e.Search.SinkFloor, e.Search.FirstSent), Top: top, ReadLast: readLast}, nil
	case e.Batches != nil:
		keys := make([]string, len(e.Batches.Records))
		keyless := make([]bool, len(keys))
		for i, x := range e.Batches.Records {
			keys[i], keyless[i] = x.KeyHex, x.Keyless
		}
		b := c.Batches(keys, keyless, e.Batches.PerKey, e.Batches.Size)
		if b == nil {
			b = [][]int{}
		}
		return BatchesOut{b}, nil
	case e.Produce != nil || e.Acked != nil || e.Anomaly != nil || e.Settled != nil || e.Drop != nil || e.NewEpoch != nil || e.Close != nil:
		return r.stickyStep(e)
	default:
		return nil, fmt.Errorf("an event of no known kind")
	}
	return nil, nil
}

// stickyStep applies one event to the trace's sticky machine and returns its actions.
func (r *replayer) stickyStep(e Event) (any, error) {
	if r.sticky == nil {
		r.sticky = r.c.NewSticky(r.topic.Current().Epoch, func(epoch int, key string) (int, error) {
			return r.f(&wire.Epoch{Epoch: epoch}, key)
		})
	}
	m := r.sticky
	var a proto.StickyActions
	var err error
	switch {
	case e.Produce != nil:
		if e.Produce.Keyless {
			return nil, fmt.Errorf("produce: the sticky traces have keyed records only")
		}
		a, err = m.Produce(e.Produce.Seq, e.Produce.KeyHex)
	case e.Acked != nil:
		a = m.Acked(e.Acked.Seqs)
	case e.Anomaly != nil:
		a = m.Anomaly(proto.SinkID{Epoch: e.Anomaly.Epoch, Partition: e.Anomaly.Partition})
	case e.Settled != nil:
		a, err = m.SettledFailing(proto.SinkID{Epoch: e.Settled.Epoch, Partition: e.Settled.Partition}, e.Settled.Stored, e.Settled.Failed)
	case e.Drop != nil:
		a = m.Drop(e.Drop.Seqs)
	case e.NewEpoch != nil:
		a, err = m.NewEpoch(e.NewEpoch.Epoch)
	default:
		a = m.Close()
	}
	if err != nil {
		// A core that refuses an event the trace makes valid decides wrongly: a mismatch.
		return map[string]string{"error": err.Error()}, nil
	}
	return normalSticky(a), nil
}

func (r *replayer) done(q int) func(int) bool {
	return func(e int) bool { return r.revoked[[2]int{q, e}] }
}

func (r *replayer) run(q int, epochs []int) {
	for _, e := range epochs {
		r.revoked[[2]int{q, e}] = true
	}
}
