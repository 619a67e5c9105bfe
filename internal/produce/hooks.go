package produce

import (
	"context"
	"time"
)

// HookRecord is called once for every record sent, when its fate is known (acknowledged:
// res.Err == nil; or failed), just before the record's own done callback, with the time from Send
// to then. rec must not be kept or changed. Only in-repo packages can implement it (its types are
// internal): the broker's produce service metrics (internal/metrics) do; client.Producer offers
// the public client.HookProduceRecordUnbuffered on its own records instead.
type HookRecord interface {
	OnProduceRecord(topic string, rec *Record, res Result, took time.Duration)
}

// HookRepartitioned is called when a producer, fenced by an epoch change, has moved its
// unacknowledged records to epoch `epoch` and re-sent `resent` of them in their original order.
// Its method set is client.HookProduceRepartitioned's, so a client hook is one of these too.
type HookRepartitioned interface {
	OnProduceRepartitioned(topic string, epoch int, resent int)
}

// hookProduced wraps a record's done callback so that the HookRecord hooks see its fate first.
func (p *Producer) hookProduced(rec Record, done func(Result)) func(Result) {
	return Observe(p.recordHooks, rec, done, func(h HookRecord, rec *Record, r Result, took time.Duration) {
		h.OnProduceRecord(p.topic, rec, r, took)
	})
}

// Observe wraps a record's done callback so that each of hs sees its fate first (call, with the
// time from now to then); without hooks it returns done as it is. The record is passed by value
// and copied only when there are hooks, so that a producer without hooks allocates nothing more
// per record. client.Producer uses it for its public record hook.
func Observe[R, H any](hs []H, rec R, done func(Result), call func(h H, rec *R, r Result, took time.Duration)) func(Result) {
	if len(hs) == 0 {
		return done
	}
	start := time.Now()
	kept := new(R)
	*kept = rec
	return func(r Result) {
		took := time.Since(start)
		for _, h := range hs {
			call(h, kept, r, took)
		}
		if done != nil {
			done(r)
		}
	}
}

// Hooks returns those of hooks that implement H.
func Hooks[H any](hooks []any) []H {
	var hs []H
	for _, h := range hooks {
		if h, ok := h.(H); ok {
			hs = append(hs, h)
		}
	}
	return hs
}

// Await sends one record with send and waits for its result (a producer's Produce).
func Await(ctx context.Context, send func(done func(Result)) error) (Result, error) {
	ch := make(chan Result, 1)
	if err := send(func(r Result) { ch <- r }); err != nil {
		return Result{}, err
	}
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func (p *Producer) hookRepartitioned(epoch, resent int) {
	for _, h := range p.opts.Hooks {
		if h, ok := h.(HookRepartitioned); ok {
			h.OnProduceRepartitioned(p.topic, epoch, resent)
		}
	}
}
