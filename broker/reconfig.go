package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// A topic's replicas and placement change like an epoch does, as recorded steps (spec/protocol.md
// §7.1): the request records Reconfig in the descriptor by compare-and-set (refused while an
// epoch change is in progress, and an epoch change is refused while it is), every partition stream
// is updated to the new replicas and placement tags (JetStream adds, removes or moves replicas
// while records flow; the stream's subject is not touched), then Replicas and PlacementTags take
// the new values and Reconfig is cleared. Exclusion with epoch changes matters: both rewrite
// stream configurations, and JetStream has no compare-and-set on them, so a concurrent update
// could put a fenced subject back. Every step is idempotent; the retry loop finishes a
// reconfiguration whose broker died.

func (b *Broker) apiTopicSet(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.SetTopicRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidTopic(req.Topic); err != nil {
		return nil, err
	}
	if req.Replicas == 0 && !req.SetPlacement {
		return nil, fmt.Errorf("%w: nothing to change: give replicas, placement tags, or both", wire.ErrBadRequest)
	}
	mu := b.locks.get(req.Topic)
	mu.Lock()
	defer mu.Unlock()
	for attempt := 0; ; attempt++ {
		t, rev, err := b.getTopic(ctx, req.Topic)
		if err != nil {
			return nil, err
		}
		want := wire.Reconfig{Replicas: b.replicas(t), PlacementTags: t.PlacementTags, Started: time.Now().UTC()}
		if req.Replicas != 0 {
			want.Replicas = req.Replicas
		}
		if req.SetPlacement {
			want.PlacementTags = req.PlacementTags
		}
		if err := validPlacement(want.Replicas, want.PlacementTags); err != nil {
			return nil, err
		}
		switch {
		case t.Creating || t.Deleting:
			return nil, fmt.Errorf("%w: topic %s is being created or deleted", wire.ErrConflict, t.Name)
		case t.Change != nil:
			return nil, fmt.Errorf("%w: topic %s is changing to epoch %d (state %s); change its replicas or placement when that is done", wire.ErrChangeInProgress, t.Name, t.Change.To, t.Change.State)
		case t.Reconfig != nil && (t.Reconfig.Replicas != want.Replicas || !slices.Equal(t.Reconfig.PlacementTags, want.PlacementTags)):
			return nil, fmt.Errorf("%w: topic %s is already changing to R%d (placement tags %v); wait for it to finish", wire.ErrChangeInProgress, t.Name, t.Reconfig.Replicas, t.Reconfig.PlacementTags)
		case t.Reconfig == nil && want.Replicas == b.replicas(t) && slices.Equal(want.PlacementTags, t.PlacementTags) && t.Replicas != 0:
			return wire.TopicReply{Topic: *t, Revision: rev}, nil // nothing to do
		}
		if t.Reconfig == nil {
			t.Reconfig = &want
			if _, err := b.putTopic(ctx, t, rev); err != nil {
				if errorsIsConflict(err) && attempt < 20 {
					continue
				}
				return nil, err
			}
			b.cfg.Logf("topic %s: replicas/placement change planned: R%d %v -> R%d %v", t.Name, b.replicas(t), t.PlacementTags, want.Replicas, want.PlacementTags)
		}
		break
	}
	if err := b.finishReconfigLocked(ctx, req.Topic); err != nil {
		if errors.Is(err, wire.ErrBadRequest) {
			// The cluster cannot place the streams so: put back what was there.
			if rerr := b.revertReconfigLocked(ctx, req.Topic); rerr != nil {
				return nil, fmt.Errorf("%w; putting the previous replicas and placement back failed too: %v (the broker keeps retrying)", err, rerr)
			}
			return nil, err
		}
		return nil, fmt.Errorf("%w (the change is recorded and the broker keeps retrying it; 'pctl topic describe %s' shows it)", err, req.Topic)
	}
	t, rev, err := b.getTopic(ctx, req.Topic)
	if err != nil {
		return nil, err
	}
	return wire.TopicReply{Topic: *t, Revision: rev}, nil
}

// finishReconfigLocked updates every partition stream to the recorded Reconfig, then records it as
// done. The topic's lock is held.
func (b *Broker) finishReconfigLocked(ctx context.Context, name string) error {
	for attempt := 0; ; attempt++ {
		t, rev, err := b.getTopic(ctx, name)
		if err != nil {
			return err
		}
		rc := t.Reconfig
		if rc == nil {
			return nil
		}
		err = b.forPartitions(ctx, t.MaxPartitions(), func(q int) error {
			return b.reconfigureStream(ctx, wire.StreamName(t.Name, q), rc.Replicas, rc.PlacementTags)
		})
		if err != nil {
			return err
		}
		t.Replicas, t.PlacementTags, t.Reconfig = rc.Replicas, rc.PlacementTags, nil
		if _, err := b.putTopic(ctx, t, rev); err != nil {
			if errorsIsConflict(err) && attempt < 20 {
				continue
			}
			return err
		}
		b.cfg.Logf("topic %s: every partition stream has R%d, placement tags %v", t.Name, rc.Replicas, rc.PlacementTags)
		return nil
	}
}

// revertReconfigLocked turns a recorded Reconfig back into the topic's current replicas and
// placement, and finishes that.
func (b *Broker) revertReconfigLocked(ctx context.Context, name string) error {
	for attempt := 0; ; attempt++ {
		t, rev, err := b.getTopic(ctx, name)
		if err != nil {
			return err
		}
		if t.Reconfig == nil {
			return nil
		}
		t.Reconfig = &wire.Reconfig{Replicas: b.replicas(t), PlacementTags: t.PlacementTags, Started: time.Now().UTC()}
		if _, err := b.putTopic(ctx, t, rev); err != nil {
			if errorsIsConflict(err) && attempt < 20 {
				continue
			}
			return err
		}
		return b.finishReconfigLocked(ctx, name)
	}
}

// reconfigureStream sets a stream's replicas and placement tags, leaving the rest of its
// configuration (its subject above all) as it is. JetStream neither scales and moves a stream in
// one update nor takes an update while a move is in progress, so a change of both goes in two
// updates (shrinking scales first, growing moves first), each retried while a move is under way.
func (b *Broker) reconfigureStream(ctx context.Context, stream string, replicas int, tags []string) error {
	for {
		octx, cancel := opContext(ctx)
		s, err := b.js.Stream(octx, stream)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: stream %s: %v", wire.ErrUnavailable, stream, err)
		}
		cfg := s.CachedInfo().Config
		var have []string
		if cfg.Placement != nil {
			have = cfg.Placement.Tags
		}
		sameTags := slices.Equal(have, tags)
		switch {
		case cfg.Replicas == replicas && sameTags:
			return nil
		case cfg.Replicas != replicas && !sameTags && replicas > cfg.Replicas:
			cfg.Placement = placement(tags) // move first, then grow
		case cfg.Replicas != replicas:
			cfg.Replicas = replicas // shrink first (or only scale)
		default:
			cfg.Placement = placement(tags)
		}
		octx, cancel = opContext(ctx)
		_, err = b.js.UpdateStream(octx, cfg)
		cancel()
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == 10124 || apiErr.ErrorCode == 10226) { // a move, or another reconfiguration, in progress
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: update stream %s: a move is still in progress: %v", wire.ErrUnavailable, stream, ctx.Err())
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return streamError("update stream "+stream, replicas, tags, err)
		}
	}
}

func errorsIsConflict(err error) bool { return errors.Is(err, wire.ErrConflict) }
