package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/natsver"
)

// SeekTarget says where a reset moves a consumer group (spec/protocol.md §6.6): to the beginning
// of every partition stream, to the end, or to the first records stored at or after a time.
type SeekTarget struct {
	kind string // "beginning", "end" or "time"
	at   time.Time
}

var (
	// SeekBeginning moves a group to the first record of every partition stream, of every epoch.
	SeekBeginning = SeekTarget{kind: "beginning"}
	// SeekEnd moves a group past every record stored so far.
	SeekEnd = SeekTarget{kind: "end"}
)

// SeekTime moves a group to the first records stored at or after t (JetStream's store time, in
// milliseconds), in every partition stream.
func SeekTime(t time.Time) SeekTarget { return SeekTarget{kind: "time", at: t} }

// String is how the CLI spells the target.
func (s SeekTarget) String() string {
	switch s.kind {
	case "beginning", "end":
		return s.kind
	case "time":
		return s.at.UTC().Format(time.RFC3339Nano)
	}
	return "none"
}

// IsZero reports whether the target is unset.
func (s SeekTarget) IsZero() bool { return s.kind == "" }

// ParseSeekTarget parses what the CLI takes: "earliest" or "beginning", "latest" or "end", an RFC
// 3339 time ("2026-11-30T07:00:00Z"), or a duration ago ("10m": ten minutes before now).
func ParseSeekTarget(s string, now time.Time) (SeekTarget, error) {
	switch strings.ToLower(s) {
	case "earliest", "beginning":
		return SeekBeginning, nil
	case "latest", "end":
		return SeekEnd, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return SeekTime(t), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return SeekTarget{}, fmt.Errorf("%w: reset target %q: a duration ago must be positive (10m: ten minutes ago)", wire.ErrBadRequest, s)
		}
		return SeekTime(now.Add(-d)), nil
	}
	return SeekTarget{}, fmt.Errorf("%w: reset target %q: give earliest, latest, an RFC 3339 time (2026-11-30T07:00:00Z) or a duration ago (10m)", wire.ErrBadRequest, s)
}

// ResetResult is a reset that was committed.
type ResetResult struct {
	Generation uint64   // the group's new generation
	Positions  []uint64 // positions[q]: every record up to it counts as drained
	Revision   uint64   // of the group's g.reset key
}

// ResetGroup moves consumer group `group` of `topic`, as a whole, to the target
// (spec/protocol.md §6.6), whether or not members are running: it writes the group's next
// generation with the target position of every partition stream the topic has ever had (the
// commit point), then moves every partition key there. Running members stop delivering, forget
// the drained epochs and passed boundaries they knew, and go on from the new positions; per-key
// order holds among the records delivered after the reset. Needs the consumer or admin role (or
// a consumer credential for this topic and group). A group that does not exist is created.
func (c *Client) ResetGroup(ctx context.Context, topic, group string, to SeekTarget) (*ResetResult, error) {
	return c.resetGroup(ctx, topic, group, to, c.opts.Name, -1)
}

// resetGroup is ResetGroup with the resetter's name, and, for the tests, the number of partition
// keys to move before stopping as if the resetter had crashed (-1: all).
func (c *Client) resetGroup(ctx context.Context, topic, group string, to SeekTarget, by string, keys int) (*ResetResult, error) {
	if err := wire.ValidGroup(group); err != nil {
		return nil, fmt.Errorf("consumer group: %w", err)
	}
	if to.IsZero() {
		return nil, fmt.Errorf("%w: reset of group %s: no target (SeekBeginning, SeekEnd or SeekTime)", wire.ErrBadRequest, group)
	}
	// A reset writes group keys (and creates a missing group's g.created) that members read by the
	// rules of spec/protocol.md §6.1: it needs the server the members need, checked before any
	// key is written (§6.6).
	if err := natsver.Require(c.nc, "pctl's group reset", "it writes the group's keys that members read, spec/protocol.md §6.1, §6.6"); err != nil {
		return nil, err
	}
	kvx, err := c.js.KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		if IsPermission(err) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: consumer-group state: %v (resetting a group needs the consumer or admin role)", wire.ErrUnavailable, err)
	}
	var res *ResetResult
	var desc *wire.Topic
	if desc, _, err = c.Topic(ctx, topic); err != nil {
		return nil, err
	}
	// A credential scoped to another group cannot read or write this group's keys: the server
	// answers with an asynchronous permission violation, not an error reply. Say so at once.
	ctx, refused, stop := c.refusals(ctx, group,
		"$JS.API.DIRECT.GET.KV_"+wire.GroupsBucket+".$KV."+wire.GroupsBucket+"."+wire.ResetKey(desc.ID, group),
		"$KV."+wire.GroupsBucket+"."+wire.ResetKey(desc.ID, group))
	defer stop()
	wrap := func(err error) error {
		if r := refused(); r != nil {
			return r
		}
		return err
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if desc, _, err = c.Topic(ctx, topic); err != nil {
				return nil, wrap(err)
			}
		}
		rkey := wire.ResetKey(desc.ID, group)
		var prev wire.ResetState
		var rev uint64
		e, err := kvx.Get(ctx, rkey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, wrap(groupStateErr(err, group))
		default:
			rev = e.Revision()
			if json.Unmarshal(e.Value(), &prev) != nil {
				return nil, fmt.Errorf("%w: group %s: its reset key holds %.80q, not a reset", wire.ErrInternal, group, e.Value())
			}
		}
		positions, err := c.resetPositions(ctx, desc, to)
		if err != nil {
			return nil, wrap(err)
		}
		st := wire.ResetState{Generation: prev.Generation + 1, To: to.kind, Positions: positions, By: by, At: time.Now().UTC().Format(time.RFC3339Nano)}
		if to.kind == "time" {
			st.Time = to.at.UnixMilli()
		}
		body, _ := json.Marshal(st)
		// The commit point: compare-and-set on the reset we read (create when there was none).
		var newRev uint64
		if rev == 0 {
			newRev, err = kvx.Create(ctx, rkey, body)
		} else {
			newRev, err = kvx.Update(ctx, rkey, body, rev)
		}
		if err == nil {
			res = &ResetResult{Generation: st.Generation, Positions: positions, Revision: newRev}
			break
		}
		if !isCASConflict(err) || attempt >= 20 {
			return nil, wrap(groupStateErr(err, group))
		}
		// Another reset won: this one goes on top of it.
	}
	// Step 3: every partition key to the new generation (members do it too, for the keys they
	// own and the ones they acquire, so a resetter that stops here leaves no half reset). Past
	// the commit point the caller's context no longer stops it: a Seek from a handler has its
	// context cancelled by the very reset it made.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.Timeout)
	defer cancel()
	for q := range res.Positions {
		if keys >= 0 && q >= keys {
			return res, nil
		}
		if err := moveKey(ctx, kvx, wire.PartitionKey(desc.ID, group, q), res.Generation, res.Positions[q], 0); err != nil {
			return nil, groupStateErr(err, group)
		}
	}
	if _, err := kvx.Create(ctx, wire.GroupPrefix(desc.ID, group)+"g.created", []byte(time.Now().UTC().Format(time.RFC3339))); err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !isCASConflict(err) {
		return nil, groupStateErr(err, group)
	}
	return res, nil
}

// moveKey writes {position, generation} without owner to a partition key, unless it is already
// at that generation or a newer one. With onlyRev != 0 it writes only over that revision (a
// member moving a key it owned: a conflict means the resetter or another member was first).
func moveKey(ctx context.Context, kv jetstream.KeyValue, key string, gen, pos, onlyRev uint64) error {
	body, _ := json.Marshal(wire.PartitionState{Position: pos, Generation: gen})
	for attempt := 0; attempt < 20; attempt++ {
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if onlyRev != 0 {
				return nil
			}
			if _, err = kv.Create(ctx, key, body); err == nil || !isCASConflict(err) {
				return err
			}
			continue
		case err != nil:
			return err
		}
		var ps wire.PartitionState
		if json.Unmarshal(e.Value(), &ps) == nil && ps.Generation >= gen {
			return nil
		}
		if onlyRev != 0 && e.Revision() != onlyRev {
			return nil
		}
		if _, err = kv.Update(ctx, key, body, e.Revision()); err == nil || !isCASConflict(err) {
			return err
		}
		if onlyRev != 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: key %s: 20 compare-and-set conflicts in a row", wire.ErrConflict, key)
}

// refusals returns a context that ends when the server refuses one of the subjects (a permission
// violation), and a function that returns the permission error then (nil otherwise).
func (c *Client) refusals(ctx context.Context, group string, subjects ...string) (context.Context, func() error, func()) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var refused error
	var stops []func()
	done := make(chan struct{})
	for _, s := range subjects {
		ch, stop := c.watchViolation(s)
		stops = append(stops, stop)
		go func() {
			select {
			case <-ch:
				mu.Lock()
				refused = fmt.Errorf("%w: these credentials may not use %s: resetting group %s needs the consumer or admin role, or a consumer credential for this topic and group (pctl creds issue)", wire.ErrPermission, s, group)
				mu.Unlock()
				cancel()
			case <-done:
			}
		}()
	}
	return ctx, func() error {
			mu.Lock()
			defer mu.Unlock()
			return refused
		}, func() {
			close(done)
			for _, s := range stops {
				s()
			}
			cancel()
		}
}

func isCASConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || isWrongSeq(err)
}

func groupStateErr(err error, group string) error {
	if IsPermission(err) {
		return err
	}
	var re *wire.RemoteError
	if errors.As(err, &re) || errors.Is(err, wire.ErrConflict) || errors.Is(err, wire.ErrInternal) {
		return err
	}
	return fmt.Errorf("%w: consumer group %s: %v", wire.ErrUnavailable, group, err)
}

// resetPositions computes the target of every partition stream the topic has ever had:
// beginning 0; end the stream's last sequence; a time the sequence before the stream's first
// message stored at or after it (the last sequence if there is none). A stream that does not
// exist (yet) is at 0.
func (c *Client) resetPositions(ctx context.Context, t *wire.Topic, to SeekTarget) ([]uint64, error) {
	out := make([]uint64, t.MaxPartitions())
	if to.kind == "beginning" {
		return out, nil
	}
	for q := range out {
		name := wire.StreamName(t.Name, q)
		s, err := c.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			if IsPermission(err) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: partition %d: %v", wire.ErrUnavailable, q, err)
		}
		last := s.CachedInfo().State.LastSeq
		if to.kind == "end" || last == 0 {
			out[q] = last
			continue
		}
		seq, err := c.seqBefore(ctx, t.Name, q, to.at)
		if err != nil {
			return nil, err
		}
		out[q] = min(seq, last)
	}
	return out, nil
}

// seqBefore is the sequence before partition stream q's first message stored at or after at. A
// reader created to start there tells: the server reports it as delivered up to the sequence
// before its start. (This needs only what a consumer credential scoped to the topic may do,
// spec/protocol.md §8.2: a consumer created with the topic's filter; a direct get of the stream
// is not allowed to it.)
func (c *Client) seqBefore(ctx context.Context, topic string, q int, at time.Time) (uint64, error) {
	stream := wire.StreamName(topic, q)
	at = at.Truncate(time.Millisecond)
	cons, err := c.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Name:              "pctl_seek_" + nuid.Next(),
		FilterSubject:     wire.DataPrefix + "." + topic + ".>",
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &at,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: 10 * time.Second,
	})
	if err != nil {
		if IsPermission(err) {
			return 0, err
		}
		return 0, fmt.Errorf("%w: partition %d: find the first record at %s: %v", wire.ErrUnavailable, q, at.Format(time.RFC3339Nano), err)
	}
	seq := cons.CachedInfo().Delivered.Stream
	deleteConsumer(c.js, stream, cons)
	return seq, nil
}

// Seek moves this member's whole group to the target (spec/protocol.md §6.6), like ResetGroup,
// and returns once the reset is committed. This member stops delivering before writing it (a
// handler that is running finishes; Seek may be called from a handler); every member, this one
// included, then goes on from the new positions with its gates closed again, so per-key order
// holds among the records delivered after the seek, across epochs. Called before Run, it is
// ResetGroup for the member's group.
func (cn *Consumer) Seek(ctx context.Context, to SeekTarget) (*ResetResult, error) {
	cn.mu.Lock()
	cn.seeking++
	cn.mu.Unlock()
	res, err := cn.c.resetGroup(ctx, cn.topic, cn.opts.Group, to, cn.opts.Member, -1)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.seeking--
	if err == nil {
		cn.noteResetLocked(&wire.ResetState{Generation: res.Generation, To: to.kind, Positions: res.Positions, By: cn.opts.Member})
	}
	cn.cond.Broadcast()
	return res, err
}

// Generation returns the group generation (number of resets) this member follows.
func (cn *Consumer) Generation() uint64 {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.gen
}
