package main

import (
	"context"
	"errors"
	"fmt"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/progress"
)

// repartitionFollowed asks for an epoch change and waits until the new epoch is active. The
// request's own answer comes when the change is done, but a request times out (30 s by default)
// long before a change on thousands of partitions ends: the change goes on in the broker, so the
// command then follows the descriptor to the end (client.FollowChange), showing the step and the
// fenced partitions on a terminal. An interrupt stops the waiting only.
func repartitionFollowed(e *env, cmd string, c *client.Client, req wire.RepartitionRequest, before *wire.Topic) (*wire.Topic, error) {
	target := before.Current().Epoch + 1
	bar := progress.New(e.stderr, e.getenv, 3, fmt.Sprintf("epoch change to %d: planning", target), "steps")
	defer bar.Finish()
	show := func(t *wire.Topic) {
		ch := t.Change
		if ch == nil || ch.To != target {
			return
		}
		fenced := 0
		for _, f := range ch.Fenced {
			if f {
				fenced++
			}
		}
		step := map[string]int64{"planned": 0, "created": 1, "fenced": 2}[ch.State]
		bar.Set(step)
		bar.Describe("epoch change to %d: %s, %d of %d old partitions fenced", target, ch.State, fenced, len(ch.Fenced))
	}
	fctx, stopFollow := context.WithCancel(e.ctx)
	defer stopFollow()
	followed := make(chan struct{})
	go func() { // progress while the request is answered
		defer close(followed)
		_, _ = c.FollowChange(fctx, req.Topic, target, show)
	}()
	t, err := c.Repartition(e.ctx, req)
	if err == nil || !errors.Is(err, wire.ErrUnavailable) || e.ctx.Err() != nil {
		stopFollow()
		<-followed
		if err != nil && e.ctx.Err() != nil {
			return nil, interruptedChange(req.Topic, target, err)
		}
		return t, err
	}
	// No answer in time, or the broker answered that it keeps retrying: is the change recorded?
	stopFollow()
	<-followed
	cur, _, terr := c.Topic(e.ctx, req.Topic)
	if terr != nil || (cur.Change == nil && cur.Current().Epoch < target) {
		return nil, err // never planned: the request's error stands
	}
	msg := fmt.Sprintf("pctl %s: %v; the change to epoch %d is recorded and goes on in the broker: following it", cmd, oneLine(trimSentinel(err)), target)
	if bar != nil {
		bar.Printf("%s", msg)
	} else {
		fmt.Fprintln(e.stderr, msg)
	}
	t, err = c.FollowChange(e.ctx, req.Topic, target, show)
	if err != nil && e.ctx.Err() != nil {
		return nil, interruptedChange(req.Topic, target, err)
	}
	return t, err
}

func interruptedChange(topic string, epoch int, err error) error {
	return fmt.Errorf("interrupted while waiting for epoch %d of topic %s: the change itself goes on in the broker ('pctl topic describe %s' shows it)", epoch, topic, topic)
}

// setTopicFollowed changes a topic's replicas or placement and waits until every partition stream
// has them: past the request's timeout, it follows the descriptor until the reconfiguration is
// recorded as done (spec/protocol.md §7.1).
func setTopicFollowed(e *env, cmd string, c *client.Client, req wire.SetTopicRequest) (*wire.Topic, error) {
	t, err := c.SetTopic(e.ctx, req)
	if err == nil || !errors.Is(err, wire.ErrUnavailable) || e.ctx.Err() != nil {
		if err != nil && e.ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while waiting for topic %s's streams to change: the change itself goes on in the broker ('pctl topic describe %s' shows it)", req.Topic, req.Topic)
		}
		return t, err
	}
	cur, _, terr := c.Topic(e.ctx, req.Topic)
	if terr != nil || cur.Reconfig == nil {
		return nil, err // not recorded (or already over: the request's error stands)
	}
	fmt.Fprintf(e.stderr, "pctl %s: %s; the change is recorded and goes on in the broker: following it\n", cmd, oneLine(trimSentinel(err)))
	bar := progress.New(e.stderr, e.getenv, -1, "changing replicas/placement", "reads")
	defer bar.Finish()
	t, err = c.FollowTopic(e.ctx, req.Topic, "its replicas and placement were changed", func(t *wire.Topic) bool { return t.Reconfig == nil },
		func(*wire.Topic) { bar.Add(1) })
	if err != nil && e.ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted while waiting for topic %s's streams to change: the change itself goes on in the broker ('pctl topic describe %s' shows it)", req.Topic, req.Topic)
	}
	return t, err
}
