package broker

import (
	"context"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner"
)

// Hooks observe the broker's work (Config.Hooks), as franz-go's kgo.Hook does for its client: a
// hook is any value, and implements only the interfaces below that it cares about; the broker
// calls each implemented method of each hook, in order, synchronously, so a hook must be quick
// and must not block (count, observe, return). Metrics come out this way (internal/metrics).
// The produce service's producers (internal/produce) call a hook's OnProduceRepartitioned
// (client.HookProduceRepartitioned) and, for each record, OnProduceRecord of the engine's
// produce.HookRecord, which in-repo metrics (internal/metrics) implement.
//
// Hooks run concurrently from many goroutines.

// HookPluginCall is called after every partition call the broker makes for the produce service
// (one key, or one batch), with the call's time, the work units (fuel, spec/abi-v1.md §7.2) it
// spent (-1 when it is not known: a native built-in, or a call that stopped with an error), and
// its error.
type HookPluginCall interface {
	OnPluginCall(plugin string, keys int, took time.Duration, fuel int64, err error)
}

// HookEpochStep is called when an epoch change of topic to epoch `to` finishes a step ("create":
// planned to created, "fence": created to fenced, "activate": fenced to active) or fails one
// (err != nil; the change stays at its recorded state and is retried).
type HookEpochStep interface {
	OnEpochStep(topic string, to int, step string, took time.Duration, err error)
}

// HookEpochChange is called when an epoch change becomes active, with its whole duration
// (from planning to activation, across broker restarts).
type HookEpochChange interface {
	OnEpochChange(topic string, to int, took time.Duration)
}

// HookAdmin is called after every admin request (topic create, delete, repartition, set; plugin
// upload, delete; credentials), with its outcome.
type HookAdmin interface {
	OnAdmin(op string, took time.Duration, err error)
}

// HookBackfill is called after a backfill's progress is recorded (spec/protocol.md §10.3) and
// when it ends: done of partitions old partitions are complete.
type HookBackfill interface {
	OnBackfill(topic string, epoch int, copied, newer int64, done, partitions int, finished bool)
}

func (b *Broker) hookBackfill(topic string, epoch int, bf *wire.Backfill, done int) {
	for _, h := range b.cfg.Hooks {
		if h, ok := h.(HookBackfill); ok {
			h.OnBackfill(topic, epoch, bf.Copied, bf.Newer, done, len(bf.Done), bf.State == wire.BackfillDone)
		}
	}
}

func (b *Broker) hookEpochStep(topic string, to int, step string, took time.Duration, err error) {
	for _, h := range b.cfg.Hooks {
		if h, ok := h.(HookEpochStep); ok {
			h.OnEpochStep(topic, to, step, took, err)
		}
	}
}

func (b *Broker) hookEpochChange(topic string, to int, took time.Duration) {
	for _, h := range b.cfg.Hooks {
		if h, ok := h.(HookEpochChange); ok {
			h.OnEpochChange(topic, to, took)
		}
	}
}

func (b *Broker) hookAdmin(op string, took time.Duration, err error) {
	for _, h := range b.cfg.Hooks {
		if h, ok := h.(HookAdmin); ok {
			h.OnAdmin(op, took, err)
		}
	}
}

// pluginHooks returns the hooks that want plugin calls (nil: none, and calls go unmeasured).
func (b *Broker) pluginHooks() []HookPluginCall {
	var hs []HookPluginCall
	for _, h := range b.cfg.Hooks {
		if h, ok := h.(HookPluginCall); ok {
			hs = append(hs, h)
		}
	}
	return hs
}

// meteredPartitioner measures the calls the produce service makes through a shared pooled
// partitioner: time and fuel per call, and failures. Close does nothing: the pool is the broker's.
type meteredPartitioner struct {
	*partitioner.WASM
	hooks []HookPluginCall
}

// metered wraps w for the produce service when some hook wants plugin calls.
func (b *Broker) metered(w *partitioner.WASM) partitioner.Partitioner {
	hs := b.pluginHooks()
	if len(hs) == 0 {
		return w
	}
	return &meteredPartitioner{WASM: w, hooks: hs}
}

func (m *meteredPartitioner) Close() error { return nil }

func (m *meteredPartitioner) Partition(key []byte, n int32) (int32, error) {
	start := time.Now()
	in, err := m.Pool().Acquire()
	if err != nil {
		m.report(1, start, -1, err)
		return 0, err
	}
	p, err := in.Partition(key, n)
	fuel := in.WorkUsed()
	in.Release()
	m.report(1, start, fuel, err)
	return p, err
}

func (m *meteredPartitioner) PartitionBatch(keys [][]byte, n int32, out []int32) error {
	start := time.Now()
	in, err := m.Pool().Acquire()
	if err != nil {
		m.report(len(keys), start, -1, err)
		return err
	}
	err = in.PartitionBatch(keys, n, out)
	fuel := in.WorkUsed()
	in.Release()
	m.report(len(keys), start, fuel, err)
	return err
}

func (m *meteredPartitioner) report(keys int, start time.Time, fuel int64, err error) {
	took := time.Since(start)
	for _, h := range m.hooks {
		h.OnPluginCall(m.Name(), keys, took, fuel, err)
	}
}

// meteredNative measures the produce service's calls of a native built-in (Config.NativeBuiltins):
// time and failures; it spends no work units (fuel -1).
type meteredNative struct {
	partitioner.Partitioner
	hooks []HookPluginCall
}

func (m *meteredNative) Close() error { return nil }

func (m *meteredNative) Partition(key []byte, n int32) (int32, error) {
	start := time.Now()
	p, err := m.Partitioner.Partition(key, n)
	m.report(1, start, err)
	return p, err
}

func (m *meteredNative) PartitionBatch(keys [][]byte, n int32, out []int32) error {
	start := time.Now()
	err := m.Partitioner.PartitionBatch(keys, n, out)
	m.report(len(keys), start, err)
	return err
}

func (m *meteredNative) report(keys int, start time.Time, err error) {
	took := time.Since(start)
	for _, h := range m.hooks {
		h.OnPluginCall(m.Name(), keys, took, -1, err)
	}
}

// producePartitioner is what the produce service's producers partition with: with
// Config.NativeBuiltins a built-in's Go implementation for an epoch whose module is exactly a
// built-in's without config (partitioner.NativeFor, spec/builtins.md), else the module.
func (b *Broker) producePartitioner(ctx context.Context, wp wire.Partitioner) (partitioner.Partitioner, error) {
	if b.cfg.NativeBuiltins {
		if n, ok := partitioner.NativeFor(wp.Digest, wp.Config); ok {
			if hs := b.pluginHooks(); len(hs) > 0 {
				return &meteredNative{Partitioner: n, hooks: hs}, nil
			}
			return n, nil
		}
	}
	w, err := b.partitionerFor(ctx, wp)
	if err != nil {
		return nil, err
	}
	return b.metered(w), nil
}
