package client

// The Consumer (consumer.go): epoch gating, boundaries and key callbacks.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/proto"
)

func (w *worker) position() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.delivered
}

// skipPassed marks the boundaries of this partition below pos as passed: an owner runs a
// boundary's keys-revoked step before its position passes the boundary (spec/protocol.md §6.5),
// so the owner that took the position there ran it.
func (w *worker) skipPassed(pos uint64) {
	cn := w.cn
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, e := range proto.Passed(cn.desc, w.partition, pos) {
		cn.revoked[[2]int{w.partition, e}] = true
	}
}

// passBoundaries runs the keys-revoked step for every ended epoch whose boundary in this
// partition the member has handled (pos >= boundary), once per generation, then commits at once:
// the position then goes past the boundary (the fence marker right after it), which lets the
// children's gates and keys-assigned steps go on (spec/protocol.md §6.5).
func (w *worker) passBoundaries(ctx context.Context, pos uint64) {
	cn := w.cn
	cn.mu.Lock()
	t := cn.desc
	stale := cn.pending != nil || cn.gen != w.gen
	cn.mu.Unlock()
	if stale {
		return // a reset came: the new generation passes its boundaries again
	}
	cn.mu.Lock()
	revokes := proto.Revokes(t, w.partition, pos, func(e int) bool { return cn.revoked[[2]int{w.partition, e}] })
	for _, e := range revokes {
		cn.revoked[[2]int{w.partition, e}] = true
	}
	cn.mu.Unlock()
	for _, en := range revokes {
		e, next := t.Epoch(en), t.Epoch(en+1)
		if cn.opts.OnKeysRevoked != nil {
			fOld, err1 := cn.partitionerFor(ctx, e)
			fNew, err2 := cn.partitionerFor(ctx, next)
			if err1 == nil && err2 == nil {
				q := w.partition
				cn.opts.OnKeysRevoked(KeyChange{Topic: cn.topic, FromEpoch: e.Epoch, ToEpoch: next.Epoch, Partition: q, Parent: q,
					Moved: func(k []byte) bool {
						a, _ := fOld.Partition(k, int32(e.Partitions))
						b, _ := fNew.Partition(k, int32(next.Partitions))
						return int(a) == q && int(b) != q
					}})
			}
		}
	}
	if len(revokes) > 0 {
		w.commitNow(ctx)
	}
}

// ensureEnded waits until the member's descriptor shows epoch e ended (with its boundaries) and
// its successor: a record or marker of a newer epoch exists, so the broker is activating it.
func (w *worker) ensureEnded(ctx context.Context, e int) error {
	cn := w.cn
	for {
		cn.mu.Lock()
		t := cn.desc
		cn.mu.Unlock()
		if proto.Ended(t.Epoch(e)) && t.Epoch(e+1) != nil {
			return nil
		}
		cn.refresh(ctx)
		cn.mu.Lock()
		t = cn.desc
		cn.mu.Unlock()
		if proto.Ended(t.Epoch(e)) && t.Epoch(e+1) != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitGroup waits until ok (called with cn.mu held) holds for the group's positions, reading
// partition q's key directly once a heartbeat in case the watch missed a commit. It returns
// errStale when the worker's generation ends meanwhile.
func (w *worker) waitGroup(ctx context.Context, q int, ok func() bool, slow func() string) (bool, error) {
	cn := w.cn
	start := time.Now()
	waited, logged := false, false
	lastFetch := time.Now()
	poll := cn.opts.Heartbeat
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for !ok() {
		if ctx.Err() != nil {
			return waited, ctx.Err()
		}
		if cn.pending != nil || cn.gen != w.gen {
			return waited, errStale
		}
		waited = true
		if !logged && time.Since(start) > 3*cn.opts.SessionTimeout {
			logged = true
			cn.opts.Logf("member %s: partition %d: %s", cn.opts.Member, w.partition, slow())
		}
		waitCondTimeout(ctx, cn.cond, poll)
		if time.Since(lastFetch) >= poll && !ok() {
			// The watch brings positions as they are committed; in case it missed one (it is
			// re-established after a broker restart), also read the key directly.
			cn.mu.Unlock()
			cn.fetchPosition(ctx, q)
			lastFetch = time.Now()
			cn.mu.Lock()
		}
	}
	return waited, nil
}

// pastBoundaryLocked reports whether the group's position of partition q is past boundary b,
// that is past the fence marker right after it: its owner has run the boundary's keys-revoked
// step (spec/protocol.md §6.5). A retired partition drained to its final boundary that no live
// lease holds counts too: no one reads its marker, and its last owner ran the step before
// releasing it (or crashed).
func (cn *Consumer) pastBoundaryLocked(q int, b uint64) bool {
	st := cn.states[q]
	leased := proto.LeaseLive(st.owner, st.leaseEnd, time.Now().UnixMilli(), proto.MaxClockSkew(cn.opts.SessionTimeout))
	return proto.PastBoundary(cn.desc, q, b, cn.positionLocked, leased)
}

// gate blocks a record of epoch x until, for every earlier epoch e that the group has not fully
// drained yet, the key's partition in e is drained by the group past e's boundary (per-key exact
// ancestry: only this record's partition waits, and only for those parents). The key's own
// partition needs no wait (spec/protocol.md §6.7): its older records are before this one in this
// very stream.
//
// Checking only epoch x-1 is not enough: a key with no records during epoch x-1 has older
// records in epoch x-2 that nothing in x-1's partitions waits for (the randomised scenario tests
// found exactly that). Epochs the group has drained completely are skipped, so in the steady state
// a record checks one epoch or none.
//
// Then, for a key that moved here from partition q of epoch x-1, the keys-assigned step of
// (this partition, q) runs once per generation, after q's owner ran its keys-revoked step: when
// the group's position of q is past q's boundary (KIP-253's order, DESIGN.md §4).
func (w *worker) gate(ctx context.Context, m *Message) error {
	cn := w.cn
	cn.mu.Lock()
	t := cn.desc
	cn.mu.Unlock()
	if m.Epoch <= t.Epochs[0].Epoch {
		return nil
	}
	if err := w.ensureEnded(ctx, m.Epoch-1); err != nil {
		return err
	}
	cn.mu.Lock()
	t = cn.desc
	cn.mu.Unlock()
	partitionIn := func(ep *wire.Epoch) (int, error) {
		f, err := cn.partitionerFor(ctx, ep)
		if err != nil {
			return 0, err
		}
		pq, err := f.Partition(m.Key, int32(ep.Partitions))
		if err != nil {
			return 0, fmt.Errorf("%w: partition of key %x in epoch %d: %v", wire.ErrPluginFailed, m.Key, ep.Epoch, err)
		}
		return int(pq), nil
	}
	drained := m.Epoch - 1 // ungated (testhook): no waits (the keys-assigned step below still runs)
	if !cn.opts.Testing.Ungated() {
		drained = cn.drainedThrough(t)
	}
	if drained >= m.Epoch-1 && cn.opts.OnKeysAssigned == nil {
		// Every older epoch is drained: nothing to wait for, and no keys-assigned step to run
		// (the key's partitions in older epochs are not needed). Once a replay's parents have
		// drained, this check is all a gated record costs.
		return nil
	}
	// Not under cn.mu: partitionIn may fetch a module.
	g, err := proto.GateRecord(t, drained, m.Epoch, w.partition, partitionIn, cn.position)
	if err != nil {
		return err
	}
	start := time.Now()
	waited := false
	for _, c := range g.Waits {
		wt, err := w.waitGroup(ctx, c.Partition, func() bool { return cn.positions[c.Partition] >= c.Boundary }, func() string {
			return fmt.Sprintf("record %d (epoch %d, key %q) still waits for partition %d to reach %d (epoch %d boundary); the group is at %d",
				m.Seq, m.Epoch, m.Key, c.Partition, c.Boundary, c.Epoch, cn.positions[c.Partition])
		})
		waited = waited || wt
		if err != nil {
			return err
		}
	}
	if waited {
		d := time.Since(start)
		cn.mu.Lock()
		cn.stats.Gated++
		cn.stats.TotalWait += d
		if d > cn.stats.MaxWait {
			cn.stats.MaxWait = d
		}
		cn.mu.Unlock()
		cn.hookGateWait(w.partition, m.Epoch, d) // hooks.go
	}
	if cn.opts.OnKeysAssigned == nil {
		return nil
	}
	if g.Assigned == nil {
		return nil // the key was in this partition in epoch x-1
	}
	prev, next := t.Epoch(m.Epoch-1), t.Epoch(m.Epoch)
	q, b := g.Assigned.Partition, g.Assigned.Boundary
	akey := [3]int{w.partition, m.Epoch, q}
	cn.mu.Lock()
	done := cn.assigned[akey]
	cn.mu.Unlock()
	if done {
		return nil
	}
	if _, err := w.waitGroup(ctx, q, func() bool { return cn.pastBoundaryLocked(q, b) }, func() string {
		return fmt.Sprintf("keys-assigned from partition %d (epoch %d) still waits for the group to pass that partition's boundary %d; the group is at %d",
			q, prev.Epoch, b, cn.positions[q])
	}); err != nil {
		return err
	}
	cn.mu.Lock()
	done = cn.assigned[akey]
	cn.assigned[akey] = true
	cn.mu.Unlock()
	if done {
		return nil
	}
	f, err1 := cn.partitionerFor(ctx, prev)
	fNew, err2 := cn.partitionerFor(ctx, next)
	if err1 == nil && err2 == nil {
		child := w.partition
		cn.opts.OnKeysAssigned(KeyChange{Topic: cn.topic, FromEpoch: prev.Epoch, ToEpoch: next.Epoch, Partition: child, Parent: q,
			Moved: func(k []byte) bool {
				a, _ := f.Partition(k, int32(prev.Partitions))
				b, _ := fNew.Partition(k, int32(next.Partitions))
				return int(a) == q && int(b) == child
			}})
	}
	return nil
}

// fetchPosition reads a partition's committed position from the group state.
func (cn *Consumer) fetchPosition(ctx context.Context, q int) {
	kv, err := cn.kv(ctx)
	if err != nil {
		return
	}
	ctx, cancel := cn.op(ctx)
	defer cancel()
	e, err := kv.Get(ctx, wire.PartitionKey(cn.topicID, cn.opts.Group, q))
	if err != nil {
		return
	}
	var ps wire.PartitionState
	if json.Unmarshal(e.Value(), &ps) == nil {
		cn.mu.Lock()
		newer := ps.Generation > cn.gen
		cn.mu.Unlock()
		if newer {
			_ = cn.readReset(ctx, kv)
		}
		cn.setPosition(q, e.Revision(), ps)
	}
}

// waitCondTimeout is waitCond that also wakes after d.
func waitCondTimeout(ctx context.Context, c *sync.Cond, d time.Duration) {
	t := time.AfterFunc(d, func() {
		c.L.Lock()
		c.Broadcast()
		c.L.Unlock()
	})
	waitCond(ctx, c)
	t.Stop()
}

// drainedThrough returns the newest ended epoch e such that the group has drained every
// partition of every epoch up to e past that epoch's boundary (0 if none). Positions only grow,
// so the answer only grows; it is cached.
func (cn *Consumer) drainedThrough(t *wire.Topic) int {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.drained = proto.DrainedThrough(t, cn.drained, cn.positionLocked)
	return cn.drained
}
