package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// Retiring old epochs (spec/protocol.md §10.7): once the backfills have carried every key into
// later epochs and every consumer group is past the old epochs' boundaries, their records are
// deleted. The steps are recorded (Topic.Retiring) so that a broker that dies finishes them.

func (b *Broker) apiTopicRetire(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.RetireRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidTopic(req.Topic); err != nil {
		return nil, err
	}
	mu := b.locks.get(req.Topic)
	mu.Lock()
	defer mu.Unlock()
	for attempt := 0; ; attempt++ {
		t, rev, err := b.getTopic(ctx, req.Topic)
		if err != nil {
			return nil, err
		}
		if t.Retiring == nil {
			through, err := retirable(t, req.Through)
			if err != nil {
				return nil, err
			}
			t.Retiring = &wire.Retiring{Through: through, Started: time.Now().UTC()}
			if _, err := b.putTopic(ctx, t, rev); err != nil {
				if errors.Is(err, wire.ErrConflict) && attempt < 20 {
					continue
				}
				return nil, err
			}
		} else if req.Through != 0 && req.Through != t.Retiring.Through {
			return nil, fmt.Errorf("%w: topic %s is already retiring epochs up to %d", wire.ErrChangeInProgress, t.Name, t.Retiring.Through)
		}
		break
	}
	if err := b.finishRetireLocked(ctx, req.Topic); err != nil {
		return nil, err
	}
	t, rev, err := b.getTopic(ctx, req.Topic)
	if err != nil {
		return nil, err
	}
	return wire.TopicReply{Topic: *t, Revision: rev}, nil
}

// retirable checks that epochs up to through (0: every ended epoch) may be retired and returns
// the epoch to retire through.
func retirable(t *wire.Topic, through int) (int, error) {
	cur := t.Current()
	switch {
	case !t.Backfills():
		return 0, fmt.Errorf("%w: topic %s does not backfill (not compacted, not created with --backfill): its old epochs hold keys no later epoch has; it cannot be retired without losing them", wire.ErrBadRequest, t.Name)
	case t.Change != nil || t.Creating || t.Deleting || t.Reconfig != nil:
		return 0, fmt.Errorf("%w: topic %s is changing; retire it when the change is done", wire.ErrChangeInProgress, t.Name)
	case len(t.Epochs) < 2:
		return 0, fmt.Errorf("%w: topic %s has only its current epoch %d: nothing to retire", wire.ErrBadRequest, t.Name, cur.Epoch)
	}
	if through == 0 {
		through = cur.Epoch - 1
	}
	if through >= cur.Epoch || t.Epoch(through) == nil {
		return 0, fmt.Errorf("%w: --through %d: topic %s's ended epochs are %d to %d", wire.ErrBadRequest, through, t.Name, t.Epochs[0].Epoch, cur.Epoch-1)
	}
	for e := t.Epochs[0].Epoch + 1; e <= through+1; e++ {
		ep := t.Epoch(e)
		if ep.Backfill == nil {
			return 0, fmt.Errorf("%w: epoch %d of topic %s was not backfilled (it began before the topic backfilled): retiring epoch %d would lose keys", wire.ErrBadRequest, e, t.Name, e-1)
		}
		if ep.Backfill.State != wire.BackfillDone {
			return 0, fmt.Errorf("%w: the backfill into epoch %d of topic %s is still running (%s); retire when it is done", wire.ErrChangeInProgress, e, t.Name, backfillText(t, ep))
		}
	}
	return through, nil
}

// retireBelow returns, per partition stream, the first sequence retirement keeps: one past the
// last boundary of the retired epochs in that stream (0: nothing to delete).
func retireBelow(t *wire.Topic, through int) []uint64 {
	keep := make([]uint64, t.MaxPartitions())
	for _, e := range t.Epochs {
		if e.Epoch > through {
			break
		}
		for q, bd := range e.Boundaries {
			if bd+1 > keep[q] {
				keep[q] = bd + 1
			}
		}
	}
	return keep
}

// finishRetireLocked drives a recorded retirement: check the groups (unless done), purge, mark.
func (b *Broker) finishRetireLocked(ctx context.Context, name string) error {
	for attempt := 0; ; attempt++ {
		t, rev, err := b.getTopic(ctx, name)
		if err != nil {
			return err
		}
		r := t.Retiring
		if r == nil {
			return nil
		}
		keep := retireBelow(t, r.Through)
		if !r.Checked {
			behind, err := b.groupsBehind(ctx, t, keep)
			if err != nil {
				return err
			}
			if len(behind) > 0 {
				t.Retiring = nil
				if _, err := b.putTopic(ctx, t, rev); err != nil {
					if errors.Is(err, wire.ErrConflict) && attempt < 20 {
						continue
					}
					return err
				}
				return fmt.Errorf("%w: topic %s: not every consumer group is past the epochs to retire (up to %d): %s; retire when they are (or delete the groups' state)",
					wire.ErrInUse, name, r.Through, strings.Join(behind, "; "))
			}
			r.Checked = true
			if rev, err = b.putTopic(ctx, t, rev); err != nil {
				if errors.Is(err, wire.ErrConflict) && attempt < 20 {
					continue
				}
				return err
			}
		}
		err = b.forPartitions(ctx, len(keep), func(q int) error {
			if keep[q] <= 1 {
				return nil
			}
			octx, cancel := opContext(ctx)
			defer cancel()
			s, err := b.js.Stream(octx, wire.StreamName(t.Name, q))
			if err != nil {
				return fmt.Errorf("%w: stream %s: %v", wire.ErrUnavailable, wire.StreamName(t.Name, q), err)
			}
			if err := s.Purge(octx, jetstream.WithPurgeSequence(keep[q])); err != nil {
				return fmt.Errorf("%w: purge stream %s below %d: %v", wire.ErrUnavailable, wire.StreamName(t.Name, q), keep[q], err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i := range t.Epochs {
			if t.Epochs[i].Epoch <= r.Through {
				t.Epochs[i].Retired = true
			}
		}
		t.Retiring = nil
		if _, err := b.putTopic(ctx, t, rev); err != nil {
			if errors.Is(err, wire.ErrConflict) && attempt < 20 {
				continue
			}
			return err
		}
		b.cfg.Logger.Info("epochs retired", "topic", name, "through", r.Through, "kept_from", keep)
		return nil
	}
}

// groupsBehind lists, for every consumer group of the topic, the partitions whose effective
// position (spec/protocol.md §6.6) is below keep[q]-1, the last boundary of the epochs to retire.
// A listing of the groups bucket only finds the groups (the union of two listings); what decides
// is read by name (§10.7, step 3): the bucket keeps one revision per key, and a listing can miss
// a key re-put while it runs (nats.go's watcher counts the messages pending when it starts). A
// missed g.reset let the older generation's positions count, so a group that seeked back looked
// past the boundary (TestGroupsBehindReadsTheResetItself).
func (b *Broker) groupsBehind(ctx context.Context, t *wire.Topic, keep []uint64) ([]string, error) {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	prefix := t.ID + "."
	keys, err := b.groupKeys(octx, t.ID)
	if err != nil {
		return nil, err
	}
	found := map[string]bool{}
	for _, k := range keys {
		// A group is one with positions or group keys (member and standby keys alone make
		// none, as before).
		if parts := strings.Split(strings.TrimPrefix(k, prefix), "."); len(parts) == 3 && (parts[1] == "p" || parts[1] == "g") {
			found[parts[0]] = true
		}
	}
	// read gets a key by name: false when it does not exist.
	read := func(key string, v any) (bool, error) {
		e, err := b.group.Get(octx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%w: read %s: %v", wire.ErrUnavailable, key, err)
		}
		return json.Unmarshal(e.Value(), v) == nil, nil
	}
	names := make([]string, 0, len(found))
	for g := range found {
		names = append(names, g)
	}
	sort.Strings(names)
	var behind []string
	for _, g := range names {
		var reset wire.ResetState
		hasReset, err := read(wire.ResetKey(t.ID, g), &reset)
		if err != nil {
			return nil, err
		}
		for q, k := range keep {
			if k <= 1 {
				continue
			}
			var ps wire.PartitionState
			has, err := read(wire.PartitionKey(t.ID, g, q), &ps)
			if err != nil {
				return nil, err
			}
			var pos uint64
			if has && (!hasReset || ps.Generation >= reset.Generation) {
				pos = ps.Position
			} else if hasReset && q < len(reset.Positions) {
				pos = reset.Positions[q]
			}
			if pos < k-1 {
				behind = append(behind, fmt.Sprintf("group %s partition %d at %d, boundary %d", g, q, pos, k-1))
				break
			}
		}
	}
	return behind, nil
}
