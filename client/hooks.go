package client

import (
	"time"

	"pctl.dev/pctl/internal/produce"
)

// Hook observes a producer or a consumer (ProducerOptions.Hooks, ConsumerOptions.Hooks), the way
// franz-go's kgo.Hook does: a hook is any value, and implements only the Hook* interfaces below
// that it cares about. Each implemented method of each hook is called in order, synchronously,
// from the producer's or consumer's own goroutines (several at once), so a hook must be quick,
// must not block and must not call back into the producer or consumer. Metrics (internal/metrics
// for the broker's produce service) and progress displays ('pctl produce', 'pctl consume') are
// built on them.
type Hook any

// HookProduceRecordUnbuffered is called once for every record sent, when its fate is known
// (acknowledged: res.Err == nil; or failed), just before the record's own done callback, with the
// time from Send to then. rec must not be kept or changed.
type HookProduceRecordUnbuffered interface {
	OnProduceRecordUnbuffered(topic string, rec *Record, res Result, took time.Duration)
}

// HookProduceRepartitioned is called when a producer, fenced by an epoch change, has moved its
// unacknowledged records to epoch `epoch` and re-sent `resent` of them in their original order.
// The producer engine (internal/produce) calls it, for the broker's produce service too.
type HookProduceRepartitioned interface {
	OnProduceRepartitioned(topic string, epoch int, resent int)
}

// HookConsumeRecord is called for every record a consumer delivered and its handler accepted
// (it will be committed), with the handler's time.
type HookConsumeRecord interface {
	OnConsumeRecord(topic, group string, m *Message, took time.Duration)
}

// HookGateWait is called when a record had to wait at the epoch gate (spec/protocol.md §6.5)
// for its key's older partitions to be drained by the group, with the time it waited.
type HookGateWait interface {
	OnGateWait(topic, group string, partition int, epoch int, waited time.Duration)
}

// HookLeaseChange is called when the member acquires (acquired true) or gives up a partition's
// lease.
type HookLeaseChange interface {
	OnLeaseChange(topic, group, member string, partition int, acquired bool)
}

// hookProduced wraps a record's done callback so that the HookProduceRecordUnbuffered hooks see
// its fate first (produce.Observe: without hooks done is returned as it is).
func (p *Producer) hookProduced(rec Record, done func(Result)) func(Result) {
	return produce.Observe(p.recordHooks, rec, done, func(h HookProduceRecordUnbuffered, rec *Record, r Result, took time.Duration) {
		h.OnProduceRecordUnbuffered(p.topic, rec, r, took)
	})
}

func (cn *Consumer) hookConsumed(m *Message, took time.Duration) {
	for _, h := range cn.opts.Hooks {
		if h, ok := h.(HookConsumeRecord); ok {
			h.OnConsumeRecord(cn.topic, cn.opts.Group, m, took)
		}
	}
}

func (cn *Consumer) hookGateWait(partition, epoch int, waited time.Duration) {
	for _, h := range cn.opts.Hooks {
		if h, ok := h.(HookGateWait); ok {
			h.OnGateWait(cn.topic, cn.opts.Group, partition, epoch, waited)
		}
	}
}

func (cn *Consumer) hookLease(partition int, acquired bool) {
	for _, h := range cn.opts.Hooks {
		if h, ok := h.(HookLeaseChange); ok {
			h.OnLeaseChange(cn.topic, cn.opts.Group, cn.opts.Member, partition, acquired)
		}
	}
}
