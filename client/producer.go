package client

import (
	"context"
	"sync"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/produce"
)

// Record is one record to produce.
type Record struct {
	Key   []byte
	Value []byte
	// NoKey marks a keyless record: the producer spreads keyless records over the partitions and
	// promises no order for them. An empty Key without NoKey is the empty key, which is a key.
	NoKey bool
	// Tombstone marks a record that deletes its key (spec/protocol.md §10.2): it has no Value.
	// On a compacted topic it removes the key's value at once and is itself removed after the
	// topic's delete retention.
	Tombstone bool
}

// Result reports the fate of one record. Err == nil means the broker acknowledged it: it is
// stored and will be delivered to every consumer group. Its fields:
//
//   - Partition: the partition (stream) the record is stored in; Epoch: the epoch it was
//     produced under.
//   - Seq: the record's stream sequence when the producer learned it, else 0 ("stored, sequence
//     not reported"). A fast batch's PubAck names the stream sequence of its last record only,
//     so Seq is set for the last record of a batch (always for a record sent alone) and for a
//     record found by a verification after a failure (spec/protocol.md §5.1.2).
//   - ProducerSeq: this producer's sequence number of the record (1, 2, ...).
//   - Duplicate: the server reported the record as already stored, and the stored message was
//     checked to be this very record (no second copy was written).
//   - Err: why the record failed.
type Result = produce.Result

// ProducerOptions configures a producer. Zero values mean defaults.
type ProducerOptions struct {
	// ID identifies the producer in record headers and deduplication ids. Default: random.
	ID string
	// ContentTokens makes each record's deduplication token a digest of its key and value
	// (RecordToken) instead of random: a re-run of the same input under the same ID is then
	// deduplicated record by record (what 'pctl produce --producer-id' promises), at the price
	// that a client who knows a record's key and value before it is stored can predict its id
	// (spec/protocol.md §5.1.4). Default false: random tokens.
	ContentTokens bool
	// MaxInFlight bounds, per partition, the records sent beyond the last one the server
	// confirmed persisted. Default 1024.
	MaxInFlight int
	// MaxBuffered bounds records sent but not yet acknowledged; Send blocks beyond it.
	// Default 65536.
	MaxBuffered int
	// BatchSize is the most records in one fast batch before the producer commits it (it also
	// commits whenever its queue for the partition runs empty). Default 4096.
	BatchSize int
	// StallTimeout: when records of a partition see no reply for this long, the producer re-reads
	// the topic's descriptor (a fenced subject on a cluster may answer nothing). Default 250ms.
	// After the connection's AckTimeout without a reply the producer settles the batch (§5.1.2).
	StallTimeout time.Duration
	// Logf receives the producer's decisions after failures (settle, re-send, repartition).
	Logf func(format string, args ...any)
	// Hooks observe the producer (hooks.go). Default: none.
	Hooks []Hook
	// CloseIdle: Close stops waiting for acknowledgements once none came for this long, and
	// fails the records still outstanding. Default 30s.
	CloseIdle time.Duration

	// test holds the engine's test hooks (produce.Options NoKeyRule, TestVerify, TestHoles),
	// set by this package's tests (export_test.go).
	test produce.Options
}

// Producer produces keyed records to one topic, partitioning them on the client with the
// topic's WebAssembly module, and publishes them in JetStream fast batches (spec/protocol.md
// §5.1): one sink per partition sends its records in order, one batch open at a time, many
// records in flight inside it.
//
// Order: records with the same key are stored in the order Send was called, and a consumer group
// delivers them in that order, across epoch changes, connection losses and stream-leader
// changes: the server stores a contiguous prefix of each batch, and after any failure the sink
// learns that prefix (from the batch's PubAck, by closing the batch, or by reading the partition
// back) before it re-sends the rest, in order, in a new batch. When the topic's epoch changed,
// every unacknowledged record is re-partitioned and re-sent in the original order under the new
// epoch. A re-send carries the record's original deduplication id (with a random token, so no
// other client can claim it first), so a record is never stored twice within JetStream's
// deduplication window, and a duplicate acknowledgement counts only once the stored message was
// checked to be this record.
//
// The engine is internal/produce's (shared with the broker's produce service); a Producer is
// its public face. A Producer is safe for concurrent use; records sent from different goroutines are ordered by
// the order their Send calls took effect.
type Producer struct {
	e           *produce.Producer
	topic       string
	opts        ProducerOptions
	recordHooks []HookProduceRecordUnbuffered // opts.Hooks that want records
}

// ErrProducerClosed is what Send returns after Close: a bad request (errors.Is works with both).
var ErrProducerClosed = produce.ErrProducerClosed

// NewProducer fetches the topic's descriptor and partitioner and returns a producer. It fails
// when the server is older than nats-server 2.14 (fast batches, spec/protocol.md §5.1).
func (c *Client) NewProducer(ctx context.Context, topic string, opts ProducerOptions) (*Producer, error) {
	hooks := make([]any, len(opts.Hooks))
	for i, h := range opts.Hooks {
		hooks[i] = h
	}
	e, err := produce.New(ctx, c.produceConn(), topic, produce.Options{
		ID: opts.ID, ContentTokens: opts.ContentTokens, MaxInFlight: opts.MaxInFlight, MaxBuffered: opts.MaxBuffered,
		BatchSize: opts.BatchSize, StallTimeout: opts.StallTimeout, Logf: opts.Logf, Hooks: hooks, CloseIdle: opts.CloseIdle,
		NoKeyRule: opts.test.NoKeyRule, TestVerify: opts.test.TestVerify, TestHoles: opts.test.TestHoles,
	})
	if err != nil {
		return nil, err
	}
	return &Producer{e: e, topic: topic, opts: opts, recordHooks: produce.Hooks[HookProduceRecordUnbuffered](hooks)}, nil
}

// produceConn is the client's connection as the producer engine sees it.
func (c *Client) produceConn() *produce.Conn {
	c.pconnOnce.Do(func() {
		c.pconn = &produce.Conn{NC: c.nc, JS: c.js, Timeout: c.opts.Timeout, AckTimeout: c.opts.AckTimeout,
			Topic: func(ctx context.Context, topic string) (*wire.Topic, error) {
				t, _, err := c.Topic(ctx, topic)
				return t, err
			},
			Partitioner: c.partitionerFor, // the native fast path when Options.NativeBuiltins (admin.go)
			OnViolation: c.onViolation, OnConnEvent: c.onConnEvent}
	})
	return c.pconn
}

// ID returns the producer's id.
func (p *Producer) ID() string { return p.e.ID() }

// Resent returns how many records were re-sent under a new epoch after a fence.
func (p *Producer) Resent() int64 { return p.e.Resent() }

// Settled returns how many fast batches the producer had to settle after an anomaly (a gap, a
// refusal, a lost connection, a timeout, a fence).
func (p *Producer) Settled() int64 { return p.e.Settled() }

// Holes returns how many records the server acknowledged in a committed fast batch without
// storing them (a nats-server 2.15 fault after a stream leader's term change), found by the
// producer's check on clusters and sent again. Their keys stay in order: such a record is the
// only one of its key in its batch, and its re-send goes ahead of that key's later records
// (spec/protocol.md §5.1.2).
func (p *Producer) Holes() int64 { return p.e.Holes() }

// Epoch returns the epoch the producer currently produces to.
func (p *Producer) Epoch() int { return p.e.Epoch() }

// Send queues a record. done, if not nil, is called exactly once with the record's fate, from a
// producer goroutine (records of one partition in order). Send blocks while MaxBuffered records
// are unacknowledged. It fails at once for a record the producer can never send (a key over 64
// KiB, a closed producer).
func (p *Producer) Send(ctx context.Context, rec Record, done func(Result)) error {
	done = p.hookProduced(rec, done) // hooks.go
	return p.e.Send(ctx, engineRecord(rec), done)
}

// Produce sends one record and waits for its result.
func (p *Producer) Produce(ctx context.Context, rec Record) (Result, error) {
	return produce.Await(ctx, func(done func(Result)) error { return p.Send(ctx, rec, done) })
}

// Flush waits until every record sent so far is acknowledged or failed.
func (p *Producer) Flush(ctx context.Context) error { return p.e.Flush(ctx) }

// Close flushes and stops the producer. It waits for the records sent so far until ctx ends, or
// until no record was acknowledged or failed for ProducerOptions.CloseIdle (the broker or the
// cluster is gone: a producer retries for ever otherwise); the records still unacknowledged then
// fail (their callbacks run before Close returns). A second Close, or one concurrent with the
// first, is a no-op.
func (p *Producer) Close(ctx context.Context) error { return p.e.Close(ctx) }

func engineRecord(rec Record) produce.Record {
	return produce.Record{Key: rec.Key, Value: rec.Value, NoKey: rec.NoKey, Tombstone: rec.Tombstone}
}

// checkCompaction refuses what a tombstone or a compacted topic cannot carry (spec/protocol.md §10).
func checkCompaction(topic string, compact, backfill bool, rec Record) error {
	return produce.CheckCompaction(topic, compact, backfill, engineRecord(rec))
}

// waitCond waits on c (whose lock is held) until signalled or ctx is done.
func waitCond(ctx context.Context, c *sync.Cond) { produce.WaitCond(ctx, c) }
