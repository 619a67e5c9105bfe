package proto

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// StickyCheck runs the sticky-ambiguity machine (Sticky, spec/protocol.md §5.1.2) inside a
// producer (internal/produce) that takes its decisions from it and checks the rest against it.
// The producer feeds it every event the machine knows (a record produced, records acknowledged,
// an anomaly, a settling, a newer epoch, close) and every record it transmits.
//
// Decisions (the producer executes the machine's answer): Next, the record a sink transmits
// next (nothing while the sink is ambiguous); Settled, how a settling classifies the sink's
// ambiguous records from the facts it learnt; Resend, which records are re-sent under a newer
// epoch, in what order, placed by the producer's partitioner in that order.
//
// Checks (the producer decides; the check fails, once, with the last events): an acknowledgement
// of a record the machine does not have in flight there, a transmit of a record other than the
// machine's next (a race Next cannot see), a settling during a move whose classification is not
// the machine's, a re-send before every old sink settled. The producer places records itself
// (its partitioner, its round robin for keyless records): where it put a record is the
// machine's f. Two timings differ from the machine's and are mapped, not relaxed: an
// acknowledgement the producer takes while the machine holds the record ambiguous (a flow ack
// or PubAck that arrived while settling, or before the sink saw a fence) counts as settled
// stored, and is among the stored of that sink's next settling; and while the producer moves to
// a newer epoch, settlings are applied when it re-sends (Resend), once the new epoch's
// partitioner is loaded.
//
// StickyCheck is safe for concurrent use (its own lock; every call is computation); a nil
// *StickyCheck decides and checks nothing.
type StickyCheck struct {
	mu       sync.Mutex
	m        *Sticky
	parts    map[uint64]SinkID   // where the producer placed each record: the machine's f
	grants   map[SinkID][]uint64 // records the machine sends there, in order, not yet transmitted
	sentTo   map[uint64]SinkID   // transmitted, fate not yet known
	early    map[SinkID][]uint64 // acknowledged while the machine held them ambiguous
	moving   int                 // the producer moves to this newer epoch (0: none)
	deferred []stickySettling    // settlings reported while it moves
	held     []uint64            // records it took while it moves
	trace    []stickyEvent       // the last events, for the failure's message
	events   int                 // events taken so far
	fail     func(msg string)
	off      bool
	// During Resend: the machine's f places records of epoch placing with place (the producer's
	// partitioner, in the machine's order); lost collects those it could not place; plan the
	// machine's Send actions in order.
	place   func(seq uint64) (int, error)
	placing int
	lost    []uint64
	plan    []Placed
}

type stickySettling struct {
	id             SinkID
	stored, failed []uint64
	handBack       bool
}

type stickyEvent struct {
	op   string
	seq  uint64
	id   SinkID
	seqs []uint64
}

func (e stickyEvent) String() string {
	var b strings.Builder
	b.WriteString(e.op)
	if e.seq != 0 {
		fmt.Fprintf(&b, " %d", e.seq)
	}
	if e.id != (SinkID{}) {
		fmt.Fprintf(&b, " (%d,%d)", e.id.Epoch, e.id.Partition)
	}
	if e.seqs != nil {
		fmt.Fprintf(&b, " %v", e.seqs)
	}
	return b.String()
}

const stickyTraceLen = 400

// NewStickyCheck starts a check of a producer at epoch; fail is called (once) with what went
// wrong and the events that led there.
func NewStickyCheck(epoch int, fail func(msg string)) *StickyCheck {
	c := &StickyCheck{parts: map[uint64]SinkID{}, grants: map[SinkID][]uint64{}, sentTo: map[uint64]SinkID{},
		early: map[SinkID][]uint64{}, fail: fail}
	c.m = NewSticky(epoch, func(epoch int, key string) (int, error) {
		seq, _ := strconv.ParseUint(key, 10, 64)
		if c.place != nil && epoch == c.placing {
			q, err := c.place(seq)
			if err != nil {
				c.lost, q = append(c.lost, seq), 0 // the machine places it; Resend drops it
			}
			c.parts[seq] = SinkID{epoch, q}
			return q, nil
		}
		id, ok := c.parts[seq]
		if !ok || id.Epoch != epoch {
			return 0, fmt.Errorf("the machine places record %d in epoch %d; the producer did not place it there", seq, epoch)
		}
		return id.Partition, nil
	})
	return c
}

// enter takes c's lock and notes e; false (the lock not held) for a nil or stopped check.
func (c *StickyCheck) enter(e stickyEvent) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	if c.off {
		c.mu.Unlock()
		return false
	}
	c.note(e)
	return true
}

func (c *StickyCheck) note(e stickyEvent) {
	c.events++
	if len(c.trace) >= 2*stickyTraceLen {
		c.trace = append(c.trace[:0], c.trace[len(c.trace)-stickyTraceLen:]...)
	}
	c.trace = append(c.trace, e)
}

// violation reports what the producer did that the machine does not, and stops the check.
func (c *StickyCheck) violation(format string, args ...any) {
	if c.off {
		return
	}
	c.off = true
	tr := c.trace
	if len(tr) > stickyTraceLen {
		tr = tr[len(tr)-stickyTraceLen:]
	}
	lines := make([]string, len(tr))
	for i, e := range tr {
		lines[i] = e.String()
	}
	c.fail(fmt.Sprintf("sticky ambiguity (spec/protocol.md §5.1.2): the producer's decision is not the machine's: %s\nlast %d events (oldest first):\n  %s",
		fmt.Sprintf(format, args...), len(lines), strings.Join(lines, "\n  ")))
}

// apply takes the machine's actions: Send grants the producer a transmit (and, during Resend,
// is the re-send's plan).
func (c *StickyCheck) apply(a StickyActions) {
	if c.place != nil {
		c.plan = append(c.plan, a.Send...)
	}
	for _, p := range a.Send {
		id := SinkID{p.Epoch, p.Partition}
		c.grants[id] = append(c.grants[id], p.Seq)
	}
}

func key(seq uint64) string { return strconv.FormatUint(seq, 10) }

// Produce: the producer took record seq and queued it on partition q of epoch (q < 0: it holds
// the record while it moves to a newer epoch).
func (c *StickyCheck) Produce(seq uint64, epoch, q int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		return
	}
	id := SinkID{epoch, q}
	c.note(stickyEvent{op: "produce", seq: seq, id: id})
	switch {
	case q >= 0 && c.moving != 0:
		c.violation("record %d queued on (%d,%d) while the producer moves to epoch %d (new records wait for the re-send)", seq, epoch, q, c.moving)
		return
	case q >= 0:
		c.parts[seq] = id
	case c.moving == 0:
		c.violation("record %d held back with no newer epoch to move to (the machine is at epoch %d)", seq, c.m.epoch)
		return
	default:
		c.held = append(c.held, seq) // the machine takes it at Regather, after every older record
		return
	}
	a, err := c.m.Produce(seq, key(seq))
	if err != nil {
		c.violation("record %d: %v", seq, err)
		return
	}
	c.apply(a)
}

// valid reports whether the machine has record seq in sink id, sent and not ambiguous.
func (c *StickyCheck) valid(seq uint64, id SinkID) bool {
	r := c.m.bySeq[seq]
	return r != nil && r.sink != nil && r.sink.id == id && r.sent && !r.ambiguous
}

// Next (a decision, not a check): the record the machine sends to sink id next, 0 when it sends
// nothing there now (the sink is ambiguous, or everything granted there went out). A sink
// transmits that record and no other. on is false when the check is off (closed, or stopped at a
// violation): the machine decides nothing then, and the sink's own queue order stands.
func (c *StickyCheck) Next(id SinkID) (seq uint64, on bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		return 0, false
	}
	g := c.grants[id]
	for len(g) > 0 && !c.valid(g[0], id) {
		g = g[1:]
	}
	c.grants[id] = g
	if len(g) == 0 {
		return 0, true
	}
	return g[0], true
}

// Transmit: the producer publishes record seq to sink id now. It must be the record the machine
// sends there next.
func (c *StickyCheck) Transmit(seq uint64, id SinkID) {
	if !c.enter(stickyEvent{op: "transmit", seq: seq, id: id}) {
		return
	}
	defer c.mu.Unlock()
	g := c.grants[id]
	for len(g) > 0 && !c.valid(g[0], id) {
		g = g[1:]
	}
	if len(g) == 0 || g[0] != seq {
		next := "nothing"
		if len(g) > 0 {
			next = fmt.Sprintf("record %d", g[0])
		}
		why := ""
		if r := c.m.bySeq[seq]; r == nil {
			why = " (the machine does not hold it)"
		} else if r.ambiguous {
			why = " (the machine holds it ambiguous)"
		} else if r.sink == nil {
			why = fmt.Sprintf(" (the machine holds it for the move to epoch %d)", c.m.next)
		} else if r.sink.ambiguous() {
			why = fmt.Sprintf(" (its sink (%d,%d) is ambiguous)", r.sink.id.Epoch, r.sink.id.Partition)
		} else if r.sink.id != id {
			why = fmt.Sprintf(" (the machine has it in (%d,%d))", r.sink.id.Epoch, r.sink.id.Partition)
		}
		c.violation("record %d transmitted to (%d,%d)%s; the machine sends %s there next", seq, id.Epoch, id.Partition, why, next)
		return
	}
	c.grants[id] = g[1:]
	c.sentTo[seq] = id
}

// Acked: the producer acknowledged these records of sink id (not by settling: see Settled).
func (c *StickyCheck) Acked(id SinkID, seqs ...uint64) {
	e := stickyEvent{op: "acked", id: id}
	if len(seqs) == 1 {
		e.seq = seqs[0] // the producer's usual call: no copy
	} else {
		e.seqs = append([]uint64(nil), seqs...)
	}
	if !c.enter(e) {
		return
	}
	defer c.mu.Unlock()
	for _, seq := range seqs {
		if to, ok := c.sentTo[seq]; !ok || to != id {
			c.violation("record %d acknowledged in (%d,%d), where it was not transmitted since the machine last sent it", seq, id.Epoch, id.Partition)
			return
		}
		if r := c.m.bySeq[seq]; r != nil && r.ambiguous {
			c.early[id] = append(c.early[id], seq) // settling's: see Settled
			continue
		}
		if !c.m.ackOne(seq) {
			c.violation("record %d acknowledged in (%d,%d); the machine does not have it in flight there", seq, id.Epoch, id.Partition)
			return
		}
		delete(c.sentTo, seq)
		delete(c.parts, seq)
	}
}

// Anomaly: sink id settles its open batch: what it has in flight is ambiguous.
func (c *StickyCheck) Anomaly(id SinkID) {
	if !c.enter(stickyEvent{op: "anomaly", id: id}) {
		return
	}
	defer c.mu.Unlock()
	c.apply(c.m.Anomaly(id))
	delete(c.grants, id)
}

// Settled (a decision while the producer is at its epoch; a check while it moves): settling
// sink id's batch found these records stored and failed these for good (the facts the
// producer's I/O learnt); the machine classifies the sink's ambiguous records: acked are
// acknowledged, failed fail, every other one is sent again (its sink's Next). decided is false
// while the producer moves to a newer epoch (the settling is applied at Resend, which checks
// the producer's own classification against the machine's) and when the check is off: the
// facts stand then.
func (c *StickyCheck) Settled(id SinkID, stored, failed []uint64) (acked, failedOut []uint64, decided bool) {
	return c.settled(stickySettling{id: id, stored: stored, failed: failed})
}

// HandBack: sink id, fenced, stopped and handed its records back to the producer (its final
// settling: nothing of it is in flight any more).
func (c *StickyCheck) HandBack(id SinkID) { c.settled(stickySettling{id: id, handBack: true}) }

func (c *StickyCheck) settled(st stickySettling) (acked, failed []uint64, decided bool) {
	op := "settled"
	if st.handBack {
		op = "hand-back"
	}
	if !c.enter(stickyEvent{op: op, id: st.id, seqs: append(append([]uint64{}, st.stored...), st.failed...)}) {
		return nil, nil, false
	}
	defer c.mu.Unlock()
	if c.moving != 0 {
		c.deferred = append(c.deferred, st)
		return nil, nil, false
	}
	if st.handBack {
		c.violation("sink (%d,%d) handed its records back with no newer epoch to move to", st.id.Epoch, st.id.Partition)
		return nil, nil, false
	}
	a, ok := c.settle(st, false)
	if !ok {
		return nil, nil, false
	}
	return a.Acked, a.Failed, true
}

// settle applies a settling to the machine. check: the producer decided it itself (a settling
// deferred during a move), so the machine's classification must be the producer's.
func (c *StickyCheck) settle(st stickySettling, check bool) (StickyActions, bool) {
	id := st.id
	stored := append(append([]uint64{}, st.stored...), c.early[id]...)
	delete(c.early, id)
	k := c.m.sink(id)
	if k == nil || !k.ambiguous() {
		if len(stored)+len(st.failed) > 0 {
			c.violation("sink (%d,%d) settled records %v (stored) %v (failed) the machine does not hold ambiguous there", id.Epoch, id.Partition, stored, st.failed)
			return StickyActions{}, false
		}
		return StickyActions{}, true
	}
	for _, r := range k.records() {
		if r.ambiguous {
			delete(c.sentTo, r.seq) // decided now: acknowledged, failed, or sent again
		}
	}
	a, err := c.m.SettledFailing(id, stored, st.failed)
	if err != nil {
		c.violation("settling (%d,%d): %v", id.Epoch, id.Partition, err)
		return StickyActions{}, false
	}
	if check && !sameSet(a.Acked, stored) {
		c.violation("sink (%d,%d) settled %v as stored; the machine acknowledges %v", id.Epoch, id.Partition, sorted(stored), sorted(a.Acked))
		return StickyActions{}, false
	}
	if check && !sameSet(a.Failed, st.failed) {
		c.violation("sink (%d,%d) failed %v in settling; the machine fails %v", id.Epoch, id.Partition, sorted(st.failed), sorted(a.Failed))
		return StickyActions{}, false
	}
	for _, seq := range append(a.Acked, a.Failed...) {
		delete(c.parts, seq)
	}
	c.apply(a)
	return a, true
}

// NewEpoch: the producer saw epoch current and fenced its sinks (none transmits any more).
func (c *StickyCheck) NewEpoch(current int) {
	if !c.enter(stickyEvent{op: "new-epoch", seq: uint64(current)}) {
		return
	}
	defer c.mu.Unlock()
	a, err := c.m.NewEpoch(current)
	if err != nil {
		c.violation("new epoch %d: %v", current, err)
		return
	}
	c.grants = map[SinkID][]uint64{}
	c.moving = max(c.moving, current)
	c.apply(a)
}

// Resend (a decision, not a check): every old sink handed back, and the producer re-sends their
// records and those it took meanwhile under epoch. The machine decides which records go and in
// what order (its settlings, its re-gather in send order, spec/protocol.md §5.1.2 step 4); place
// gives a record's partition in epoch (the producer's partitioner, called by the machine in its
// order, so a keyless record's round robin follows it too), or an error: that record fails
// (lost), the others go on. plan is what the producer transmits, in this order, each record to
// its partition; ok is false when the check is off (closed, or stopped at a violation): the
// machine decides nothing then, and the producer fails the records it holds.
func (c *StickyCheck) Resend(epoch int, place func(seq uint64) (int, error)) (plan []Placed, lost []uint64, ok bool) {
	if !c.enter(stickyEvent{op: "resend", seq: uint64(epoch)}) {
		return nil, nil, false
	}
	defer c.mu.Unlock()
	if c.moving == 0 {
		c.violation("re-sending under epoch %d with no move to a newer epoch begun", epoch)
		return nil, nil, false
	}
	c.place, c.placing, c.lost, c.plan = place, epoch, nil, nil
	defer func() { c.place, c.lost, c.plan = nil, nil, nil }()
	if _, err := c.m.NewEpoch(epoch); err != nil {
		c.violation("new epoch %d: %v", epoch, err)
		return nil, nil, false
	}
	c.grants = map[SinkID][]uint64{}
	for _, st := range c.deferred {
		c.settle(st, true)
		if c.off {
			return nil, nil, false
		}
	}
	c.deferred = nil
	if c.m.next != 0 {
		var waiting []string
		for _, k := range c.m.sinks {
			if k.ambiguous() {
				waiting = append(waiting, fmt.Sprintf("(%d,%d)", k.id.Epoch, k.id.Partition))
			}
		}
		c.violation("re-sending under epoch %d while the machine waits for sinks %s to settle (each old sink settles or hands back before the producer re-sends)", epoch, strings.Join(waiting, " "))
		return nil, nil, false
	}
	if c.m.epoch != epoch {
		c.violation("re-sending under epoch %d; the machine moved to epoch %d", epoch, c.m.epoch)
		return nil, nil, false
	}
	for _, seq := range c.held {
		a, err := c.m.Produce(seq, key(seq))
		if err != nil {
			c.violation("record %d, taken during the move: %v", seq, err)
			return nil, nil, false
		}
		c.apply(a)
	}
	c.held, c.moving = nil, 0
	lost = c.lost
	if len(lost) > 0 {
		if a := c.m.Drop(lost); !sameSet(a.Failed, lost) {
			c.violation("failing %v at the move to epoch %d; the machine fails %v", lost, epoch, a.Failed)
			return nil, nil, false
		}
		out := map[uint64]bool{}
		for _, seq := range lost {
			out[seq] = true
			delete(c.parts, seq)
		}
		for _, p := range c.plan {
			if !out[p.Seq] {
				plan = append(plan, p)
			}
		}
	} else {
		plan = c.plan
	}
	return plan, lost, true
}

// Drop: the producer failed these records for good before transmitting them.
func (c *StickyCheck) Drop(seqs ...uint64) {
	if !c.enter(stickyEvent{op: "drop", seqs: append([]uint64(nil), seqs...)}) {
		return
	}
	defer c.mu.Unlock()
	for _, seq := range seqs {
		delete(c.sentTo, seq)
		delete(c.parts, seq)
	}
	if a := c.m.Drop(seqs); !sameSet(a.Failed, seqs) {
		c.violation("failing %v before sending them; the machine fails %v", seqs, a.Failed)
	}
}

// Events returns how many events the check has taken (0 for a nil check).
func (c *StickyCheck) Events() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events
}

// Close: the producer stopped (closed, or failed for good). Its last records race with the
// stop, so nothing is checked after it.
func (c *StickyCheck) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.note(stickyEvent{op: "close"})
	c.m.Close()
	c.off = true
}

func sorted(s []uint64) []uint64 {
	out := append([]uint64(nil), s...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sameSet(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = sorted(a), sorted(b)
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
