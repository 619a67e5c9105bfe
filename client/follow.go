package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
)

// FollowChange watches a topic's descriptor until no epoch change is in progress and its current
// epoch is at least epoch, and returns that descriptor. progress, if set, gets every descriptor
// read on the way (an epoch change shows its state and fenced partitions). It re-reads the
// descriptor on every descriptor event (pctl.events.topic.<topic>) and at least every second, so
// a change on thousands of partitions is followed to its end however long it takes; ctx bounds
// the wait. A change that fails is retried by the brokers (spec/protocol.md §7): FollowChange
// keeps waiting, and the caller decides how long.
func (c *Client) FollowChange(ctx context.Context, topic string, epoch int, progress func(*wire.Topic)) (*wire.Topic, error) {
	return c.FollowTopic(ctx, topic, fmt.Sprintf("epoch %d was active", epoch), func(t *wire.Topic) bool {
		return t.Change == nil && t.Current().Epoch >= epoch
	}, progress)
}

// FollowTopic watches a topic's descriptor, as FollowChange does, until done(descriptor) is true
// (what, for the error after ctx ends, says what was awaited: "the replicas were changed").
func (c *Client) FollowTopic(ctx context.Context, topic, what string, done func(*wire.Topic) bool, progress func(*wire.Topic)) (*wire.Topic, error) {
	events := make(chan struct{}, 1)
	sub, err := c.nc.Subscribe(wire.TopicEventSubject(topic), func(m *nats.Msg) {
		select {
		case events <- struct{}{}:
		default:
		}
	})
	if err == nil {
		defer sub.Unsubscribe()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		t, _, err := c.Topic(ctx, topic)
		switch {
		case err == nil:
			if progress != nil {
				progress(t)
			}
			if done(t) {
				return t, nil
			}
		case errors.Is(err, wire.ErrNotFound):
			return nil, err
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%w: stopped following topic %s before %s: %w", wire.ErrUnavailable, topic, what, ctx.Err())
		}
		// Other errors (a broker restarting) are transient: read again.
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: stopped following topic %s before %s: %w", wire.ErrUnavailable, topic, what, ctx.Err())
		case <-events:
		case <-tick.C:
		}
	}
}
