// Package testhook holds the hooks that this module's own tests and benchmarks set on the broker
// and the client, and users cannot: broker.Config.Testing and client.ConsumerOptions.Testing are
// pointers to its types, which no package outside the module can name, so they stay out of the
// public API in all but a field that only nil can be given to from outside; and the runtime's
// switches (WithUnguarded, WithReferenceFuel), which a context passed to runtime.New carries.
package testhook

import "time"

// Broker holds a broker's test hooks (broker.Config.Testing).
type Broker struct {
	// Step, if set, runs after each recorded step of an epoch change (state "planned" when a
	// request has planned it, then "created", "fenced", "active"). Returning an error stops the
	// change there, as if the broker had died: fault-injection tests use it, and this or another
	// broker finishes the change later (its retry loop, or Start). A backfill (spec/protocol.md
	// §10.3) calls it with "backfill-start" before its first copy, "backfill-copy" after each
	// copy is decided (stored or refused) and before its progress is recorded, "backfilling"
	// after each recorded progress, "backfill-final" when every copy is decided but the end is
	// not recorded, and "backfilled" after the end; an error stops the backfill there unrecorded.
	Step func(topic, state string) error
	// Partition, if set, runs before each partition's work in an epoch change's create (step
	// "create") and fence (step "fence") steps; returning an error fails that partition's work, as
	// a stream that cannot be created or moved would. Fault-injection tests use it to stop a step
	// half way, with some partitions done and others not.
	Partition func(topic, step string, q int) error
	// Create, if set, runs before each partition stream's creation in a topic's creation
	// (topic.new and the retry loop's finishing of it); an error fails that partition, as a
	// stream request the cluster does not answer in time would.
	Create func(topic string, q int) error
	// ProduceResult, if set, runs in the produce service (spec/protocol.md §5.2) when a record of
	// a thin producer has its result from the producer engine (partition and epoch: where it was
	// produced), before the reply; a non-nil error replaces the result as the record's failure.
	// Tests use it to fail a record with an engine error that a real server gives only under
	// faults (internal/produce's InProcessError, spec/protocol.md §5.1.5).
	ProduceResult func(topic, producer string, seq uint64, partition, epoch int) error
	// ProduceAckTimeout, if positive, replaces the produce service's acknowledgement timeout
	// (5 s): how long a fast batch waits for a reply before it is settled. Tests of a real
	// 10158 shorten it, so that the service's re-sends reach a stream leader cut off from its
	// followers before the leader gives up its leadership for want of a quorum (about 10 s).
	ProduceAckTimeout time.Duration
}

// AckTimeout returns b's ProduceAckTimeout, or def when b is nil or it is not set.
func (b *Broker) AckTimeout(def time.Duration) time.Duration {
	if b == nil || b.ProduceAckTimeout <= 0 {
		return def
	}
	return b.ProduceAckTimeout
}

// ProduceResultHook returns b's ProduceResult (nil for a nil b).
func (b *Broker) ProduceResultHook() func(topic, producer string, seq uint64, partition, epoch int) error {
	if b == nil {
		return nil
	}
	return b.ProduceResult
}

// StepHook returns b's Step (nil for a nil b).
func (b *Broker) StepHook() func(topic, state string) error {
	if b == nil {
		return nil
	}
	return b.Step
}

// CreateHook returns b's Create (nil for a nil b).
func (b *Broker) CreateHook() func(topic string, q int) error {
	if b == nil {
		return nil
	}
	return b.Create
}

// PartitionHook returns b's Partition (nil for a nil b).
func (b *Broker) PartitionHook() func(topic, step string, q int) error {
	if b == nil {
		return nil
	}
	return b.Partition
}

// Steps is a Broker with the step hook f.
func Steps(f func(topic, state string) error) *Broker { return &Broker{Step: f} }

// Consumer holds a consumer's test hooks (client.ConsumerOptions.Testing).
type Consumer struct {
	// DisableGating delivers new-epoch records without waiting for their parents, for the
	// benchmarks that measure what gating costs (their baseline): order is NOT guaranteed then.
	DisableGating bool
}

// Ungated reports whether c turns the epoch gate off (false for a nil c).
func (c *Consumer) Ungated() bool { return c != nil && c.DisableGating }
