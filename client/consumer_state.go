package client

// The Consumer (consumer.go): positions, resets and commits seen through the group's KV watch.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// ownSubject reports whether a subject is one this member uses for its group or its topic's
// partitions (so that a refusal of it concerns this member).
func (cn *Consumer) ownSubject(subject string) bool {
	group := wire.GroupsBucket + "." + wire.GroupPrefix(cn.topicID, cn.opts.Group)
	return strings.Contains(subject, group) ||
		strings.HasPrefix(subject, "$JS.API.CONSUMER.CREATE."+wire.StreamPrefix+cn.topic+"_") ||
		strings.HasPrefix(subject, "$JS.API.STREAM.INFO."+wire.StreamPrefix+cn.topic+"_") ||
		subject == "$JS.API.STREAM.INFO.KV_"+wire.GroupsBucket
}

// watchPositions keeps the group's committed positions (cn.positions) up to date from a KV watch
// on the group's partition keys. The watch is made again after every reconnect and whenever it
// falls behind the member's own commits (a watch is a server-side consumer too, and can be lost
// like a reader); meanwhile a waiting gate also reads the positions it needs directly.
func (cn *Consumer) watchPositions(ctx context.Context, kv jetstream.KeyValue) {
	status := cn.c.nc.StatusChanged(nats.CONNECTED)
	defer cn.c.nc.RemoveStatusListener(status)
	var backoff time.Duration
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			cn.mu.Lock()
			cn.stats.WatchRestarts++
			cn.mu.Unlock()
		}
		// The whole group: partition keys (positions) and g.reset (generations). Member keys come
		// too and are ignored. (One filter: a consumer credential allows exactly this one, §8.2.)
		w, err := kv.Watch(ctx, wire.GroupPrefix(cn.topicID, cn.opts.Group)+">")
		if err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		cn.followWatch(ctx, w, status)
		_ = w.Stop()
	}
}

// followWatch applies the watch's entries until the context ends, the connection reconnects, the
// watch ends or it falls behind.
func (cn *Consumer) followWatch(ctx context.Context, w jetstream.KeyWatcher, reconnected <-chan nats.Status) {
	check := time.NewTicker(readerStall / 2)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reconnected:
			cn.opts.Logf("member %s: reconnected; watching the group's positions again", cn.opts.Member)
			return
		case <-check.C:
			cn.mu.Lock()
			behind := cn.commitRev > cn.seenRev && time.Since(cn.commitAt) > readerStall
			cn.mu.Unlock()
			if behind {
				cn.opts.Logf("member %s: the positions watch missed our own commit; watching again", cn.opts.Member)
				return
			}
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				cn.applyEntry(e)
			}
		}
	}
}

// applyEntry takes a committed position, or a reset, from the group's state.
func (cn *Consumer) applyEntry(e jetstream.KeyValueEntry) {
	prefix := wire.GroupPrefix(cn.topicID, cn.opts.Group)
	name, ok := strings.CutPrefix(e.Key(), prefix)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if e.Revision() > cn.seenRev {
		cn.seenRev = e.Revision()
	}
	if !ok || e.Operation() != jetstream.KeyValuePut {
		return
	}
	if name == "g.reset" {
		var st wire.ResetState
		if json.Unmarshal(e.Value(), &st) == nil {
			cn.noteResetLocked(&st)
		}
		return
	}
	qs, ok := strings.CutPrefix(name, "p.")
	q, err := strconv.Atoi(qs)
	if !ok || err != nil || q < 0 {
		return
	}
	var ps wire.PartitionState
	if json.Unmarshal(e.Value(), &ps) == nil {
		cn.noteStateLocked(q, e.Revision(), ps)
	}
}

// noteStateLocked records partition key q as written at revision rev and updates q's effective
// position. Only a newer revision counts.
func (cn *Consumer) noteStateLocked(q int, rev uint64, ps wire.PartitionState) {
	if cur, ok := cn.states[q]; ok && rev <= cur.rev {
		return
	}
	cn.states[q] = keyState{rev: rev, gen: ps.Generation, pos: ps.Position, owner: ps.Owner, leaseEnd: ps.LeaseEnd}
	if ps.Generation > cn.gen {
		return // a reset we have not applied yet: keep what we knew until we do
	}
	if e := cn.effectiveLocked(q); e != cn.positions[q] {
		cn.positions[q] = e
		cn.cond.Broadcast()
	}
}

// effectiveLocked is partition q's effective position at the member's generation
// (spec/protocol.md §6.6): its key's position when the key was written at this generation, else
// the reset's position for q (0 at generation 0, or for a stream the reset did not know).
func (cn *Consumer) effectiveLocked(q int) uint64 {
	st, ok := cn.states[q]
	if ok && st.gen == cn.gen {
		return st.pos
	}
	if ok && st.gen > cn.gen {
		return cn.positions[q]
	}
	if cn.reset != nil && q < len(cn.reset.Positions) {
		return cn.reset.Positions[q]
	}
	return 0
}

// noteResetLocked takes a reset seen in the group's state: a newer generation stops every
// delivery at once (nothing is delivered while one is pending) and is applied by Run's loop.
func (cn *Consumer) noteResetLocked(st *wire.ResetState) {
	if st.Generation <= cn.gen || (cn.pending != nil && st.Generation <= cn.pending.Generation) {
		return
	}
	cn.pending = st
	cn.cond.Broadcast()
	select {
	case cn.resetKick <- struct{}{}:
	default:
	}
}

// readReset reads the group's reset key (a newer generation becomes pending).
func (cn *Consumer) readReset(ctx context.Context, kv jetstream.KeyValue) error {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	e, err := kv.Get(ctx, wire.ResetKey(cn.topicID, cn.opts.Group))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		if IsPermission(err) {
			return err
		}
		return fmt.Errorf("%w: consumer group %s: read its reset: %v", wire.ErrUnavailable, cn.opts.Group, err)
	}
	var st wire.ResetState
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return fmt.Errorf("%w: consumer group %s: its reset key holds %.80q, not a reset", wire.ErrInternal, cn.opts.Group, e.Value())
	}
	cn.mu.Lock()
	cn.noteResetLocked(&st)
	cn.mu.Unlock()
	return nil
}

// applyReset follows a pending reset (spec/protocol.md §6.6, members): every partition stops
// (a record in hand finishes), the partitions-revoked callback runs, what the member derived
// from older positions (drained epochs, passed boundaries, keys-assigned steps) is forgotten,
// and each partition key it owned is moved to the reset's position without owner. Run's loop
// then rebalances under the new generation.
func (cn *Consumer) applyReset(ctx context.Context, kv jetstream.KeyValue) {
	cn.mu.Lock()
	st := cn.pending
	if st == nil {
		cn.mu.Unlock()
		return
	}
	ws := make([]*worker, 0, len(cn.owned))
	for _, w := range cn.owned {
		ws = append(ws, w)
	}
	cn.mu.Unlock()
	parallel(ws, func(w *worker) { w.stop() })
	var owned []int
	for _, w := range ws {
		if !w.lost() {
			owned = append(owned, w.partition)
		}
	}
	sort.Ints(owned)
	if err := cn.stateFlushAll(ctx, append([]int(nil), owned...)); err != nil {
		cn.failState(err)
	}
	cn.mu.Lock()
	cn.home = map[string]int{} // lost partitions' keys too: every key is loaded again after a reset
	cn.mu.Unlock()
	if len(owned) > 0 && cn.opts.OnRevoked != nil {
		cn.opts.OnRevoked(owned)
	}
	cn.mu.Lock()
	st = cn.pending // the newest one seen meanwhile
	cn.pending = nil
	cn.gen, cn.reset = st.Generation, st
	cn.stats.Resets++
	if !cn.opts.keepDrained {
		cn.drained = 0
	}
	cn.revoked = map[[2]int]bool{}
	cn.assigned = map[[3]int]bool{}
	for q := range cn.positions {
		delete(cn.positions, q)
	}
	for q := range cn.states {
		cn.positions[q] = cn.effectiveLocked(q)
	}
	for q := range st.Positions {
		cn.positions[q] = cn.effectiveLocked(q)
	}
	cn.owned = map[int]*worker{}
	cn.cond.Broadcast()
	cn.mu.Unlock()
	cn.opts.Logf("member %s: group %s: generation %d (reset to %s by %s)", cn.opts.Member, cn.opts.Group, st.Generation, st.To, st.By)
	parallel(ws, func(w *worker) {
		if w.lost() {
			return
		}
		w.mu.Lock()
		rev := w.rev
		w.mu.Unlock()
		var pos uint64
		if w.partition < len(st.Positions) {
			pos = st.Positions[w.partition]
		}
		octx, cancel := cn.op(ctx)
		defer cancel()
		if err := moveKey(octx, kv, wire.PartitionKey(cn.topicID, cn.opts.Group, w.partition), st.Generation, pos, rev); err != nil {
			cn.opts.Logf("member %s: partition %d: move to generation %d: %v (the next owner does it)", cn.opts.Member, w.partition, st.Generation, err)
		}
	})
}

// noteCommit records a revision this member wrote to the group's state.
func (cn *Consumer) noteCommit(rev uint64) {
	cn.mu.Lock()
	if rev > cn.commitRev {
		cn.commitRev, cn.commitAt = rev, time.Now()
	}
	cn.mu.Unlock()
}
