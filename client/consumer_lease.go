package client

// The Consumer (consumer.go): leases, commits and releases of partitions.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/proto"
)

func (cn *Consumer) leaseEnd() int64 {
	return time.Now().Add(cn.opts.SessionTimeout).UnixMilli()
}

// acquire takes partition q's lease if it is free, expired or already ours, under the member's
// generation (spec/protocol.md §6.6): a key written under an older one starts at the reset's
// position; a key of a newer one makes the member read the group's reset first. It returns the
// start position, the key's revision and the generation.
func (cn *Consumer) acquire(ctx context.Context, kv jetstream.KeyValue, q int) (uint64, uint64, uint64, bool) {
	// Not cancelled with the member: a write the server applies must not be reported as failed,
	// or the partition would stay leased to a member that stopped (it could not release it).
	ctx, cancel := cn.op(context.WithoutCancel(ctx))
	defer cancel()
	key := wire.PartitionKey(cn.topicID, cn.opts.Group, q)
	cn.mu.Lock()
	gen := cn.gen
	var resetPos uint64
	if cn.reset != nil && q < len(cn.reset.Positions) {
		resetPos = cn.reset.Positions[q]
	}
	cn.mu.Unlock()
	var ps wire.PartitionState
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// A partition created after the group is read from its first record; after a reset that
		// did not get to write this key, from the reset's position (what the gates take as its
		// effective position too).
		body, _ := json.Marshal(wire.PartitionState{Owner: cn.opts.Member, LeaseEnd: cn.leaseEnd(), Position: resetPos, Generation: gen})
		r, err := kv.Create(ctx, key, body)
		if err != nil {
			return 0, 0, 0, false
		}
		cn.opts.Logf("member %s: partition %d: acquired at %d (new key, generation %d)", cn.opts.Member, q, resetPos, gen)
		return resetPos, r, gen, true
	case err != nil:
		return 0, 0, 0, false
	}
	if json.Unmarshal(e.Value(), &ps) != nil {
		return 0, 0, 0, false
	}
	rev := e.Revision()
	if ps.Generation > gen {
		// A reset this member has not seen yet: read it; the next round applies it.
		_ = cn.readReset(ctx, kv)
		return 0, 0, 0, false
	}
	if !proto.MayAcquire(cn.opts.Member, ps.Owner, ps.LeaseEnd, time.Now().UnixMilli(), proto.MaxClockSkew(cn.opts.SessionTimeout)) {
		return 0, 0, 0, false // someone else's, still leased (a lease of an older generation too)
	}
	if ps.Generation < gen {
		ps.Position = resetPos // written before the reset reached it
	}
	prev, prevEnd := ps.Owner, ps.LeaseEnd
	ps.Owner, ps.LeaseEnd, ps.Generation = cn.opts.Member, cn.leaseEnd(), gen
	body, _ := json.Marshal(ps)
	r, err := kv.Update(ctx, key, body, rev)
	if err != nil {
		// Another member's write came first (or the write's fate is unknown: the next round
		// reads the key again and finds the lease ours or not).
		return 0, 0, 0, false
	}
	// Logged once the compare-and-set succeeded: two members that read the same free key both
	// try, and only one of them acquires it.
	if prev != "" && prev != cn.opts.Member {
		cn.opts.Logf("member %s: partition %d: lease of %s expired %v ago; took over at %d", cn.opts.Member, q, prev, time.Since(time.UnixMilli(prevEnd)).Round(time.Millisecond), ps.Position)
	} else {
		cn.opts.Logf("member %s: partition %d: acquired at %d (generation %d)", cn.opts.Member, q, ps.Position, gen)
	}
	cn.hookLease(q, true) // hooks.go
	return ps.Position, r, gen, true
}

// commitAll writes every owned partition's delivered position (renewing its lease when a third
// of it is used up) by compare-and-set, the partitions in parallel; a failed CAS means the
// partition was taken over: its worker stops.
func (cn *Consumer) commitAll(ctx context.Context, kv jetstream.KeyValue, renew bool) {
	cn.mu.Lock()
	ws := make([]*worker, 0, len(cn.owned))
	for _, w := range cn.owned {
		ws = append(ws, w)
	}
	cn.mu.Unlock()
	parallel(ws, func(w *worker) { w.commit(ctx, kv, renew) })
}

// parallel runs f for every worker, at most 32 at a time, and waits for all.
func parallel(ws []*worker, f func(*worker)) {
	if len(ws) == 1 {
		f(ws[0])
		return
	}
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(w)
		}()
	}
	wg.Wait()
}

// release hands a stopped worker's partition back: the final position, no owner.
func (cn *Consumer) release(ctx context.Context, kv jetstream.KeyValue, w *worker) {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	select {
	case w.commitSem <- struct{}{}: // no commit of this partition runs meanwhile
	case <-ctx.Done():
		return
	}
	defer func() { <-w.commitSem }()
	w.mu.Lock()
	if w.isLost {
		w.mu.Unlock()
		return
	}
	pos, rev, gen, unsure := w.delivered, w.rev, w.gen, w.unsure
	w.mu.Unlock()
	if cn.staleGen(gen) {
		return // a reset came: applyReset (or the next owner) moves the key
	}
	body, _ := json.Marshal(wire.PartitionState{Position: pos, Generation: gen})
	key := wire.PartitionKey(cn.topicID, cn.opts.Group, w.partition)
	newRev, err := kv.Update(ctx, key, body, rev)
	if err != nil && (errors.Is(err, jetstream.ErrKeyExists) || isWrongSeq(err)) && unsure != nil {
		// The last commit's answer was lost (the worker was stopped while it ran): if the key
		// holds exactly what it wrote, it was ours, and the release goes on from its revision.
		// Otherwise the partition stayed leased to this member until its lease expired, and the
		// member it went to waited for that (seen when a member that took every partition
		// before the others joined gave half of them back).
		if e, gerr := kv.Get(ctx, key); gerr == nil && bytes.Equal(e.Value(), unsure.body) {
			newRev, err = kv.Update(ctx, key, body, e.Revision())
		}
	}
	if err == nil {
		cn.setPosition(w.partition, newRev, wire.PartitionState{Position: pos, Generation: gen})
		cn.noteCommit(newRev)
		cn.hookLease(w.partition, false) // hooks.go
	}
}

// staleGen reports whether generation gen is no longer the member's (a reset is pending or
// applied): nothing more is committed or delivered under it.
func (cn *Consumer) staleGen(gen uint64) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.pending != nil || cn.gen != gen
}

func (cn *Consumer) shutdown(kv jetstream.KeyValue) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cn.mu.Lock()
	ws := make([]*worker, 0, len(cn.owned))
	for _, w := range cn.owned {
		ws = append(ws, w)
	}
	cn.owned = map[int]*worker{}
	cn.cond.Broadcast()
	cn.mu.Unlock()
	var qs []int
	parallel(ws, func(w *worker) {
		w.stop()
		if !w.lost() {
			if err := cn.statePartition(ctx, w.partition); err != nil {
				cn.opts.Logf("member %s: %v (partition %d not released: its lease expires)", cn.opts.Member, err, w.partition)
				return
			}
			cn.release(ctx, kv, w)
		}
	})
	for _, w := range ws {
		qs = append(qs, w.partition)
	}
	_ = kv.Delete(ctx, wire.MemberKey(cn.topicID, cn.opts.Group, cn.opts.Member))
	if len(qs) > 0 && cn.opts.OnRevoked != nil {
		sort.Ints(qs)
		cn.opts.OnRevoked(qs)
	}
}

func (cn *Consumer) setPosition(q int, rev uint64, ps wire.PartitionState) {
	cn.mu.Lock()
	cn.noteStateLocked(q, rev, ps)
	cn.cond.Broadcast()
	cn.mu.Unlock()
}

// unsureWrite is a write of a partition's state whose outcome is unknown: its body, the position
// it commits and the lease end it gives (by our clock, from before the write).
type unsureWrite struct {
	body  []byte
	pos   uint64
	until time.Time
}

// isWrongSeq reports whether a compare-and-set write of a key lost: JetStream's "wrong last
// sequence", 10071 on a stream of one replica and 10164 on a replicated one (the group bucket on a
// cluster), or nats.go's ErrKeyRevisionMismatch, which its Update wraps either in.
func isWrongSeq(err error) bool {
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
