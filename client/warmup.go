package client

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// This file is warm-up before cut-over (spec/protocol.md §6.10): a member that joins a group of
// stateful members first builds the state of the keys it will own, as a standby that takes no
// partition, and joins when what is left to read is under a threshold.

// WarmUp configures a member's warm-up before it joins its group (ConsumerOptions.WarmUp).
type WarmUp struct {
	// Warm brings the member's state of the keys of partitions (those it will own once it joins,
	// computed from the group's current assignment with this member added) up to date without
	// delivering anything, and returns its lag: how many records of that state it has not read.
	// It is called about once a heartbeat, with the partitions of the moment, until the lag is at
	// most MaxLag; an error stops Run. Required.
	Warm func(ctx context.Context, partitions []int) (lag int64, err error)
	// MaxLag is the lag under which the member joins. Default 10000 (KIP-441's).
	MaxLag int64
	// MaxConcurrent is how many members of the group warm up at once; the others wait their
	// turn. Default 2.
	MaxConcurrent int
}

// warmState is the value of a warming member's w. key.
type warmState struct {
	ID        string    `json:"id"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	Lag       int64     `json:"lag"`
	Warming   bool      `json:"warming"`
}

func warmKey(topicID, group, member string) string {
	return topicID + "." + group + ".w." + member
}

// WarmUpStats says what a member's warm-up did.
type WarmUpStats struct {
	Waited   time.Duration // in the queue, before a slot was free
	Warmed   time.Duration // warming, until the lag was under the threshold
	Rounds   int           // calls of Warm
	Lag      int64         // the last lag reported
	Skipped  bool          // no live member to warm from: joined at once
	Finished time.Time     // when it joined
}

// warmUp runs the standby phase of §6.10 and returns when the member may join.
func (cn *Consumer) warmUp(ctx context.Context, kv jetstream.KeyValue) error {
	wu := cn.opts.WarmUp
	maxLag, slots := wu.MaxLag, wu.MaxConcurrent
	if maxLag <= 0 {
		maxLag = 10000
	}
	if slots <= 0 {
		slots = 2
	}
	key := warmKey(cn.topicID, cn.opts.Group, cn.opts.Member)
	st := warmState{ID: cn.opts.Member, Started: time.Now().UTC()}
	begin := time.Now()
	var warmFrom time.Time
	defer func() {
		octx, cancel := cn.op(context.WithoutCancel(ctx))
		_ = kv.Delete(octx, key)
		cancel()
	}()
	ticker := time.NewTicker(cn.opts.Heartbeat)
	defer ticker.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-ticker.C:
			}
		}
		cn.refresh(ctx)
		members, complete := cn.liveMembers(ctx, kv)
		if complete && len(members) == 0 {
			cn.opts.Logf("member %s: group %s has no live member to warm up from: joining", cn.opts.Member, cn.opts.Group)
			cn.mu.Lock()
			cn.warm = WarmUpStats{Skipped: true, Finished: time.Now()}
			cn.mu.Unlock()
			return nil
		}
		st.Heartbeat = time.Now().UTC()
		st.Warming = cn.warmRank(ctx, kv, st) < slots
		body, _ := json.Marshal(st)
		octx, cancel := cn.op(ctx)
		_, err := kv.Put(octx, key, body)
		cancel()
		if err != nil && IsPermission(err) {
			return err
		}
		if !st.Warming {
			continue
		}
		if warmFrom.IsZero() {
			warmFrom = time.Now()
			cn.opts.Logf("member %s: warming up before joining group %s (waited %v for a slot)", cn.opts.Member, cn.opts.Group, warmFrom.Sub(begin).Round(time.Millisecond))
		}
		parts, err := cn.prospective(ctx, kv, members)
		if err != nil {
			cn.opts.Logf("member %s: warm-up: the assignment it would join: %v (again at the next heartbeat)", cn.opts.Member, err)
			continue
		}
		lag, err := wu.Warm(ctx, parts)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("warm-up of member %s (partitions %v): %w", cn.opts.Member, parts, err)
		}
		st.Lag = lag
		cn.mu.Lock()
		cn.warm.Rounds++
		cn.warm.Lag = lag
		cn.mu.Unlock()
		if lag <= maxLag {
			cn.mu.Lock()
			cn.warm.Waited, cn.warm.Warmed, cn.warm.Finished = warmFrom.Sub(begin), time.Since(warmFrom), time.Now()
			cn.mu.Unlock()
			cn.opts.Logf("member %s: warmed up partitions %v (lag %d <= %d): joining group %s", cn.opts.Member, parts, lag, maxLag, cn.opts.Group)
			return nil
		}
	}
}

// WarmUpStats returns what the member's warm-up did (zero before it finished, or without one).
func (cn *Consumer) WarmUpStats() WarmUpStats {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.warm
}

// liveMembers is members() without this member's own (it has no member key while it warms).
func (cn *Consumer) liveMembers(ctx context.Context, kv jetstream.KeyValue) ([]string, bool) {
	all, complete := cn.members(ctx, kv)
	out := all[:0:0]
	for _, m := range all {
		if m != cn.opts.Member {
			out = append(out, m)
		}
	}
	return out, complete
}

// warmRank is this member's place in the queue of live warming members (§6.10, step 2).
func (cn *Consumer) warmRank(ctx context.Context, kv jetstream.KeyValue, me warmState) int {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	prefix := wire.GroupPrefix(cn.topicID, cn.opts.Group) + "w."
	lister, err := kv.ListKeysFiltered(ctx, prefix+"*")
	if err != nil {
		return 0
	}
	queue := []warmState{me}
	for k := range lister.Keys() {
		if k == prefix+cn.opts.Member {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil || time.Since(e.Created()) >= cn.opts.SessionTimeout {
			continue
		}
		var ws warmState
		if json.Unmarshal(e.Value(), &ws) == nil && ws.ID != "" {
			queue = append(queue, ws)
		}
	}
	sort.Slice(queue, func(i, j int) bool {
		if !queue[i].Started.Equal(queue[j].Started) {
			return queue[i].Started.Before(queue[j].Started)
		}
		return queue[i].ID < queue[j].ID
	})
	for i, ws := range queue {
		if ws.ID == cn.opts.Member {
			return i
		}
	}
	return 0
}

// prospective is the partitions this member would own if it joined the live members now (§6.10,
// step 3).
func (cn *Consumer) prospective(ctx context.Context, kv jetstream.KeyValue, live []string) ([]int, error) {
	members := append(append([]string(nil), live...), cn.opts.Member)
	sort.Strings(members)
	parts := cn.assignable()
	cn.mu.Lock()
	assignor, desc := cn.assignor, cn.desc
	cn.mu.Unlock()
	var a *wire.Assignment
	if assignor == wire.AssignorSticky || assignor == AssignorCopartitioned {
		rec, _, err := cn.readAssignment(ctx, kv)
		if err != nil {
			return nil, err
		}
		if rec != nil && desc.Epoch(rec.Epoch) == nil {
			return nil, fmt.Errorf("%w: the group's record is of epoch %d, newer than the descriptor read", wire.ErrUnavailable, rec.Epoch)
		}
		if a, err = NextAssignment(rec, members, parts, desc.Current().Epoch, cn.c.TopicPlacer(ctx, desc), time.Now()); err != nil {
			return nil, err
		}
	} else {
		a = ModuloAssignment(members, parts, desc.Current().Epoch)
	}
	var out []int
	for _, q := range a.Partitions {
		if a.Owner(q) == cn.opts.Member {
			out = append(out, q)
		}
	}
	return out, nil
}
