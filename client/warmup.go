package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
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
	// most MaxLag; an error stops Run.
	Warm func(ctx context.Context, partitions []int) (lag int64, err error)
	// WarmTopics, if set, is called instead of Warm with the partitions of every topic the member
	// will own, by topic: for a member of a co-partitioned group (Client.NewCoConsumer) its lead
	// topic's and, for each follower topic, those §6.2.3 derives from that lead record (a
	// co-partitioned changelog is then warmed partition by partition); for a Consumer, its one
	// topic's. Warm or WarmTopics is required; a CoConsumer with Warm alone gets the lead's.
	WarmTopics func(ctx context.Context, partitions map[string][]int) (lag int64, err error)
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
	// SessionMS is the writer's session timeout: the key is gone once it is older (§6.10).
	SessionMS int64 `json:"session_ms,omitempty"`
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
	var stMu sync.Mutex // st, shared with the heartbeat that runs while Warm does
	st := warmState{ID: cn.opts.Member, Started: time.Now().UTC(), SessionMS: cn.opts.SessionTimeout.Milliseconds()}
	put := func(ctx context.Context) error {
		stMu.Lock()
		st.Heartbeat = time.Now().UTC()
		body, _ := json.Marshal(st)
		stMu.Unlock()
		octx, cancel := cn.op(ctx)
		defer cancel()
		_, err := kv.Put(octx, key, body)
		return err
	}
	begin := time.Now()
	var warmFrom time.Time
	defer func() {
		octx, cancel := cn.op(context.WithoutCancel(ctx))
		_ = kv.Delete(octx, key)
		cancel()
	}()
	seen := map[string]bool{} // w. keys live at an earlier heartbeat
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
		live, complete := cn.liveMembers(ctx, kv)
		if complete && len(live) == 0 {
			cn.opts.Logf("member %s: group %s has no live member to warm up from: joining", cn.opts.Member, cn.opts.Group)
			cn.mu.Lock()
			cn.warm = WarmUpStats{Skipped: true, Finished: time.Now()}
			cn.mu.Unlock()
			return nil
		}
		stMu.Lock()
		me := st
		stMu.Unlock()
		// The first heartbeat only announces the standby: it warms after it has read the queue
		// twice (a listing can miss a key re-put while it runs; warmRank reads the keys an
		// earlier listing had directly).
		warming := cn.warmRank(ctx, kv, me, seen) < slots && !first
		stMu.Lock()
		st.Warming = warming
		stMu.Unlock()
		if err := put(ctx); err != nil && IsPermission(err) {
			return err
		}
		if !warming {
			continue
		}
		if warmFrom.IsZero() {
			warmFrom = time.Now()
			cn.opts.Logf("member %s: warming up before joining group %s (waited %v for a slot)", cn.opts.Member, cn.opts.Group, warmFrom.Sub(begin).Round(time.Millisecond))
		}
		parts, byTopic, err := cn.prospectiveAll(ctx, kv, live)
		if err != nil {
			cn.opts.Logf("member %s: warm-up: the assignment it would join: %v (again at the next heartbeat)", cn.opts.Member, err)
			continue
		}
		// The w. key is re-put every heartbeat while Warm runs, however long one call takes (a
		// first call reads the whole history): a standby that only reads is alive, and must
		// neither lose its slot nor look crashed to the queue and to operators (§6.10, step 1).
		bctx, stopBeat := context.WithCancel(ctx)
		beatDone := make(chan struct{})
		go func() {
			defer close(beatDone)
			t := time.NewTicker(cn.opts.Heartbeat)
			defer t.Stop()
			for {
				select {
				case <-bctx.Done():
					return
				case <-t.C:
					_ = put(bctx)
				}
			}
		}()
		var lag int64
		if wu.WarmTopics != nil {
			lag, err = wu.WarmTopics(ctx, byTopic)
		} else {
			lag, err = wu.Warm(ctx, parts)
		}
		stopBeat()
		<-beatDone
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("warm-up of member %s (partitions %v): %w", cn.opts.Member, byTopic, err)
		}
		stMu.Lock()
		st.Lag = lag
		stMu.Unlock()
		cn.mu.Lock()
		cn.warm.Rounds++
		cn.warm.Lag = lag
		cn.mu.Unlock()
		if lag <= maxLag {
			cn.mu.Lock()
			cn.warm.Waited, cn.warm.Warmed, cn.warm.Finished = warmFrom.Sub(begin), time.Since(warmFrom), time.Now()
			cn.mu.Unlock()
			cn.opts.Logf("member %s: warmed up partitions %v (lag %d <= %d): joining group %s", cn.opts.Member, byTopic, lag, maxLag, cn.opts.Group)
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

// warmRank is this member's place in the queue of live warming members (§6.10, step 2). seen
// holds the w. keys live at earlier calls, and is updated: a key listing of the bucket can miss a
// key that is re-put while it runs (nats.go's watcher counts the messages pending when it
// starts), so a key seen before and missing from the listing is read directly.
func (cn *Consumer) warmRank(ctx context.Context, kv jetstream.KeyValue, me warmState, seen map[string]bool) int {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	prefix := wire.GroupPrefix(cn.topicID, cn.opts.Group) + "w."
	lister, err := kv.ListKeysFiltered(ctx, prefix+"*")
	if err != nil {
		return 0
	}
	keys := map[string]bool{}
	for k := range lister.Keys() {
		keys[k] = true
	}
	for k := range seen {
		keys[k] = true
	}
	queue := []warmState{me}
	for k := range keys {
		if k == prefix+cn.opts.Member {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil || time.Since(e.Created()) >= cn.opts.SessionTimeout {
			if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
				delete(seen, k) // gone (§6.10, step 1), or deleted: it joined or left
			}
			continue
		}
		var ws warmState
		if json.Unmarshal(e.Value(), &ws) == nil && ws.ID != "" {
			seen[k] = true
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

// prospectiveAll is prospective for every topic of the member (§6.10, step 3): its own, and for
// the lead of a co-partitioned group each follower's partitions in the record §6.2.3 derives
// from the lead record the member would join. parts is its own topic's.
func (cn *Consumer) prospectiveAll(ctx context.Context, kv jetstream.KeyValue, live []string) (parts []int, byTopic map[string][]int, err error) {
	a, err := cn.prospective(ctx, kv, live)
	if err != nil {
		return nil, nil, err
	}
	parts = ownedIn(a, cn.opts.Member)
	byTopic = map[string][]int{cn.topic: parts}
	if cn.co == nil {
		return parts, byTopic, nil
	}
	cn.mu.Lock()
	ldesc := cn.desc
	cn.mu.Unlock()
	for _, f := range cn.co.all {
		if f == cn {
			continue
		}
		f.refresh(ctx)
		frec, _, err := f.readAssignment(ctx, kv)
		if err != nil {
			return nil, nil, fmt.Errorf("topic %s: %w", f.topic, err)
		}
		fdesc, fparts := f.view()
		if frec != nil && fdesc.Epoch(frec.Epoch) == nil {
			return nil, nil, fmt.Errorf("%w: topic %s: the group's record is of epoch %d, newer than the descriptor read", wire.ErrUnavailable, f.topic, frec.Epoch)
		}
		next, err := CoPartitionedAssignment(a, cn.c.TopicPlacer(ctx, ldesc), frec, fdesc, fparts, f.c.TopicPlacer(ctx, fdesc), time.Now())
		if err != nil {
			return nil, nil, fmt.Errorf("topic %s: %w", f.topic, err)
		}
		byTopic[f.topic] = ownedIn(next, cn.opts.Member)
	}
	return parts, byTopic, nil
}

func ownedIn(a *wire.Assignment, member string) []int {
	out := []int{}
	for _, q := range a.Partitions {
		if a.Owner(q) == member {
			out = append(out, q)
		}
	}
	return out
}

// prospective is the assignment the group would have if this member joined the live members now
// (§6.10, step 3).
func (cn *Consumer) prospective(ctx context.Context, kv jetstream.KeyValue, live []string) (*wire.Assignment, error) {
	members := append(append([]string(nil), live...), cn.opts.Member)
	sort.Strings(members)
	desc, parts := cn.view()
	cn.mu.Lock()
	assignor := cn.assignor
	cn.mu.Unlock()
	if assignor == wire.AssignorSticky || assignor == AssignorCopartitioned {
		rec, _, err := cn.readAssignment(ctx, kv)
		if err != nil {
			return nil, err
		}
		if rec != nil && desc.Epoch(rec.Epoch) == nil {
			return nil, fmt.Errorf("%w: the group's record is of epoch %d, newer than the descriptor read", wire.ErrUnavailable, rec.Epoch)
		}
		return NextAssignment(rec, members, parts, desc.Current().Epoch, cn.c.TopicPlacer(ctx, desc), time.Now())
	}
	return ModuloAssignment(members, parts, desc.Current().Epoch), nil
}

// Standby is a member warming up before it joins its group (spec/protocol.md §6.10), as its live
// w. key reports it.
type Standby struct {
	Member string `json:"member"`
	// Warming is false while the standby waits in the queue for a slot (it reads nothing).
	Warming bool `json:"warming"`
	// Lag is what the standby had still to read of the state it will own at its last report (0
	// before its first).
	Lag       int64     `json:"lag"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
}

// standbyLive is how long a w. key without session_ms stays live for readers that are not
// members (the broker's rule for member keys in group lists).
const standbyLive = 30 * time.Second

// Standbys returns the live standbys of every consumer group of topic (spec/protocol.md §6.10),
// by group, each group's in queue order (the order in which they get a slot). A w. key older
// than its writer's session timeout (session_ms; 30 s without one) is a standby that crashed or
// left without deleting it, and is left out. It reads the group bucket (the admin or consumer
// role; a scoped consumer sees its own group's).
func (c *Client) Standbys(ctx context.Context, topic string) (map[string][]Standby, error) {
	t, _, err := c.Topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	kv, err := c.js.KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		return nil, fmt.Errorf("%w: the group bucket: %v", wire.ErrUnavailable, err)
	}
	lister, err := kv.ListKeysFiltered(ctx, t.ID+".*.w.*")
	if err != nil {
		return nil, fmt.Errorf("%w: the standbys of topic %s: %v", wire.ErrUnavailable, topic, err)
	}
	type entry struct {
		group string
		ws    warmState
	}
	var found []entry
	for k := range lister.Keys() {
		parts := strings.Split(strings.TrimPrefix(k, t.ID+"."), ".")
		if len(parts) != 3 || parts[1] != "w" {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var ws warmState
		if json.Unmarshal(e.Value(), &ws) != nil || ws.ID == "" {
			continue
		}
		live := standbyLive
		if ws.SessionMS > 0 {
			live = time.Duration(ws.SessionMS) * time.Millisecond
		}
		if time.Since(e.Created()) >= live {
			continue
		}
		found = append(found, entry{parts[0], ws})
	}
	sort.Slice(found, func(i, j int) bool {
		a, b := found[i], found[j]
		if a.group != b.group {
			return a.group < b.group
		}
		if !a.ws.Started.Equal(b.ws.Started) {
			return a.ws.Started.Before(b.ws.Started)
		}
		return a.ws.ID < b.ws.ID
	})
	out := map[string][]Standby{}
	for _, f := range found {
		out[f.group] = append(out[f.group], Standby{Member: f.ws.ID, Warming: f.ws.Warming, Lag: f.ws.Lag, Started: f.ws.Started, Heartbeat: f.ws.Heartbeat})
	}
	return out, nil
}

// ChangelogReadStart is where a reader of a changelog topic's latest state per key (a warm-up,
// spec/protocol.md §6.10 step 3, or a state load) starts in partition stream q: the first
// sequence it must read, and false when the stream holds nothing it needs. On a topic that
// backfills (§10.3) while no backfill runs, the current epoch alone holds every live key's
// latest record (§10.5): the reader starts one past the stream's last fence marker and skips the
// streams the current epoch does not have, reading none of the older layouts. Otherwise (a plain
// topic, or a backfill still copying) it reads the whole stream from 1.
func ChangelogReadStart(t *wire.Topic, q int) (first uint64, needed bool) {
	if !t.Backfills() || t.Backfilling() != nil {
		return 1, true
	}
	if q >= t.Current().Partitions {
		return 0, false
	}
	return t.CurrentEpochStart(q) + 1, true
}
