package client

// The Consumer (consumer.go): membership, assignment and taking partitions.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/natsver"
	"pctl.dev/pctl/internal/proto"
)

// requireConsumerServer refuses a server older than natsver.Min before a member writes a group
// key: the first write that creates a group is conditioned on g.created having no message
// (Nats-Expected-Last-Subject-Sequence-Subject), which a server older than 2.11 ignores, so
// there it would prove nothing (spec/protocol.md §6.1, "The server version a consumer needs").
func requireConsumerServer(nc *nats.Conn) error {
	return natsver.Require(nc, "pctl's consumer", "a member proves a new group absent with a conditioned write, spec/protocol.md §6.1")
}

// join opens the group's bucket, creates the group's keys if it is new, reads the descriptor
// and the group's generation: what a member does before its first assignment. Each step is
// idempotent, so a join that failed half-way is simply done again.
func (cn *Consumer) join(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := cn.kv(ctx)
	if err != nil {
		return nil, err
	}
	if err := cn.ensureGroup(ctx, kv); err != nil {
		return nil, err
	}
	cn.refresh(ctx)
	if err := cn.readReset(ctx, kv); err != nil {
		return nil, err
	}
	return kv, nil
}

// ensureGroup creates the group's state on first use: every existing partition's starting
// position (its last sequence, 0 from the beginning, the start of the current epoch), then the
// group marker. Whoever comes first wins each key; a partition created later has no state and is
// read from its first record. It reads the group's g.start (spec/protocol.md §10.5).
//
// A get that finds no g.created proves nothing (a lagging follower answers direct gets), so the
// create path starts with a write that proves it (spec/protocol.md §6.1, "Proving that the group
// does not exist"): g.assignor, stored only if g.created has no message before it in the stream's
// order. Refused: the group exists, and the member creates nothing.
func (cn *Consumer) ensureGroup(ctx context.Context, kv jetstream.KeyValue) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	marker := wire.GroupPrefix(cn.topicID, cn.opts.Group) + "g.created"
	cn.mu.Lock()
	desc := cn.desc // read before the proof below: every stream in it predates the group
	cn.mu.Unlock()
	if _, err := kv.Get(ctx, marker); err == nil {
		return cn.joinExisting(ctx, kv)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		// Not "no such group": the state could not be read (a leader election, a timeout).
		// Creating the group now could start it at the wrong place; the join is retried.
		if IsPermission(err) {
			return err
		}
		return fmt.Errorf("%w: consumer group %s: read its marker: %v", wire.ErrUnavailable, cn.opts.Group, err)
	}
	switch absent, err := cn.proveAbsent(ctx, marker); {
	case err != nil:
		return err
	case !absent:
		return cn.joinExisting(ctx, kv)
	}
	start := cn.opts.Start
	if start == StartDefault {
		switch {
		case cn.opts.FromBeginning:
			start = StartBeginning
		case desc.Compact != nil && desc.Backfilling() == nil:
			start = StartCurrentEpoch
		case desc.Compact != nil:
			start = StartBeginning
		default:
			start = StartNow
		}
	}
	if start == StartCurrentEpoch {
		if bf := desc.Backfilling(); bf != nil {
			cn.opts.Logf("member %s: group %s starts at the current epoch %d while its backfill runs: keys not yet copied arrive as their copies do", cn.opts.Member, cn.opts.Group, bf.Epoch)
		}
		body, _ := json.Marshal(wire.GroupStart{From: "current-epoch", Epoch: desc.Current().Epoch})
		if _, err := kv.Create(ctx, wire.StartKey(cn.topicID, cn.opts.Group), body); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: create group %s: %v", wire.ErrUnavailable, cn.opts.Group, err)
		}
	}
	for q := 0; q < desc.MaxPartitions(); q++ {
		var pos uint64
		switch start {
		case StartNow:
			s, err := cn.c.js.Stream(ctx, wire.StreamName(cn.topic, q))
			if err != nil {
				return fmt.Errorf("%w: partition %d: %v", wire.ErrUnavailable, q, err)
			}
			pos = s.CachedInfo().State.LastSeq
		case StartCurrentEpoch:
			pos = desc.CurrentEpochStart(q)
		}
		body, _ := json.Marshal(wire.PartitionState{Position: pos})
		if _, err := kv.Create(ctx, wire.PartitionKey(cn.topicID, cn.opts.Group, q), body); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: create group %s: %v", wire.ErrUnavailable, cn.opts.Group, err)
		}
	}
	if _, err := kv.Create(ctx, marker, []byte(time.Now().UTC().Format(time.RFC3339))); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%w: create group %s: %v", wire.ErrUnavailable, cn.opts.Group, err)
	}
	return cn.joinExisting(ctx, kv)
}

// proveAbsent writes the group's g.assignor on the condition that its g.created (marker) has no
// message (spec/protocol.md §6.1): true when it was stored (the group did not exist), false when
// JetStream refused it with "wrong last sequence" (g.created exists, or another member is
// creating the group). Any other failure is unavailable: the member creates nothing.
func (cn *Consumer) proveAbsent(ctx context.Context, marker string) (bool, error) {
	want := cn.opts.Assignor
	if want == "" {
		want = wire.AssignorModulo
	}
	body, _ := json.Marshal(wire.AssignorState{Assignor: want})
	if cn.co != nil {
		body, _ = json.Marshal(coAssignorState{Assignor: AssignorCopartitioned, Topics: cn.co.topics})
	}
	subj := "$KV." + wire.GroupsBucket + "."
	_, err := cn.c.js.Publish(ctx, subj+wire.AssignorKey(cn.topicID, cn.opts.Group), body,
		jetstream.WithExpectLastSequenceForSubject(0, subj+marker))
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return false, nil
	case IsPermission(err):
		return false, err
	}
	return false, fmt.Errorf("%w: consumer group %s: could not learn whether it exists (its assignor written on the condition that it does not: %v): retry the join", wire.ErrUnavailable, cn.opts.Group, err)
}

// joinExisting reads the keys of a group that exists (or is being created by another member) and
// takes its start and assignor.
func (cn *Consumer) joinExisting(ctx context.Context, kv jetstream.KeyValue) error {
	gk, err := cn.readGroupKeys(ctx, kv)
	if err != nil {
		return err
	}
	if err := cn.readStart(gk); err != nil {
		return err
	}
	return cn.joinAssignor(gk)
}

// groupKeys is what a member reads of its group's own keys at join: g.start and g.assignor
// (nil: the key does not exist), read from a state that holds g.created.
type groupKeys struct {
	start, assignor []byte
}

// readGroupKeys reads g.created, g.start and g.assignor from one replica's state (spec/protocol.md
// §6.1, "Reading the group's keys at join"): the initial values of a watch of the group's g.*
// keys. A direct get may be answered by a follower that lags, and a "not found" from it proves
// nothing; the creator writes g.created last, so a state that holds it holds the others if they
// exist. Without g.created among the initial values it reads again, with a back-off.
func (cn *Consumer) readGroupKeys(ctx context.Context, kv jetstream.KeyValue) (groupKeys, error) {
	prefix := wire.GroupPrefix(cn.topicID, cn.opts.Group)
	wait := 20 * time.Millisecond
	for {
		vals, err := watchInitial(ctx, kv, prefix+"g.*")
		if err != nil {
			if IsPermission(err) {
				return groupKeys{}, err
			}
			if ctx.Err() != nil {
				// Both: unavailable (the join's own deadline, ensureGroup's 30 s, is retried by
				// Run while its context lasts) and the context's error (a caller that stopped
				// the member must see context.Canceled: a member stopped while it joined was
				// reported as failed, chaos seed 29; without "unavailable", a join that ran out
				// of its 30 s ended Run, and the live group of seed 59 delivered nothing).
				return groupKeys{}, fmt.Errorf("%w: consumer group %s: read its keys: %w", wire.ErrUnavailable, cn.opts.Group, ctx.Err())
			}
			return groupKeys{}, fmt.Errorf("%w: consumer group %s: read its keys: %v", wire.ErrUnavailable, cn.opts.Group, err)
		}
		if _, ok := vals[prefix+"g.created"]; ok {
			return groupKeys{start: vals[wire.StartKey(cn.topicID, cn.opts.Group)], assignor: vals[wire.AssignorKey(cn.topicID, cn.opts.Group)]}, nil
		}
		select {
		case <-ctx.Done():
			return groupKeys{}, fmt.Errorf("%w: consumer group %s: its g.created key exists but no server's state that was read holds it yet: %w", wire.ErrUnavailable, cn.opts.Group, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// watchInitial returns the latest value of every key matching pattern that a watch's initial
// values hold (deleted and purged keys left out): one server's state, read in one consumer.
func watchInitial(ctx context.Context, kv jetstream.KeyValue, pattern string) (map[string][]byte, error) {
	w, err := kv.Watch(ctx, pattern)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	vals := map[string][]byte{}
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("the watch ended before its initial values")
			}
			if e == nil {
				return vals, nil
			}
			if e.Operation() == jetstream.KeyValuePut {
				vals[e.Key()] = e.Value()
			} else {
				delete(vals, e.Key())
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// readStart takes the group's g.start: the epoch it started reading the current epoch at.
func (cn *Consumer) readStart(gk groupKeys) error {
	if gk.start == nil {
		return nil
	}
	var st wire.GroupStart
	if json.Unmarshal(gk.start, &st) != nil || st.Epoch < 1 {
		return fmt.Errorf("%w: consumer group %s: its start key holds %.80q", wire.ErrInternal, cn.opts.Group, gk.start)
	}
	cn.mu.Lock()
	cn.startEpoch = st.Epoch
	cn.mu.Unlock()
	return nil
}

// joinAssignor reads the group's assignor (spec/protocol.md §6.1) and refuses to join a group
// whose assignor this client does not implement, or that differs from the one asked for.
func (cn *Consumer) joinAssignor(gk groupKeys) error {
	got := wire.AssignorModulo // a group without the key (older clients, other SDKs, resets)
	if gk.assignor != nil {
		var st coAssignorState
		if json.Unmarshal(gk.assignor, &st) != nil || st.Assignor == "" {
			return fmt.Errorf("%w: group %s of topic %s has an assignor record this client cannot read (%q): use a client that understands it, or another group",
				wire.ErrUnsupported, cn.opts.Group, cn.topic, gk.assignor)
		}
		got = st.Assignor
		if err := cn.coJoin(st); err != nil {
			return err
		}
	}
	if got != AssignorCopartitioned && cn.co != nil {
		return cn.coJoin(coAssignorState{Assignor: got})
	}
	if !knownAssignor(got) {
		return fmt.Errorf("%w: group %s of topic %s uses the assignor %q, which this client does not implement (it knows %s and %s): use a client that implements it, or another group",
			wire.ErrUnsupported, cn.opts.Group, cn.topic, got, wire.AssignorModulo, wire.AssignorSticky)
	}
	if cn.opts.Assignor != "" && cn.opts.Assignor != got {
		return fmt.Errorf("%w: group %s of topic %s uses the assignor %q, not the %q asked for: a group keeps the assignor it was created with; use another group, or leave Assignor empty to follow the group's",
			wire.ErrConflict, cn.opts.Group, cn.topic, got, cn.opts.Assignor)
	}
	cn.mu.Lock()
	cn.assignor = got
	cn.mu.Unlock()
	return nil
}

func (cn *Consumer) refresh(ctx context.Context) {
	t, _, err := cn.c.Topic(ctx, cn.topic)
	if err != nil {
		return
	}
	cn.mu.Lock()
	if t.ID == cn.topicID && len(t.Epochs) >= len(cn.desc.Epochs) {
		cn.desc = t
	}
	cn.cond.Broadcast()
	cn.mu.Unlock()
}

func (cn *Consumer) heartbeat(ctx context.Context, kv jetstream.KeyValue) error {
	cn.mu.Lock()
	owns := make([]int, 0, len(cn.owned))
	for q := range cn.owned {
		owns = append(owns, q)
	}
	gated, waited := cn.stats.Gated, cn.stats.TotalWait.Milliseconds() // shown by status pages
	cn.mu.Unlock()
	sort.Ints(owns)
	body, _ := json.Marshal(wire.MemberState{ID: cn.opts.Member, Heartbeat: time.Now().UTC(), Owns: owns, Gated: gated, GateWaitMS: waited})
	ctx, cancel := cn.op(ctx)
	defer cancel()
	if _, err := kv.Put(ctx, wire.MemberKey(cn.topicID, cn.opts.Group, cn.opts.Member), body); err != nil {
		if IsPermission(err) {
			return err
		}
		return nil // transient: the next heartbeat retries
	}
	return nil
}

// members returns the live members, sorted, and whether every member key could be read (a
// sticky leader records no assignment from a partial view, assign_group.go).
func (cn *Consumer) members(ctx context.Context, kv jetstream.KeyValue) ([]string, bool) {
	return cn.membersSeen(ctx, kv, &cn.memberKeys)
}

// seenKeys is a set of KV keys seen live at earlier listings, safe for concurrent use (the lock
// is never held across a read of the bucket).
type seenKeys struct {
	mu sync.Mutex
	m  map[string]bool
}

func (s *seenKeys) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.m))
	for k := range s.m {
		out = append(out, k)
	}
	return out
}

func (s *seenKeys) set(k string, live bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !live {
		delete(s.m, k)
		return
	}
	if s.m == nil {
		s.m = map[string]bool{}
	}
	s.m[k] = true
}

// membersSeen is members, where seen (when not nil) holds the member keys live at earlier calls,
// and is updated. A listing of the bucket can miss a key re-put while it runs (nats.go's watcher
// counts the messages pending when it starts, and a re-put deletes the one it counted), so a key
// seen before and missing from the listing is read directly. Without it a missed member makes a
// modulo member want another member's partitions and give up some of its own for a heartbeat,
// and a standby warm the partitions of a group without that member (§6.10); a sticky record
// changes only for two listings that agree (assign_group.go), which the direct read makes
// faster to reach.
func (cn *Consumer) membersSeen(ctx context.Context, kv jetstream.KeyValue, seen *seenKeys) ([]string, bool) {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	prefix := wire.GroupPrefix(cn.topicID, cn.opts.Group) + "m."
	lister, err := kv.ListKeysFiltered(ctx, prefix+"*")
	if err != nil {
		return []string{cn.opts.Member}, false
	}
	keys := []string{}
	listed := map[string]bool{}
	for k := range lister.Keys() {
		keys = append(keys, k)
		listed[k] = true
	}
	if seen != nil {
		for _, k := range seen.keys() {
			if !listed[k] {
				keys = append(keys, k)
			}
		}
	}
	complete := true
	var out []string
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			complete = complete && errors.Is(err, jetstream.ErrKeyNotFound)
			if seen != nil && errors.Is(err, jetstream.ErrKeyNotFound) {
				seen.set(k, false) // deleted: the member left
			}
			continue
		}
		live := time.Since(e.Created()) < cn.opts.SessionTimeout
		if live {
			out = append(out, k[len(prefix):])
		}
		if seen != nil {
			seen.set(k, live) // an expired key is gone (§6.2)
		}
	}
	found := false
	for _, m := range out {
		found = found || m == cn.opts.Member
	}
	if !found {
		out = append(out, cn.opts.Member)
	}
	sort.Strings(out)
	return out, complete
}

// view returns the member's descriptor and its assignable partitions (the current epoch's, plus
// partitions shrunk away that the group has not drained to their last boundary), read together: a
// rebalance compares, computes and writes an assignment record from this one view, never from a
// descriptor that arrives while it waits on the group bucket (spec/protocol.md §6.2.1, "One view
// per rebalance").
func (cn *Consumer) view() (*wire.Topic, []int) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.desc, proto.Assignable(cn.desc, cn.positionLocked)
}

// position is the group's position of partition q as the member knows it.
func (cn *Consumer) position(q int) uint64 {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.positions[q]
}

// positionLocked is the group's position of partition q as the member knows it (cn.mu held).
func (cn *Consumer) positionLocked(q int) uint64 { return cn.positions[q] }

func (cn *Consumer) rebalance(ctx context.Context, kv jetstream.KeyValue, h Handler, fail func(error)) {
	members, complete := cn.members(ctx, kv)
	desc, parts := cn.view()
	want, err := cn.wanted(ctx, kv, members, complete, desc, parts)
	if err != nil {
		fail(err)
		return
	}
	// Give up what is no longer ours. (Lock order: a worker's mu before cn.mu, never the reverse:
	// so collect the workers first, then ask them.)
	cn.mu.Lock()
	cn.meant = want
	owned := make([]*worker, 0, len(cn.owned))
	for _, w := range cn.owned {
		owned = append(owned, w)
	}
	cn.mu.Unlock()
	var drop []*worker
	for _, w := range owned {
		if !want[w.partition] || w.lost() {
			drop = append(drop, w)
		}
	}
	var revoked []int
	parallel(drop, func(w *worker) {
		w.stop()
		if w.lost() {
			// Another member owns it now and loads its keys itself: what this member holds of
			// them may be stale, and is loaded again if the partition comes back (state.go).
			cn.stateForget(w.partition)
		}
		if !w.lost() {
			// A partition given up at an epoch's boundary owes its keys-revoked step before
			// the release (spec/protocol.md §6.5): a retired partition drained to its final
			// boundary is read by no one after this.
			w.passBoundaries(ctx, w.position())
			if err := cn.statePartition(ctx, w.partition); err != nil {
				if ctx.Err() == nil {
					fail(err) // not released: its lease expires, the next owner loads what is durable
				}
				return
			}
			cn.release(ctx, kv, w)
		}
	})
	for _, w := range drop {
		cn.mu.Lock()
		delete(cn.owned, w.partition)
		cn.mu.Unlock()
		revoked = append(revoked, w.partition)
	}
	if len(revoked) > 0 && cn.opts.OnRevoked != nil {
		sort.Ints(revoked)
		cn.opts.OnRevoked(revoked)
	}
	// Take what is ours and free (not while a reset is pending: the next round applies it),
	// parents first (parentfirst.go): the partitions whose next records are of the oldest epoch,
	// together, then the next epoch's.
	todo := make([]int, 0, len(want))
	for q := range want {
		todo = append(todo, q)
	}
	// Only an order (the gate decides what is read), so from the newest descriptor: it holds every
	// partition of the rebalance's view, and may know boundaries the view does not.
	cn.mu.Lock()
	newest := cn.desc
	cn.mu.Unlock()
	var assigned []int
	var amu sync.Mutex
	for _, class := range parentFirst(newest, todo, cn.position) {
		var wg sync.WaitGroup
		for _, q := range class {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if cn.take(ctx, kv, q, h, fail) {
					amu.Lock()
					assigned = append(assigned, q)
					amu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	if len(assigned) > 0 && cn.opts.OnAssigned != nil {
		sort.Ints(assigned)
		cn.opts.OnAssigned(assigned)
	}
}

// take acquires partition q, when it is free and no reset is pending, and starts its worker.
func (cn *Consumer) take(ctx context.Context, kv jetstream.KeyValue, q int, h Handler, fail func(error)) bool {
	cn.mu.Lock()
	_, have := cn.owned[q]
	pending := cn.pending != nil
	cn.mu.Unlock()
	if have || pending {
		return false
	}
	before := time.Now()
	pos, rev, gen, ok := cn.acquire(ctx, kv, q)
	if !ok {
		return false
	}
	w := newWorker(cn, q, pos, rev)
	w.gen = gen
	w.leaseUntil = before.Add(cn.opts.SessionTimeout)
	cn.mu.Lock()
	if st := cn.pending; cn.gen != gen || st != nil {
		// A reset came meanwhile: move the key we just wrote to it at once (no owner), so
		// that no one waits for this lease.
		cn.mu.Unlock()
		if st != nil {
			var to uint64
			if q < len(st.Positions) {
				to = st.Positions[q]
			}
			octx, cancel := cn.op(ctx)
			_ = moveKey(octx, kv, wire.PartitionKey(cn.topicID, cn.opts.Group, q), st.Generation, to, rev)
			cancel()
		}
		return false
	}
	cn.owned[q] = w
	cn.noteStateLocked(q, rev, wire.PartitionState{Owner: cn.opts.Member, LeaseEnd: w.leaseUntil.UnixMilli(), Position: pos, Generation: gen})
	cn.mu.Unlock()
	go w.run(ctx, h, fail)
	return true
}
