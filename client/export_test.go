package client

import (
	"context"
	"sync/atomic"
	"time"
)

// Test hooks (compiled only into this package's tests).

// KeepDrainedSetAcrossReset makes a member keep its drained-epochs cache across a reset:
// Pulsar's bug, for the control that shows the order checks catch it.
func KeepDrainedSetAcrossReset(o ConsumerOptions) ConsumerOptions {
	o.keepDrained = true
	return o
}

// ResetGroupPartially is ResetGroup by a resetter that stops (as if it crashed) after the commit
// point and `keys` partition keys.
func (c *Client) ResetGroupPartially(ctx context.Context, topic, group string, to SeekTarget, keys int) (*ResetResult, error) {
	return c.resetGroup(ctx, topic, group, to, "partial-resetter", keys)
}

// WithoutKeyRule turns off the per-key rule of fast batches on clusters (spec/protocol.md
// §5.1.2): the control for the failover tests, which must then see keys out of order.
func WithoutKeyRule(o ProducerOptions) ProducerOptions {
	o.test.NoKeyRule = true
	return o
}

// WithServerHoles makes the producer treat every stream as clustered (batches are read back
// before they count; the per-key rule holds unless WithoutKeyRule) and calls holes after each
// clean PubAck of a batch that stored stream sequences first..last, before the read-back: the
// test deletes stored records there, as nats-server 2.15.2 loses records it counted.
func WithServerHoles(o ProducerOptions, holes func(stream string, first, last uint64)) ProducerOptions {
	o.test.TestVerify, o.test.TestHoles = true, holes
	return o
}

// ReaderStall is how long a partition reader may hand nothing over (past records in its stream)
// before the watchdog replaces it.
const ReaderStall = readerStall

// SlowReaderRestarts makes every reader after a worker's first open d late, as on a server so
// loaded that making a consumer takes d.
func SlowReaderRestarts(o ConsumerOptions, d time.Duration) ConsumerOptions {
	o.testOpenDelay = d
	return o
}

// Listeners counts the client's registered violation and connection listeners.
func (c *Client) Listeners() (violation, conn int) {
	return c.listeners.Count()
}

// LoseCommitAnswers makes the member take every n-th stored commit of a partition's state as
// unanswered (stored, its answer lost), as a leader change or a cut connection can.
func LoseCommitAnswers(o ConsumerOptions, n int64) ConsumerOptions {
	var i atomic.Int64
	o.testLoseAnswer = func() bool { return i.Add(1)%n == 0 }
	return o
}

// FailReadBacks makes the first k reads of a partition's key after a refused commit fail, as a
// server that does not answer (or a member stopping) can.
func FailReadBacks(o ConsumerOptions, k int64) ConsumerOptions {
	var i atomic.Int64
	o.testFailReadBack = func() bool { return i.Add(1) <= k }
	return o
}

// SkewCoPartitioned makes a co-partitioned follower's leader rotate the owners it derives by n
// (a wrong assignment), for the control that shows the co-partitioning checks catch one.
func SkewCoPartitioned(o ConsumerOptions, n int) ConsumerOptions {
	o.testCoSkew = n
	return o
}

// IndependentCoPartitioned makes a co-partitioned follower compute its own sticky record, as two
// unrelated sticky groups would (the old code), for the control that shows the checks catch it.
func IndependentCoPartitioned(o ConsumerOptions) ConsumerOptions {
	o.testCoIndependent = true
	return o
}
