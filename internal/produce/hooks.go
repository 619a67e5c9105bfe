package produce

import "time"

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

// hookProduced wraps a record's done callback so that hooks see its fate first; without hooks it
// returns done as it is. The record is passed by value and copied only when a hook wants it, so
// that a producer without hooks allocates nothing more per record.
func (p *Producer) hookProduced(rec Record, done func(Result)) func(Result) {
	if len(p.opts.Hooks) == 0 {
		return done
	}
	var hs []HookRecord
	for _, h := range p.opts.Hooks {
		if h, ok := h.(HookRecord); ok {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		return done
	}
	start := time.Now()
	kept := new(Record)
	*kept = rec
	return func(r Result) {
		took := time.Since(start)
		for _, h := range hs {
			h.OnProduceRecord(p.topic, kept, r, took)
		}
		if done != nil {
			done(r)
		}
	}
}

func (p *Producer) hookRepartitioned(epoch, resent int) {
	for _, h := range p.opts.Hooks {
		if h, ok := h.(HookRepartitioned); ok {
			h.OnProduceRepartitioned(p.topic, epoch, resent)
		}
	}
}
