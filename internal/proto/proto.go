// Package proto is the I/O-free core of pctl's consumer-group protocol (spec/protocol.md §6): the
// decisions a member makes — may a record be delivered yet (epoch gating), may a lease be taken or
// used (leases under a stated clock-skew bound), what a fence marker or a passed boundary asks for
// (keys revoked, an immediate commit), which partitions are still assignable after a shrink, when
// a parent is past its boundary for keys assigned — as pure functions of the descriptor, the
// group's committed positions, the leases and the time, all passed in.
//
// It also holds the producer's decisions of spec/protocol.md §5.1.2: the re-send order after a
// fence, the search's floor and top, the per-key rule's batches, and sticky ambiguity as a state
// machine (Sticky: events in, actions out). internal/produce (client.Producer and the broker's
// produce service) runs on that machine through StickyCheck: the machine decides what a sink
// transmits next, how a settling classifies a batch's records (stored, failed, sent again) and
// which records are re-sent under a newer epoch in what order; the producer's I/O (fast batches,
// settling's reads) learns the facts and executes the actions, and what it still decides itself
// (acknowledgements from replies, the settlings of a move) is checked against the machine.
//
// Nothing here talks to NATS, reads a clock or runs a partitioner: a key's partition in an epoch is
// a function argument, the time is unix milliseconds. client.Consumer makes these decisions
// through this package, and spec/vectors/protocol/*.jsonl (written by ./gen from the hand-written
// traces of package protovec) pins them, so that every SDK can replay the same traces against its
// own implementation.
package proto

import (
	"fmt"
	"time"

	"pctl.dev/pctl/broker/wire"
)

// Positions gives the group's effective committed position of a partition (spec/protocol.md §6,
// §6.6): every record and marker up to it is acknowledged by the group.
type Positions func(q int) uint64

// PartitionOf gives a record's key's partition in an epoch: f_e(k, N_e) (abi-v1.md).
type PartitionOf func(ep *wire.Epoch) (int, error)

// Ended reports whether an epoch has ended: it has a boundary for each of its partitions.
func Ended(ep *wire.Epoch) bool { return ep != nil && len(ep.Boundaries) == ep.Partitions }

// FinalBoundary is the last boundary of partition q among the topic's ended epochs: for a
// partition shrunk away, the last sequence it holds (0 when no ended epoch had it).
func FinalBoundary(t *wire.Topic, q int) uint64 {
	var last uint64
	for _, e := range t.Epochs[:len(t.Epochs)-1] {
		if q < len(e.Boundaries) {
			last = e.Boundaries[q]
		}
	}
	return last
}

// Assignable returns the partitions the group must read (spec/protocol.md §6.2): the current
// epoch's 0 .. N-1, plus every partition shrunk away whose group position is below its final
// boundary. A retired partition drained to its final boundary is no longer read by anyone.
func Assignable(t *wire.Topic, pos Positions) []int {
	cur := t.Current()
	var out []int
	for q := 0; q < t.MaxPartitions(); q++ {
		if q < cur.Partitions || pos(q) < FinalBoundary(t, q) {
			out = append(out, q)
		}
	}
	return out
}

// Retired reports whether partition q was shrunk away and is drained to its final boundary:
// not assignable, so no member reads its fence marker again (spec/protocol.md §6.5, §7).
func Retired(t *wire.Topic, q int, pos Positions) bool {
	return q >= t.Current().Partitions && pos(q) >= FinalBoundary(t, q)
}

// DrainedThrough returns the newest ended epoch e such that every partition of every epoch up
// to e is at or past that epoch's boundary (the first epoch's number - 1 when none), starting the
// search after from (a cached earlier answer; positions only grow within a generation, so the
// answer only grows). Epochs up to it need no gate check (spec/protocol.md §6.5).
func DrainedThrough(t *wire.Topic, from int, pos Positions) int {
	d := from
	if d < t.Epochs[0].Epoch-1 {
		d = t.Epochs[0].Epoch - 1
	}
	for e := d + 1; ; e++ {
		ep := t.Epoch(e)
		if !Ended(ep) {
			return d
		}
		for q, b := range ep.Boundaries {
			if pos(q) < b {
				return d
			}
		}
		d = e
	}
}

// Wait is one condition of a gate: the group's position of Partition must reach Boundary, the
// partition's boundary in Epoch.
type Wait struct {
	Epoch     int    `json:"epoch"`
	Partition int    `json:"partition"`
	Boundary  uint64 `json:"boundary"`
}

// Gate is the decision for a keyed record of epoch x read from partition p (spec/protocol.md
// §6.5, §6.7).
type Gate struct {
	// Refresh: the descriptor does not show epoch x-1 ended and epoch x yet (the record is newer
	// than the member's descriptor): re-read it and decide again. Nothing else is set.
	Refresh bool
	// Waits lists, newest epoch first, the conditions not met yet: for every epoch e < x not
	// fully drained, the key's partition q_e = f_e(k, N_e), unless it is p, must reach
	// boundaries_e[q_e]. The record is delivered when none is left.
	Waits []Wait
	// Parent is the key's partition in epoch x-1 (-1 for a record of the first epoch).
	Parent int
	// Assigned, when Parent differs from p, is the keys-assigned step's condition (§6.5): the
	// group must be past Parent's boundary of epoch x-1 (PastBoundary) before the callback for
	// (p, Parent, x) runs, once per member and generation.
	Assigned *Wait
}

// GateRecord decides whether a keyed record of epoch x in partition p may be delivered.
// drained is DrainedThrough's answer (an optimisation: drained epochs' conditions all hold).
func GateRecord(t *wire.Topic, drained, x, p int, f PartitionOf, pos Positions) (Gate, error) {
	g := Gate{Parent: -1}
	if x <= t.Epochs[0].Epoch {
		return g, nil
	}
	prev := t.Epoch(x - 1)
	if !Ended(prev) || t.Epoch(x) == nil {
		return Gate{Refresh: true, Parent: -1}, nil
	}
	for e := x - 1; e >= t.Epochs[0].Epoch; e-- {
		if e <= drained && e != x-1 {
			break
		}
		ep := t.Epoch(e)
		q, err := f(ep)
		if err != nil {
			return Gate{Parent: -1}, err
		}
		if q < 0 || q >= ep.Partitions {
			return Gate{Parent: -1}, fmt.Errorf("%w: partition %d of a key in epoch %d of %d partitions", wire.ErrPluginFailed, q, e, ep.Partitions)
		}
		if e == x-1 {
			g.Parent = q
		}
		if e <= drained || q == p {
			continue
		}
		if b := ep.Boundaries[q]; pos(q) < b {
			g.Waits = append(g.Waits, Wait{Epoch: e, Partition: q, Boundary: b})
		}
	}
	if g.Parent != p {
		g.Assigned = &Wait{Epoch: x - 1, Partition: g.Parent, Boundary: prev.Boundaries[g.Parent]}
	}
	return g, nil
}

// PastBoundary reports whether the group's position of partition q is past boundary b for the
// keys-assigned step (spec/protocol.md §6.5): above b (the fence marker after b is passed, so q's
// owner ran keys revoked), or at b while no live lease holds q and q is retired (drained to its
// final boundary after a shrink: no one reads its marker again). leased is LeaseLive of q's lease.
func PastBoundary(t *wire.Topic, q int, b uint64, pos Positions, leased bool) bool {
	p := pos(q)
	if p != b {
		return p > b
	}
	return !leased && Retired(t, q, pos)
}

// Revokes returns, oldest first, the ended epochs (with a successor in t) whose boundary in
// partition q is at or below pos and whose keys-revoked step has not run yet (done), spec/protocol.md
// §6.5: the member runs keys revoked for each, then commits at once when the list is not empty.
// A member calls it whenever its position in q moves: after a record or marker, when it acquires q
// (boundaries below its start position were passed by an earlier owner: MarkPassed).
func Revokes(t *wire.Topic, q int, pos uint64, done func(epoch int) bool) []int {
	var out []int
	for i := 0; i+1 < len(t.Epochs); i++ {
		e := &t.Epochs[i]
		if q >= len(e.Boundaries) || pos < e.Boundaries[q] || done(e.Epoch) {
			continue
		}
		out = append(out, e.Epoch)
	}
	return out
}

// Passed returns the ended epochs whose boundary in q is below start: a member that acquires q
// at start marks their keys-revoked steps as run (the owner that took the position past them ran
// them); a boundary exactly at start is not passed (that owner may have stopped before running it).
func Passed(t *wire.Topic, q int, start uint64) []int {
	var out []int
	for _, e := range t.Epochs {
		if q < len(e.Boundaries) && e.Boundaries[q] < start {
			out = append(out, e.Epoch)
		}
	}
	return out
}

// Marker is the decision for a fence marker `Pctl-Fence: fence` read at stream sequence seq of
// partition q (spec/protocol.md §6.4, §6.5).
type Marker struct {
	// Refresh: the descriptor does not show epoch fence-1 ended and epoch fence yet: re-read it
	// and decide again (a marker can be read before its epoch is active). Nothing else is set.
	Refresh bool
	// Revoke lists the keys-revoked steps to run first, oldest epoch first (Revokes at seq-1 and
	// at seq).
	Revoke []int
	// Position: the member's position moves past the marker, to seq (it is never delivered).
	Position uint64
	// Commit: commit Position at once (children's keys-assigned steps wait for it).
	Commit bool
}

// MarkerNeedsDescriptor reports whether a fence marker `Pctl-Fence: fence` must wait for a
// descriptor that shows epoch fence-1 ended (its boundaries) and epoch fence.
func MarkerNeedsDescriptor(t *wire.Topic, fence int) bool {
	return fence > 1 && !(Ended(t.Epoch(fence-1)) && t.Epoch(fence) != nil)
}

// FenceMarker decides what a member does with a fence marker.
func FenceMarker(t *wire.Topic, q int, seq uint64, fence int, done func(epoch int) bool) Marker {
	if MarkerNeedsDescriptor(t, fence) {
		return Marker{Refresh: true}
	}
	ran := map[int]bool{}
	isDone := func(e int) bool { return ran[e] || done(e) }
	var rv []int
	for _, p := range []uint64{seq - 1, seq} {
		for _, e := range Revokes(t, q, p, isDone) {
			ran[e] = true
			rv = append(rv, e)
		}
	}
	return Marker{Revoke: rv, Position: seq, Commit: true}
}

// Clock-skew bound of leases (spec/protocol.md §6.3).
const (
	// MaxClockSkewLimit is the largest clock difference between two members' hosts that leases
	// tolerate.
	MaxClockSkewLimit = time.Second
	// SkewShare: with short session timeouts the bound is session/SkewShare.
	SkewShare = 6
)

// MaxClockSkew is the clock-skew bound for a session timeout: min(1 s, session/6), whole
// milliseconds. Lease ends are written by their holder's clock and read by other members by
// theirs, so another member counts a lease as expired only MaxClockSkew after its end.
func MaxClockSkew(session time.Duration) time.Duration {
	s := session / SkewShare
	if s > MaxClockSkewLimit {
		s = MaxClockSkewLimit
	}
	return s.Truncate(time.Millisecond)
}

// LeaseLive reports whether a partition's lease (owner, leaseEnd in unix ms by its holder's
// clock) still holds, as seen by another member at now (unix ms by its own clock): it has an
// owner and now < leaseEnd + skew. The other member must not take the partition, and keys
// assigned waiting on a retired partition at its boundary keeps waiting, while it holds.
func LeaseLive(owner string, leaseEnd, now int64, skew time.Duration) bool {
	return owner != "" && now < leaseEnd+skew.Milliseconds()
}

// MayAcquire reports whether member me may take a partition whose key shows owner and leaseEnd
// (spec/protocol.md §6.3): no owner, our own, or expired past the skew bound.
func MayAcquire(me, owner string, leaseEnd, now int64, skew time.Duration) bool {
	return owner == "" || owner == me || !LeaseLive(owner, leaseEnd, now, skew)
}

// DeliverMargin is the least lease time left, by the holder's own clock, at which a holder still
// starts delivering a record: a quarter of the session timeout (spec/protocol.md §6.3).
func DeliverMargin(session time.Duration) time.Duration { return session / 4 }

// MayDeliver reports whether the holder of a lease ending at leaseUntil (unix ms, its own clock)
// may deliver a record at now: more than DeliverMargin is left. Otherwise it renews the lease
// first (commit and renew), and delivers nothing until that succeeded.
func MayDeliver(leaseUntil, now int64, session time.Duration) bool {
	return leaseUntil-now > DeliverMargin(session).Milliseconds()
}
