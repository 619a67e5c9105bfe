package scenario

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// BackfillBenchConfig configures BenchBackfill.
type BackfillBenchConfig struct {
	DataDir    string
	Keys       int           // live keys in the topic before the change [100000]
	Partitions int           // partitions before the change (it doubles) [4]
	Rate       int           // records/s offered during the delay part [2000]
	Window     time.Duration // traffic before and after the change in the delay part [2s]
	Logf       func(format string, args ...any)
}

// BackfillBenchResult is what BenchBackfill measured: the same epoch change (the partition
// count doubles) of the same records on a plain topic without backfill and on a compacted topic
// with it, in one run.
type BackfillBenchResult struct {
	Keys int
	// PlainChange is the plain topic's change (request to active); CompactChange the compacted
	// topic's, and CompactBackfilled from the request until the backfill ended.
	PlainChange, CompactChange, CompactBackfilled time.Duration
	// Copied is the backfill's copies; KeysPerSecond its rate (copied / backfill time).
	Copied        int64
	KeysPerSecond float64
	// Delivery delay of a live group's records (from the application's send to delivery)
	// around the change, without and with backfill.
	PlainP50, PlainP99, PlainMax       time.Duration
	CompactP50, CompactP99, CompactMax time.Duration
	// DelayBackfill is how long the delay part's backfill took (it ran under the live traffic).
	DelayBackfill time.Duration
	DelayRecords  int
}

func (c *BackfillBenchConfig) defaults() {
	if c.Keys == 0 {
		c.Keys = 100000
	}
	if c.Partitions == 0 {
		c.Partitions = 4
	}
	if c.Rate == 0 {
		c.Rate = 2000
	}
	if c.Window == 0 {
		c.Window = 2 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// BenchBackfill measures what a backfill costs (spec/protocol.md §10.3), on an embedded broker.
func BenchBackfill(ctx context.Context, cfg BackfillBenchConfig) (*BackfillBenchResult, error) {
	cfg.defaults()
	b, err := broker.Start(ctx, broker.Config{DataDir: cfg.DataDir, Listen: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	conn := func(role string) (*client.Client, error) {
		return client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(role)})
	}
	admin, err := conn(broker.RoleAdmin)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	res := &BackfillBenchResult{Keys: cfg.Keys}

	// Part 1: the change alone, plain then compacted, the same keys (two records each).
	for _, compact := range []bool{false, true} {
		topic := "rate-plain"
		if compact {
			topic = "rate-compact"
		}
		fill := time.Now()
		if err := fillTopic(ctx, admin, conn, topic, cfg.Partitions, cfg.Keys, 2, compact); err != nil {
			return nil, err
		}
		cfg.Logf("%s: filled in %v", topic, time.Since(fill))
		start := time.Now()
		if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 2 * cfg.Partitions}); err != nil {
			return nil, err
		}
		active := time.Since(start)
		if !compact {
			res.PlainChange = active
			cfg.Logf("plain change: %v", active)
			continue
		}
		res.CompactChange = active
		bf, err := waitBackfill(ctx, admin, topic)
		if err != nil {
			return nil, err
		}
		res.CompactBackfilled = time.Since(start)
		res.Copied = bf.Copied
		if bf.Ended != nil {
			res.KeysPerSecond = float64(bf.Copied+bf.Newer) / bf.Ended.Sub(bf.Started).Seconds()
		}
		cfg.Logf("compacted change: active after %v, backfilled after %v (%d copies, %.0f keys/s)", active, res.CompactBackfilled, bf.Copied, res.KeysPerSecond)
	}

	// Part 2: a live group's delivery delay around the same change under steady traffic.
	for _, compact := range []bool{false, true} {
		topic := "delay-plain"
		if compact {
			topic = "delay-compact"
		}
		fill := time.Now()
		if err := fillTopic(ctx, admin, conn, topic, cfg.Partitions, cfg.Keys, 1, compact); err != nil {
			return nil, err
		}
		cfg.Logf("%s: filled in %v", topic, time.Since(fill))
		d, n, bfTook, err := liveDelay(ctx, cfg, admin, conn, topic, compact)
		if err != nil {
			return nil, err
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		pct := func(p float64) time.Duration {
			if len(d) == 0 {
				return 0
			}
			return d[int(float64(len(d)-1)*p)]
		}
		res.DelayRecords = n
		if compact {
			res.CompactP50, res.CompactP99, res.CompactMax, res.DelayBackfill = pct(0.5), pct(0.99), pct(1), bfTook
		} else {
			res.PlainP50, res.PlainP99, res.PlainMax = pct(0.5), pct(0.99), pct(1)
		}
	}
	return res, nil
}

// fillTopic creates a topic and writes `rounds` records of each of keys keys.
func fillTopic(ctx context.Context, admin *client.Client, conn func(string) (*client.Client, error), topic string, partitions, keys, rounds int, compact bool) error {
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: partitions, Partitioner: "kafka-murmur2", Compact: compact}); err != nil {
		return err
	}
	pc, err := conn(broker.RoleProducer)
	if err != nil {
		return err
	}
	defer pc.Close()
	p, err := pc.NewProducer(ctx, topic, client.ProducerOptions{})
	if err != nil {
		return err
	}
	var failed atomic.Int64
	for r := 0; r < rounds; r++ {
		for k := 0; k < keys; k++ {
			if err := p.Send(ctx, client.Record{Key: []byte("k" + strconv.Itoa(k)), Value: make([]byte, 64)}, func(r client.Result) {
				if r.Err != nil {
					failed.Add(1)
				}
			}); err != nil {
				return err
			}
		}
	}
	if err := p.Close(ctx); err != nil {
		return err
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d records failed while filling %s", n, topic)
	}
	return nil
}

// waitBackfill waits for the current epoch's backfill to end and returns it.
func waitBackfill(ctx context.Context, c *client.Client, topic string) (*wire.Backfill, error) {
	for {
		t, _, err := c.Topic(ctx, topic)
		if err != nil {
			return nil, err
		}
		if bf := t.Current().Backfill; bf == nil || bf.State == wire.BackfillDone {
			if bf == nil {
				bf = &wire.Backfill{}
			}
			return bf, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// liveDelay runs a live group (started at the end of the filled records) while a producer offers
// Rate records/s for Window, the partition count doubles, and Window more; it returns each
// record's delay from its intended send time to its delivery, and how long the backfill took.
func liveDelay(ctx context.Context, cfg BackfillBenchConfig, admin *client.Client, conn func(string) (*client.Client, error), topic string, compact bool) ([]time.Duration, int, time.Duration, error) {
	pc, err := conn(broker.RoleProducer)
	if err != nil {
		return nil, 0, 0, err
	}
	defer pc.Close()
	p, err := pc.NewProducer(ctx, topic, client.ProducerOptions{})
	if err != nil {
		return nil, 0, 0, err
	}
	c, err := conn(broker.RoleConsumer)
	if err != nil {
		return nil, 0, 0, err
	}
	defer c.Close()
	cn, err := c.NewConsumer(ctx, topic, client.ConsumerOptions{Group: "live", Start: client.StartNow, Heartbeat: 200 * time.Millisecond, CommitInterval: 20 * time.Millisecond})
	if err != nil {
		return nil, 0, 0, err
	}
	var mu sync.Mutex
	var delays []time.Duration
	var delivered atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(cctx, func(ctx context.Context, m *client.Message) error {
			if m.Backfill == nil && len(m.Value) >= 8 {
				d := time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(m.Value))))
				mu.Lock()
				delays = append(delays, d)
				mu.Unlock()
				delivered.Add(1)
			}
			return nil
		})
	}()
	time.Sleep(time.Second) // the group joins
	interval := time.Second / time.Duration(cfg.Rate)
	sent := 0
	t0 := time.Now()
	due := func(i int) time.Time { return t0.Add(time.Duration(i) * interval) }
	send := func(until time.Time) error {
		for ; due(sent).Before(until); sent++ {
			if d := time.Until(due(sent)); d > 0 {
				time.Sleep(d)
			}
			v := make([]byte, 64)
			binary.BigEndian.PutUint64(v, uint64(due(sent).UnixNano()))
			// Keys of their own: on the compacted topic a record overwritten before the group
			// read it is compacted away, and the delay part counts every record.
			key := []byte("live-" + strconv.Itoa(sent))
			if err := p.Send(ctx, client.Record{Key: key, Value: v}, nil); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(t0.Add(cfg.Window)); err != nil {
		return nil, 0, 0, err
	}
	cfg.Logf("%s: changing", topic)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 2 * cfg.Partitions}); err != nil {
		return nil, 0, 0, err
	}
	if err := send(time.Now().Add(cfg.Window)); err != nil {
		return nil, 0, 0, err
	}
	if err := p.Close(ctx); err != nil {
		return nil, 0, 0, err
	}
	var bfTook time.Duration
	if compact {
		bf, err := waitBackfill(ctx, admin, topic)
		if err != nil {
			return nil, 0, 0, err
		}
		if bf.Ended != nil {
			bfTook = bf.Ended.Sub(bf.Started)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for delivered.Load() < int64(sent) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return nil, 0, 0, err
	}
	if got := delivered.Load(); got < int64(sent) {
		return nil, 0, 0, fmt.Errorf("topic %s: the live group delivered %d of %d records", topic, got, sent)
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]time.Duration(nil), delays...), sent, bfTook, nil
}
