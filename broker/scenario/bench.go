package scenario

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// BenchConfig configures BenchEpoch.
type BenchConfig struct {
	DataDir    string
	Records    int           // records for the throughput part [200000]
	Rounds     int           // reads of each kind in the throughput part, after a warm-up read [3]
	Keys       int           // [10000]
	Partitions int           // initial partitions [8]
	Members    int           // consumer-group members [2]
	Rate       int           // records/s offered during the delay part [5000]
	Window     time.Duration // traffic before and after the change in the delay part [2s]
	// Handler is each record's processing time in the delay part, and ConsumerDelay how late
	// the group starts: together they make the group lag at the change, as real groups do [150µs, 1s].
	Handler       time.Duration
	ConsumerDelay time.Duration
	// Changes are the epoch changes of jump topics measured as pairs, cold and warm (ChangePair),
	// one fresh broker each; none when empty.
	Changes []ChangeSize
	// SyncInterval is the embedded broker's fsync interval (broker.Config.SyncInterval): 0, the
	// default, fsyncs before every acknowledgement.
	SyncInterval time.Duration
	Logf         func(format string, args ...any)
}

// BenchResult is what BenchEpoch measured.
type BenchResult struct {
	// Throughput of a consumer group reading the same records (with two epoch changes in them),
	// with epoch gating and with gating off.
	GatedRate, UngatedRate float64 // records/s, medians of Rounds reads each
	Rounds                 int
	// Delivery delay (delivery time minus the time the application asked to send) of records
	// around an epoch change, with pctl's gated change and with the simple alternative: pause
	// all producers, wait until the group drained every old partition, change, resume.
	GatedMax, GatedP99, GatedP50 time.Duration
	PauseMax, PauseP99, PauseP50 time.Duration
	GatedRecords, PauseRecords   int
	ChangeTime, PauseChangeTime  time.Duration // how long the change (or pause+drain+change) took
	// Partition readers the group's watchdog replaced in the delay part (client.ConsumerStats
	// ReaderRestarts, summed over the members): readers silent for 4 s or more while their
	// stream held records past the member's position.
	GatedReaderRestarts, PauseReaderRestarts int64
	// SyncInterval is the embedded broker's fsync interval the run had (0: before every
	// acknowledgement): the delay part's readers stall behind fsyncs under load (README).
	SyncInterval                    time.Duration
	ThroughputRecords, DelayRecords int
	// Changes: each size of BenchConfig.Changes, its change time cold and warm (ChangePair).
	Changes []ChangePair
}

func (c *BenchConfig) defaults() {
	if c.Records == 0 {
		c.Records = 200000
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if c.Keys == 0 {
		c.Keys = 10000
	}
	if c.Partitions == 0 {
		c.Partitions = 8
	}
	if c.Members == 0 {
		c.Members = 2
	}
	if c.Rate == 0 {
		c.Rate = 5000
	}
	if c.Window == 0 {
		c.Window = 2 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Handler == 0 {
		c.Handler = 150 * time.Microsecond
	}
	if c.ConsumerDelay == 0 {
		c.ConsumerDelay = time.Second
	}
}

// BenchEpoch measures what epoch gating costs and what it saves, on an embedded broker.
func BenchEpoch(ctx context.Context, cfg BenchConfig) (*BenchResult, error) {
	cfg.defaults()
	b, err := broker.Start(ctx, broker.Config{DataDir: cfg.DataDir, Listen: "127.0.0.1:0", SyncInterval: cfg.SyncInterval})
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
	res := &BenchResult{}
	res.SyncInterval, _ = b.SyncInterval()

	// Part 1: throughput. Fill a topic through two epoch changes, then read it twice.
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "tput", Partitions: cfg.Partitions, Partitioner: "kafka-murmur2"}); err != nil {
		return nil, err
	}
	pc, err := conn(broker.RoleProducer)
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	p, err := pc.NewProducer(ctx, "tput", client.ProducerOptions{})
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < cfg.Records; i++ {
		if i == cfg.Records/3 {
			if err := p.Flush(ctx); err != nil {
				return nil, err
			}
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "tput", Partitions: cfg.Partitions * 2}); err != nil {
				return nil, err
			}
		}
		if i == 2*cfg.Records/3 {
			if err := p.Flush(ctx); err != nil {
				return nil, err
			}
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "tput", Partitioner: "jump"}); err != nil {
				return nil, err
			}
		}
		key := []byte("k" + strconv.Itoa(rng.Intn(cfg.Keys)))
		if err := p.Send(ctx, client.Record{Key: key, Value: make([]byte, 64)}, nil); err != nil {
			return nil, err
		}
	}
	if err := p.Close(ctx); err != nil {
		return nil, err
	}
	res.ThroughputRecords = cfg.Records
	// A warm-up read first, not measured, then rounds in alternating order, medians: whichever
	// read came first used to pay for the cold stream files and caches (issue 17: gating seemed
	// to cost 0.60-0.64x when it always read first).
	if _, err := consumeAll(ctx, conn, "tput", "tput-warmup", cfg.Members, cfg.Records, false); err != nil {
		return nil, err
	}
	rates := map[bool][]float64{}
	for r := 0; r < cfg.Rounds; r++ {
		for _, gated := range []bool{r%2 == 0, r%2 == 1} {
			rate, err := consumeAll(ctx, conn, "tput", fmt.Sprint("tput-", gated, "-", r), cfg.Members, cfg.Records, !gated)
			if err != nil {
				return nil, err
			}
			rates[gated] = append(rates[gated], rate)
			cfg.Logf("throughput round %d gated=%v: %.0f records/s", r+1, gated, rate)
		}
	}
	median := func(xs []float64) float64 {
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	res.GatedRate, res.UngatedRate, res.Rounds = median(rates[true]), median(rates[false]), cfg.Rounds

	// Part 2: delivery delay around an epoch change, both strategies, same offered load.
	for _, pause := range []bool{false, true} {
		topic := "delay-gated"
		if pause {
			topic = "delay-pause"
		}
		d, took, n, restarts, err := delayRun(ctx, cfg, admin, conn, topic, pause)
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
		if pause {
			res.PauseMax, res.PauseP99, res.PauseP50, res.PauseRecords, res.PauseChangeTime, res.PauseReaderRestarts = pct(1), pct(0.99), pct(0.5), n, took, restarts
		} else {
			res.GatedMax, res.GatedP99, res.GatedP50, res.GatedRecords, res.ChangeTime, res.GatedReaderRestarts = pct(1), pct(0.99), pct(0.5), n, took, restarts
		}
	}

	// Part 3: epoch changes by size, each cold and warm (fresh brokers of their own).
	if res.Changes, err = changePairs(ctx, cfg); err != nil {
		return nil, err
	}
	return res, nil
}

// consumeAll reads a whole topic with a fresh group and returns records/s.
func consumeAll(ctx context.Context, conn func(string) (*client.Client, error), topic, group string, members, total int, ungated bool) (float64, error) {
	var got atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, members)
	start := time.Now()
	var last atomic.Int64
	for i := 0; i < members; i++ {
		c, err := conn(broker.RoleConsumer)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		cn, err := c.NewConsumer(ctx, topic, client.ConsumerOptions{Group: group, Member: fmt.Sprint("m", i), FromBeginning: true,
			Heartbeat: 200 * time.Millisecond, Testing: &testhook.Consumer{DisableGating: ungated}})
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- cn.Run(ctx, func(ctx context.Context, m *client.Message) error {
				if got.Add(1) >= int64(total) {
					last.Store(time.Now().UnixNano())
					cancel()
				}
				return nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	if got.Load() < int64(total) {
		return 0, fmt.Errorf("group %s read %d of %d records", group, got.Load(), total)
	}
	return float64(total) / time.Duration(last.Load()-start.UnixNano()).Seconds(), nil
}

// delayRun offers records at a fixed rate for Window, makes an epoch change (gated, or pause and
// drain first), offers records for another Window, and returns every record's delay from the
// moment the application asked to send it to its delivery.
func delayRun(ctx context.Context, cfg BenchConfig, admin *client.Client, conn func(string) (*client.Client, error), topic string, pause bool) ([]time.Duration, time.Duration, int, int64, error) {
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: cfg.Partitions, Partitioner: "kafka-murmur2"}); err != nil {
		return nil, 0, 0, 0, err
	}
	pc, err := conn(broker.RoleProducer)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	defer pc.Close()
	p, err := pc.NewProducer(ctx, topic, client.ProducerOptions{})
	if err != nil {
		return nil, 0, 0, 0, err
	}
	var mu sync.Mutex
	var delays []time.Duration
	var delivered atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var members []*client.Consumer
	for i := 0; i < cfg.Members; i++ {
		c, err := conn(broker.RoleConsumer)
		if err != nil {
			return nil, 0, 0, 0, err
		}
		defer c.Close()
		cn, err := c.NewConsumer(ctx, topic, client.ConsumerOptions{Group: "g", Member: fmt.Sprint("m", i), FromBeginning: true,
			Heartbeat: 200 * time.Millisecond, CommitInterval: 20 * time.Millisecond, Testing: &testhook.Consumer{DisableGating: pause}})
		if err != nil {
			return nil, 0, 0, 0, err
		}
		members = append(members, cn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(cfg.ConsumerDelay):
			case <-cctx.Done():
				return
			}
			_ = cn.Run(cctx, func(ctx context.Context, m *client.Message) error {
				spin(cfg.Handler)
				if len(m.Value) >= 8 {
					d := time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(m.Value))))
					mu.Lock()
					delays = append(delays, d)
					mu.Unlock()
				}
				delivered.Add(1)
				return nil
			})
		}()
	}
	rng := rand.New(rand.NewSource(2))
	interval := time.Second / time.Duration(cfg.Rate)
	sent := 0
	// The application's intended send times are fixed by the rate; a paused producer keeps its
	// records (they wait in the application), which counts in their delay.
	t0 := time.Now()
	due := func(i int) time.Time { return t0.Add(time.Duration(i) * interval) }
	send := func(until time.Time) error {
		for ; due(sent).Before(until); sent++ {
			if d := time.Until(due(sent)); d > 0 {
				time.Sleep(d)
			}
			v := make([]byte, 64)
			binary.BigEndian.PutUint64(v, uint64(due(sent).UnixNano()))
			key := []byte("k" + strconv.Itoa(rng.Intn(cfg.Keys)))
			if err := p.Send(ctx, client.Record{Key: key, Value: v}, nil); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(t0.Add(cfg.Window)); err != nil {
		return nil, 0, 0, 0, err
	}
	changeStart := time.Now()
	if pause {
		// The simple alternative: stop producing, wait until the group has drained everything,
		// then change (no ordering machinery needed), then resume.
		if err := p.Flush(ctx); err != nil {
			return nil, 0, 0, 0, err
		}
		for delivered.Load() < int64(sent) {
			time.Sleep(time.Millisecond)
		}
		if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: cfg.Partitions * 2}); err != nil {
			return nil, 0, 0, 0, err
		}
	} else {
		if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: cfg.Partitions * 2}); err != nil {
			return nil, 0, 0, 0, err
		}
	}
	took := time.Since(changeStart)
	if err := send(time.Now().Add(cfg.Window)); err != nil {
		return nil, 0, 0, 0, err
	}
	if err := p.Close(ctx); err != nil {
		return nil, 0, 0, 0, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for delivered.Load() < int64(sent) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	var restarts int64
	for _, cn := range members {
		restarts += cn.Stats().ReaderRestarts
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]time.Duration(nil), delays...), took, sent, restarts, nil
}

// spin busy-waits for d (a sleep that short would round up to the timer's resolution).
func spin(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}
