package client

// The Consumer (consumer.go): the watchdog of stalled partition readers.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// watchdog replaces partition readers that stopped handing records over although their stream
// holds records past the member's position, whatever the cause (a pull request lost with a node,
// a consumer deleted, a connection that froze): a member that owns a partition reads its new
// records within about readerStall plus the time to create a consumer.
//
// A kick names the reader it was meant for, and is taken only while the worker still waits for
// that reader at the position and since the moment the watchdog saw: the check reads the streams
// over the network, and meanwhile the worker may have opened a new reader, or received a record.
// The time a worker spends opening a reader is not the reader's silence (an open that fails is
// logged and retried by the worker itself). Before both rules, under heavy load (a consumer
// create taking longer than readerStall) a kick sent while the worker opened the next reader
// killed that reader at once, and so on for ever at one position (issue 10: "the watchdog's
// restart does not help"). A reader replaced again at the same position gets twice as long
// before the next check (up to readerStallMax): on a server that slow, every new reader needs
// more than readerStall for its first record.
func (cn *Consumer) watchdog(ctx context.Context) {
	t := time.NewTicker(readerStall / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cn.mu.Lock()
		var stalled []*worker
		var seen []readerStallSeen
		for _, w := range cn.owned {
			if s, ok := w.stalled(); ok {
				stalled = append(stalled, w)
				seen = append(seen, s)
			}
		}
		cn.mu.Unlock()
		if len(stalled) == 0 {
			continue
		}
		last := cn.lastSequences(ctx, stalled)
		for i, w := range stalled {
			s := seen[i]
			l, ok := last[w.partition]
			if !ok || l <= s.pos {
				continue
			}
			again, ok := w.kickIf(s)
			if !ok {
				continue // it received something, or has another reader, meanwhile
			}
			if again == 1 {
				cn.opts.Logf("member %s: partition %d: the reader handed nothing over for %v while the stream holds records up to %d past position %d; reading again",
					cn.opts.Member, w.partition, s.waited.Round(time.Millisecond), l, s.pos)
				continue
			}
			cn.opts.Logf("member %s: partition %d: the reader handed nothing over for %v while the stream holds records up to %d past position %d; reading again (the %s reader at this position: %s; the next one gets %v)",
				cn.opts.Member, w.partition, s.waited.Round(time.Millisecond), l, s.pos, ordinal(again), cn.readerReport(ctx, s.cons, s.pos), stallLimit(again+1))
		}
	}
}

// readerStallSeen is what the watchdog saw of a silent reader: which one (n, and its consumer),
// waited for since when and how long, at which position, after how many replacements there.
type readerStallSeen struct {
	n      uint64
	cons   jetstream.Consumer
	since  time.Time
	waited time.Duration
	pos    uint64
}

// stallLimit is how long the reader made after restarts replacements at one position may stay
// silent: readerStall, doubled for each replacement after the first.
func stallLimit(restarts int) time.Duration {
	d := readerStall
	for i := 1; i < restarts && d < readerStallMax; i++ {
		d *= 2
	}
	return min(d, readerStallMax)
}

func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return strconv.Itoa(n) + "th"
	case n%10 == 1:
		return strconv.Itoa(n) + "st"
	case n%10 == 2:
		return strconv.Itoa(n) + "nd"
	case n%10 == 3:
		return strconv.Itoa(n) + "rd"
	}
	return strconv.Itoa(n) + "th"
}

// readerReport says, for the log, what the server says of a silent reader's consumer: where it
// runs, what it delivered, what it has pending and how many pull requests wait, so that a
// position that repeats says why.
func (cn *Consumer) readerReport(ctx context.Context, cons jetstream.Consumer, pos uint64) string {
	if cons == nil {
		return "no consumer to ask"
	}
	ctx, cancel := cn.op(ctx)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Sprintf("its consumer does not answer (%v)", err)
	}
	on := ""
	if info.Cluster != nil && info.Cluster.Leader != "" {
		on = " on " + info.Cluster.Leader
	}
	var why string
	switch {
	case info.NumPending == 0:
		why = "the node it runs on has no record past the position for it (a lagging replica, or records deleted or outside its filter)"
	case info.NumWaiting == 0:
		why = "no pull request waits (lost)"
	default:
		why = "records pending and pull requests waiting: the server does not deliver (too slow, or paused)"
	}
	return fmt.Sprintf("its consumer %s%s starts at %d, delivered up to stream sequence %d, has %d pending and %d pull requests waiting: %s",
		info.Name, on, info.Config.OptStartSeq, info.Delivered.Stream, info.NumPending, info.NumWaiting, why)
}

// lastSequences returns the last stream sequence of the given workers' partitions (those it could
// read): one stream list request for the topic, or one info request per stream if listing fails.
func (cn *Consumer) lastSequences(ctx context.Context, ws []*worker) map[int]uint64 {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	out, err := cn.streamEnds(ctx)
	if err == nil {
		return out
	}
	for _, w := range ws {
		s, err := cn.c.js.Stream(ctx, wire.StreamName(cn.topic, w.partition))
		if err == nil && s.CachedInfo().State.Msgs > 0 {
			out[w.partition] = s.CachedInfo().State.LastSeq
		}
	}
	return out
}

// streamEnds returns the last stream sequence of each partition stream of the topic that holds
// records, from one stream list request.
func (cn *Consumer) streamEnds(ctx context.Context) (map[int]uint64, error) {
	out := map[int]uint64{}
	prefix := wire.StreamPrefix + cn.topic + "_"
	lister := cn.c.js.ListStreams(ctx, jetstream.WithStreamListSubject(wire.DataPrefix+"."+cn.topic+".>"))
	for info := range lister.Info() {
		if q, err := strconv.Atoi(strings.TrimPrefix(info.Config.Name, prefix)); err == nil && strings.HasPrefix(info.Config.Name, prefix) && info.State.Msgs > 0 {
			out[q] = info.State.LastSeq
		}
	}
	return out, lister.Err()
}
