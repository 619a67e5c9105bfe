package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// maxAssignmentRecord keeps a sticky record under the group bucket's value limit (64 KiB,
// spec/protocol.md §8.5) with room for the bucket's own overhead.
const maxAssignmentRecord = 60 << 10

// HookAssignment is called on the member that wrote a sticky group's new assignment record
// (spec/protocol.md §6.2.1), as the group's leader, with the record (not to be kept or changed):
// its Moved and MovedModulo say which fraction of keys changed member.
type HookAssignment interface {
	OnAssignment(topic, group string, a *wire.Assignment)
}

// wanted returns the partitions this member should read (spec/protocol.md §6.2): by modulo, or by
// the sticky record, which the leader (the first live member) rewrites when it no longer matches
// the group. desc and parts (its assignable partitions) are one view (cn.view), used throughout:
// a descriptor read after the record's round trip could be a newer epoch than parts. It fails only
// for what no retry mends (a record too large for the group bucket).
func (cn *Consumer) wanted(ctx context.Context, kv jetstream.KeyValue, members []string, complete bool, desc *wire.Topic, parts []int) (map[int]bool, error) {
	want := map[int]bool{}
	cn.mu.Lock()
	assignor := cn.assignor
	cn.mu.Unlock()
	if assignor == AssignorCopartitioned && cn.co != nil && cn.co.index > 0 && !cn.opts.testCoIndependent {
		return cn.coWanted(ctx, kv, members, complete, desc, parts)
	}
	if assignor != wire.AssignorSticky && assignor != AssignorCopartitioned {
		me := sort.SearchStrings(members, cn.opts.Member)
		for i, q := range parts {
			if i%len(members) == me {
				want[q] = true
			}
		}
		return want, nil
	}
	rec, rev, err := cn.readAssignment(ctx, kv)
	if err != nil {
		cn.opts.Logf("member %s: read the group's assignment: %v (keeping the last one)", cn.opts.Member, err)
		cn.mu.Lock()
		rec, rev = cn.record, cn.recordRev
		cn.mu.Unlock()
	}
	epoch := desc.Current().Epoch
	// A view of the members that could not be read whole (a listing or a read that failed) is
	// not recorded: it would move partitions away and back. Nor is a member's absence seen only
	// once: a listing of the bucket can miss a key re-put while it runs, so a member leaves the
	// record when two rebalances in a row agree it is gone.
	cn.mu.Lock()
	prevView := cn.lastView
	cn.lastView = members
	cn.mu.Unlock()
	if err == nil && stickyWrites(rec, members, parts, epoch, cn.opts.Member, complete, prevView) {
		next, nrev, werr := cn.writeAssignment(ctx, kv, rec, rev, members, parts, desc)
		switch {
		case errors.Is(werr, wire.ErrBadRequest):
			return nil, werr
		case werr != nil:
			cn.opts.Logf("member %s: write the group's assignment: %v (the next rebalance retries)", cn.opts.Member, werr)
		default:
			rec, rev = next, nrev
		}
	}
	cn.mu.Lock()
	cn.record, cn.recordRev = rec, rev
	cn.mu.Unlock()
	if rec == nil {
		return want, nil // the leader has not written the first record yet
	}
	assignable := map[int]bool{}
	for _, q := range parts {
		assignable[q] = true
	}
	for j, q := range rec.Partitions {
		if j < len(rec.Owners) && rec.Owners[j] >= 0 && rec.Owners[j] < len(rec.Members) &&
			rec.Members[rec.Owners[j]] == cn.opts.Member && assignable[q] {
			want[q] = true
		}
	}
	return want, nil
}

// stickyWrites reports whether member me writes the group's next sticky record (spec/protocol.md
// §6.2.1, "Who writes"): it is the first of the live members, its view is whole, the record no
// longer matches the view, a member the record has and the view lacks was missed by the previous
// view too, and the record is not newer than the view (a leader that read an epoch change first
// wrote it: the rebalance this member's new descriptor brings compares again).
func stickyWrites(rec *wire.Assignment, members []string, parts []int, epoch int, me string, complete bool, prevView []string) bool {
	if !complete || len(members) == 0 || members[0] != me || !needsAssignment(rec, members, parts, epoch) {
		return false
	}
	if rec == nil {
		return true
	}
	if rec.Epoch > epoch {
		return false
	}
	return membersSettled(rec, members, prevView)
}

// membersSettled reports whether a record may be rewritten for the view members (§6.2.1, "Who
// writes"): no record yet, or every member the record has is in the view, or the previous view
// missed the same members (the absent ones are gone, not a one-view glitch).
func membersSettled(rec *wire.Assignment, members, prevView []string) bool {
	return rec == nil || !dropsMember(rec.Members, members) || sameStrings(prevView, members)
}

// readAssignment reads the group's sticky record (nil, 0 when there is none yet).
func (cn *Consumer) readAssignment(ctx context.Context, kv jetstream.KeyValue) (*wire.Assignment, uint64, error) {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	e, err := kv.Get(ctx, wire.AssignmentKey(cn.topicID, cn.opts.Group))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var a wire.Assignment
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return nil, 0, fmt.Errorf("%w: the assignment record of group %s is not JSON: %v", wire.ErrInternal, cn.opts.Group, err)
	}
	return &a, e.Revision(), nil
}

// writeAssignment computes the next sticky record from rec and writes it by compare-and-set on
// rev (create when rec is nil).
func (cn *Consumer) writeAssignment(ctx context.Context, kv jetstream.KeyValue, rec *wire.Assignment, rev uint64, members []string, parts []int, desc *wire.Topic) (*wire.Assignment, uint64, error) {
	next, err := NextAssignment(rec, members, parts, desc.Current().Epoch, cn.c.TopicPlacer(ctx, desc), time.Now())
	if err != nil {
		return nil, 0, err
	}
	nrev, err := cn.storeAssignment(ctx, kv, next, rec == nil, rev, func(size int) error {
		return fmt.Errorf("%w: group %s: the sticky assignment of %d partitions over %d members takes %d bytes, more than the group bucket holds (%d): use the modulo assignor for this topic",
			wire.ErrBadRequest, cn.opts.Group, len(parts), len(members), size, maxAssignmentRecord)
	}, fmt.Sprintf("wrote assignment round %d (epoch %d, %d members, %d partitions)", next.Round, next.Epoch, len(members), len(parts)))
	if err != nil {
		return nil, 0, err
	}
	return next, nrev, nil
}

// storeAssignment writes the group's assignment record next by compare-and-set on rev (created
// when create), counts it, logs what (for the member's log) and shows it to the hooks: what a
// sticky leader and a co-partitioned follower's leader do alike. tooBig makes the error for a
// record larger than the group bucket holds.
func (cn *Consumer) storeAssignment(ctx context.Context, kv jetstream.KeyValue, next *wire.Assignment, create bool, rev uint64, tooBig func(size int) error, what string) (uint64, error) {
	body, _ := json.Marshal(next)
	if len(body) > maxAssignmentRecord {
		return 0, tooBig(len(body))
	}
	octx, cancel := cn.op(context.WithoutCancel(ctx))
	defer cancel()
	key := wire.AssignmentKey(cn.topicID, cn.opts.Group)
	var nrev uint64
	var err error
	if create {
		nrev, err = kv.Create(octx, key, body)
	} else {
		nrev, err = kv.Update(octx, key, body, rev)
	}
	if err != nil {
		return 0, err
	}
	cn.mu.Lock()
	cn.stats.Assignments++
	if next.Moved != nil {
		cn.stats.Moved, cn.stats.MovedModulo = *next.Moved, *next.MovedModulo
	}
	cn.mu.Unlock()
	cn.opts.Logf("member %s: %s", cn.opts.Member, what)
	for _, h := range cn.opts.Hooks {
		if h, ok := h.(HookAssignment); ok {
			h.OnAssignment(cn.topic, cn.opts.Group, next)
		}
	}
	return nrev, nil
}

// dropsMember reports whether some member of was is missing from now.
func dropsMember(was, now []string) bool {
	have := map[string]bool{}
	for _, m := range now {
		have[m] = true
	}
	for _, m := range was {
		if !have[m] {
			return true
		}
	}
	return false
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
