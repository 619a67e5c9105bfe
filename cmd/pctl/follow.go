package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/progress"
)

// waitFlags bound how long a command waits for an epoch change it asked for.
type waitFlags struct{ timeout, stall *time.Duration }

func addWaitFlags(fs *flag.FlagSet) waitFlags {
	return waitFlags{
		timeout: fs.Duration("timeout", 0, "stop waiting after this long in all, `D` like 10m (0: no bound); the change goes on in the broker"),
		stall:   fs.Duration("stall", 2*time.Minute, "stop waiting when the change made no progress for this long (0: never); the change goes on in the broker"),
	}
}

// errStopped ends the waiting for a change: --timeout or --stall.
var errStopped = errors.New("stopped waiting")

// repartitionFollowed asks for an epoch change and waits until the new epoch is active. The
// request's own answer comes when the change is done, but a request times out (30 s by default)
// long before a change on thousands of partitions ends: the change goes on in the broker, so the
// command then follows the descriptor to the end (client.FollowChange), showing on a terminal the
// step and the partitions done (the broker publishes a step's progress, wire.ChangeEvent). It
// waits as long as the change moves (a new step, or more partitions done): --stall bounds the time
// without progress, --timeout the whole wait. An interrupt stops the waiting only.
func repartitionFollowed(e *env, cmd string, c *client.Client, req wire.RepartitionRequest, before *wire.Topic, wait waitFlags) (*wire.Topic, error) {
	target := before.Current().Epoch + 1
	bar := progress.New(e.stderr, e.getenv, 3, fmt.Sprintf("epoch change to %d: planning", target), "steps")
	defer bar.Finish()
	wctx, stop := context.WithCancelCause(e.ctx)
	defer stop(nil)
	if *wait.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(wctx, *wait.timeout, fmt.Errorf("%w: --timeout %v passed", errStopped, *wait.timeout))
		defer cancel()
	}
	moved := make(chan struct{}, 1)
	progressed := func() {
		select {
		case moved <- struct{}{}:
		default:
		}
	}
	if *wait.stall > 0 {
		go func() { // the stall watchdog
			timer := time.NewTimer(*wait.stall)
			defer timer.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-moved:
					timer.Reset(*wait.stall)
				case <-timer.C:
					stop(fmt.Errorf("%w: the change made no progress for --stall %v", errStopped, *wait.stall))
					return
				}
			}
		}()
	}
	var mu sync.Mutex // the descriptor reads and the events come on different goroutines
	lastState, lastStep, lastDone := "", "", -1
	show := func(t *wire.Topic) {
		ch := t.Change
		if ch == nil || ch.To != target {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if ch.State != lastState {
			lastState, lastStep, lastDone = ch.State, "", -1
			progressed()
			step := map[string]int64{"planned": 0, "created": 1, "fenced": 2}[ch.State]
			bar.Set(step)
			bar.Describe("epoch change to %d: %s", target, ch.State)
		}
	}
	if sub, err := c.Conn().Subscribe(wire.ChangeSubject(req.Topic), func(m *nats.Msg) {
		var ev wire.ChangeEvent
		if strings.HasPrefix(m.Reply, "$JS.") || json.Unmarshal(m.Data, &ev) != nil || ev.To != target || ev.Topic != req.Topic {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if ev.Step == lastStep && ev.Done == lastDone {
			return
		}
		lastStep, lastDone = ev.Step, ev.Done
		progressed()
		what := "new partitions created"
		if ev.Step == "fence" {
			what = "old partitions fenced"
		}
		bar.Describe("epoch change to %d: %s, %d of %d %s", target, ev.Step, ev.Done, ev.Of, what)
	}); err == nil {
		defer sub.Unsubscribe()
	}
	gaveUp := func(err error) (*wire.Topic, error) {
		if e.ctx.Err() != nil {
			return nil, interruptedChange(req.Topic, target, err)
		}
		if cause := context.Cause(wctx); errors.Is(cause, errStopped) {
			return nil, fmt.Errorf("%w: %v (epoch %d of topic %s); the change itself goes on in the broker ('pctl topic describe %s' shows it)",
				wire.ErrUnavailable, cause, target, req.Topic, req.Topic)
		}
		return nil, err
	}
	fctx, stopFollow := context.WithCancel(wctx)
	defer stopFollow()
	followed := make(chan struct{})
	go func() { // progress while the request is answered
		defer close(followed)
		_, _ = c.FollowChange(fctx, req.Topic, target, show)
	}()
	t, err := c.Repartition(wctx, req)
	stopFollow()
	<-followed
	if err != nil && wctx.Err() != nil {
		return gaveUp(err)
	}
	if err == nil || !errors.Is(err, wire.ErrUnavailable) {
		return t, err
	}
	// No answer in time, or the broker answered that it keeps retrying: is the change recorded?
	cur, _, terr := c.Topic(wctx, req.Topic)
	if terr != nil || (cur.Change == nil && cur.Current().Epoch < target) {
		return nil, err // never planned: the request's error stands
	}
	msg := fmt.Sprintf("pctl %s: %v; the change to epoch %d is recorded and goes on in the broker: following it", cmd, oneLine(trimSentinel(err)), target)
	if bar != nil {
		bar.Printf("%s", msg)
	} else {
		fmt.Fprintln(e.stderr, msg)
	}
	t, err = c.FollowChange(wctx, req.Topic, target, show)
	if err != nil && wctx.Err() != nil {
		return gaveUp(err)
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
