// Package metrics exposes a broker's work as Prometheus metrics (github.com/prometheus/client_golang),
// for 'pctl serve --http ADDR' at /metrics. Names follow Prometheus's conventions: the pctl_
// prefix, base units (seconds, bytes), _total for counters.
//
// Two sources feed it. Events come through hooks (broker.Config.Hooks, and the client hooks of the
// broker's produce service): a Metrics value implements broker.HookPluginCall, HookEpochStep,
// HookEpochChange, HookAdmin, HookBackfill and the producer engine's produce.HookRecord, HookRepartitioned.
// State comes from broker.Status snapshots taken at scrape time (SetSource): topics, epochs,
// records per epoch, stored bytes, consumer groups' lag, gate waits and lease changes.
//
// Cardinality: series are per topic, per (topic, epoch) for the current epoch and the three before
// it, and per (topic, group). Per-partition series — records and bytes per partition, a group's lag
// and position per partition — only with Options.PerPartition ('pctl serve --metrics-partitions'):
// a 16,384-partition topic would otherwise add 16,384 series per family. Histograms are labelled
// by topic, plugin or step only.
//
// Backfill (spec/protocol.md §10.3) comes through broker.HookBackfill: per topic, the epoch being
// backfilled, copies and refusals so far, old partitions done, and whether it runs.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/produce"
	"pctl.dev/pctl/runtime"
)

// Options configures New.
type Options struct {
	// PerPartition adds the per-partition series (see the package comment). Default off.
	PerPartition bool
	// Epochs is how many epochs per topic get series of their own, the newest. Default 4.
	Epochs int
}

// Metrics is a registry of pctl's metrics and the hooks that feed it. Safe for concurrent use.
type Metrics struct {
	opts   Options
	reg    *prometheus.Registry
	source func(ctx context.Context) (*broker.Status, error)

	produceRecords *prometheus.CounterVec
	produceBytes   *prometheus.CounterVec
	producePartRec *prometheus.CounterVec
	producePartB   *prometheus.CounterVec
	produceTook    *prometheus.HistogramVec
	repartitions   *prometheus.CounterVec
	resent         *prometheus.CounterVec
	pluginTook     *prometheus.HistogramVec
	pluginFuel     *prometheus.HistogramVec
	pluginKeys     *prometheus.CounterVec
	pluginFailures *prometheus.CounterVec
	stepTook       *prometheus.HistogramVec
	stepFailures   *prometheus.CounterVec
	changeTook     prometheus.Histogram
	changes        *prometheus.CounterVec
	adminRequests  *prometheus.CounterVec
	adminTook      *prometheus.HistogramVec
	backfill       *prometheus.GaugeVec // by topic and what (epoch, copied, refused, partitions_done, partitions, running)

	seriesCache sync.Map // produceKey -> *produceSeries
	pluginCache sync.Map // plugin name -> *pluginSeries

	mu     sync.Mutex
	owners map[[3]string]string // (topic id, group, partition) -> owner last seen
	leases map[[2]string]float64
}

type produceKey struct {
	topic            string
	epoch, partition int
}

type produceSeries struct {
	acked, dup, failed, bytes prometheus.Counter
	partRec, partBytes        prometheus.Counter // nil unless PerPartition
	took                      prometheus.Observer
}

// New returns a Metrics with its own registry (Go runtime and process collectors included).
func New(opts Options) *Metrics {
	if opts.Epochs <= 0 {
		opts.Epochs = 4
	}
	m := &Metrics{opts: opts, reg: prometheus.NewRegistry(), owners: map[[3]string]string{}, leases: map[[2]string]float64{}}
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	m.produceRecords = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_produce_service_records_total",
		Help: "Records the broker's produce service (broker-side partitioning) finished, by topic, epoch and result (acked, duplicate, failed)."}, []string{"topic", "epoch", "result"})
	m.produceBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_produce_service_bytes_total",
		Help: "Key and value bytes of the records the produce service stored, by topic and epoch."}, []string{"topic", "epoch"})
	m.producePartRec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_produce_service_partition_records_total",
		Help: "Records the produce service stored, by topic, epoch and partition (only with per-partition metrics)."}, []string{"topic", "epoch", "partition"})
	m.producePartB = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_produce_service_partition_bytes_total",
		Help: "Key and value bytes the produce service stored, by topic, epoch and partition (only with per-partition metrics)."}, []string{"topic", "epoch", "partition"})
	m.produceTook = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pctl_produce_service_duration_seconds",
		Help: "Time from a produce request's arrival to the record's acknowledgement or failure, by topic.", Buckets: latency}, []string{"topic"})
	m.repartitions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_produce_service_repartitions_total",
		Help: "Times the produce service was fenced by an epoch change and moved its unacknowledged records to the new epoch."}, []string{"topic"})
	m.resent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_produce_service_resent_records_total",
		Help: "Records the produce service re-sent under a new epoch after a fence, in their original order."}, []string{"topic"})
	m.pluginTook = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pctl_plugin_call_duration_seconds",
		Help:    "Time of one partition call (one key or one batch) into a WebAssembly partitioner, by plugin name.",
		Buckets: []float64{1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 5e-5, 1e-4, 1e-3, 1e-2, .1, 1}}, []string{"plugin"})
	m.pluginFuel = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pctl_plugin_call_fuel_units",
		Help:    "Work units (fuel, spec/abi-v1.md §7.2) one partition call spent, by plugin name; the budget is 2^31 per call.",
		Buckets: prometheus.ExponentialBuckets(16, 4, 14)}, []string{"plugin"})
	m.pluginKeys = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_plugin_call_keys_total",
		Help: "Keys partitioned by the broker, by plugin name."}, []string{"plugin"})
	m.pluginFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_plugin_failures_total",
		Help: "Failed partition calls by plugin name and class (time_limit, memory_limit, call_depth, trap, out_of_range, error_code, exit, other)."}, []string{"plugin", "class"})
	m.stepTook = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pctl_epoch_change_step_duration_seconds",
		Help: "Time of one epoch-change step (create, fence, activate) that was recorded, by step.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"step"})
	m.stepFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_epoch_change_step_failures_total",
		Help: "Epoch-change steps that failed and stay at their recorded state to be retried, by step."}, []string{"step"})
	m.changeTook = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pctl_epoch_change_duration_seconds",
		Help: "Time of a whole epoch change, from planning to activation.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)})
	m.changes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_epoch_changes_total",
		Help: "Epoch changes this broker activated, by topic."}, []string{"topic"})
	m.adminRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pctl_admin_requests_total",
		Help: "Admin requests answered, by operation (topic.create, plugin.upload, ...) and code (ok or the error code)."}, []string{"op", "code"})
	m.adminTook = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pctl_admin_request_duration_seconds",
		Help: "Time to answer an admin request, by operation.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"op"})
	m.backfill = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pctl_backfill",
		Help: "The last backfill (spec/protocol.md §10.3) of a topic this broker reported, by topic and what: epoch (being backfilled), copied, refused (the key had a newer record), partitions_done, partitions (of the old epoch), running (1 or 0)."}, []string{"topic", "what"})
	m.reg.MustRegister(m.backfill)
	m.reg.MustRegister(m.produceRecords, m.produceBytes, m.produceTook, m.repartitions, m.resent, m.pluginTook, m.pluginFuel,
		m.pluginKeys, m.pluginFailures, m.stepTook, m.stepFailures, m.changeTook, m.changes, m.adminRequests, m.adminTook,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &stateCollector{m: m})
	if opts.PerPartition {
		m.reg.MustRegister(m.producePartRec, m.producePartB)
	}
	return m
}

// Registry returns the registry, for tests and for adding collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus's exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorLog: nil})
}

// SetSource sets where state metrics come from: a broker.Status snapshot per scrape (the status
// page's cache, so both see the same state). Without a source only event metrics are exported.
func (m *Metrics) SetSource(f func(ctx context.Context) (*broker.Status, error)) {
	m.mu.Lock()
	m.source = f
	m.mu.Unlock()
}

func (m *Metrics) series(topic string, epoch, partition int) *produceSeries {
	k := produceKey{topic, epoch, -1}
	if m.opts.PerPartition {
		k.partition = partition
	}
	if s, ok := m.seriesCache.Load(k); ok {
		return s.(*produceSeries)
	}
	e := strconv.Itoa(epoch)
	s := &produceSeries{acked: m.produceRecords.WithLabelValues(topic, e, "acked"), dup: m.produceRecords.WithLabelValues(topic, e, "duplicate"),
		failed: m.produceRecords.WithLabelValues(topic, e, "failed"), bytes: m.produceBytes.WithLabelValues(topic, e), took: m.produceTook.WithLabelValues(topic)}
	if m.opts.PerPartition {
		p := strconv.Itoa(partition)
		s.partRec, s.partBytes = m.producePartRec.WithLabelValues(topic, e, p), m.producePartB.WithLabelValues(topic, e, p)
	}
	v, _ := m.seriesCache.LoadOrStore(k, s)
	return v.(*produceSeries)
}

// OnProduceRecord implements produce.HookRecord for the produce service's producers.
func (m *Metrics) OnProduceRecord(topic string, rec *produce.Record, res produce.Result, took time.Duration) {
	s := m.series(topic, res.Epoch, res.Partition)
	s.took.Observe(took.Seconds())
	switch {
	case res.Err != nil:
		s.failed.Inc()
		return
	case res.Duplicate:
		s.dup.Inc()
	default:
		s.acked.Inc()
	}
	n := float64(len(rec.Key) + len(rec.Value))
	s.bytes.Add(n)
	if s.partRec != nil {
		s.partRec.Inc()
		s.partBytes.Add(n)
	}
}

// OnProduceRepartitioned implements client.HookProduceRepartitioned.
func (m *Metrics) OnProduceRepartitioned(topic string, epoch, resent int) {
	m.repartitions.WithLabelValues(topic).Inc()
	m.resent.WithLabelValues(topic).Add(float64(resent))
}

// OnPluginCall implements broker.HookPluginCall.
func (m *Metrics) OnPluginCall(plugin string, keys int, took time.Duration, fuel int64, err error) {
	ps := m.pluginSeries(plugin)
	ps.took.Observe(took.Seconds())
	if fuel >= 0 {
		ps.fuel.Observe(float64(fuel))
	}
	ps.keys.Add(float64(keys))
	if err != nil {
		m.pluginFailures.WithLabelValues(plugin, FailureClass(err)).Inc()
	}
}

type pluginSeries struct {
	took, fuel prometheus.Observer
	keys       prometheus.Counter
}

func (m *Metrics) pluginSeries(plugin string) *pluginSeries {
	if s, ok := m.pluginCache.Load(plugin); ok {
		return s.(*pluginSeries)
	}
	s := &pluginSeries{took: m.pluginTook.WithLabelValues(plugin), fuel: m.pluginFuel.WithLabelValues(plugin), keys: m.pluginKeys.WithLabelValues(plugin)}
	v, _ := m.pluginCache.LoadOrStore(plugin, s)
	return v.(*pluginSeries)
}

// FailureClass names the class of a plugin call's failure, from the runtime's sentinels.
func FailureClass(err error) string {
	for _, c := range []struct {
		err   error
		class string
	}{
		{runtime.ErrTimeLimit, "time_limit"}, {runtime.ErrMemoryLimit, "memory_limit"}, {runtime.ErrCallDepth, "call_depth"},
		{runtime.ErrOutOfRange, "out_of_range"}, {runtime.ErrPluginCode, "error_code"}, {runtime.ErrExit, "exit"},
		{runtime.ErrTrap, "trap"}, {runtime.ErrKeyTooLong, "key_too_long"}, {runtime.ErrClosed, "closed"},
	} {
		if errors.Is(err, c.err) {
			return c.class
		}
	}
	return "other"
}

// OnEpochStep implements broker.HookEpochStep.
func (m *Metrics) OnEpochStep(topic string, to int, step string, took time.Duration, err error) {
	if err != nil {
		m.stepFailures.WithLabelValues(step).Inc()
		return
	}
	m.stepTook.WithLabelValues(step).Observe(took.Seconds())
}

// OnEpochChange implements broker.HookEpochChange.
func (m *Metrics) OnEpochChange(topic string, to int, took time.Duration) {
	m.changeTook.Observe(took.Seconds())
	m.changes.WithLabelValues(topic).Inc()
}

// OnBackfill implements broker.HookBackfill: called when a backfill's progress is recorded and
// when it ends.
func (m *Metrics) OnBackfill(topic string, epoch int, copied, newer int64, done, partitions int, finished bool) {
	running := 1.0
	if finished {
		running = 0
	}
	for what, v := range map[string]float64{"epoch": float64(epoch), "copied": float64(copied), "refused": float64(newer),
		"partitions_done": float64(done), "partitions": float64(partitions), "running": running} {
		m.backfill.WithLabelValues(topic, what).Set(v)
	}
}

// OnAdmin implements broker.HookAdmin.
func (m *Metrics) OnAdmin(op string, took time.Duration, err error) {
	code := "ok"
	if err != nil {
		code = wire.Code(err)
	}
	m.adminRequests.WithLabelValues(op, code).Inc()
	m.adminTook.WithLabelValues(op).Observe(took.Seconds())
}

var (
	_ broker.HookPluginCall           = (*Metrics)(nil)
	_ broker.HookEpochStep            = (*Metrics)(nil)
	_ broker.HookBackfill             = (*Metrics)(nil)
	_ broker.HookEpochChange          = (*Metrics)(nil)
	_ broker.HookAdmin                = (*Metrics)(nil)
	_ produce.HookRecord              = (*Metrics)(nil)
	_ client.HookProduceRepartitioned = (*Metrics)(nil)
)
