// Package scenario runs pctl end to end, for the randomised order tests, `pctl demo` and the
// epoch-change benchmark: a real embedded broker, client-side and broker-side producers, a
// consumer group, epoch changes while traffic flows, and faults (a broker restart in the middle of
// an epoch change, a group member killed and replaced). Every send and every delivery is logged
// and handed to the independent checker (client/verify).
package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/testhook"
)

// Change is one epoch change: a new partition count and/or partition function (zero values keep
// the current one).
type Change struct {
	Partitions  int
	Partitioner string
}

func (c Change) String() string {
	s := ""
	if c.Partitions > 0 {
		s = fmt.Sprintf("%d partitions", c.Partitions)
	}
	if c.Partitioner != "" {
		if s != "" {
			s += ", "
		}
		s += c.Partitioner
	}
	return s
}

// Config describes a run. Zero values mean the defaults in brackets.
type Config struct {
	Seed        int64
	DataDir     string // required: a fresh directory
	Topic       string // ["orders"]
	Partitions  int    // initial partition count [4]
	Partitioner string // initial partitioner ["librdkafka-consistent"]
	Keys        int    // distinct keys [200]
	// Producers: client-side (partitioning with the module) and thin (broker-side partitioning).
	ClientProducers int // [2]
	ThinProducers   int // [1]
	// StaleProducer adds a client-side producer that fetches the descriptor at the start and
	// sends nothing until every change is done, then sends with its stale descriptor.
	StaleProducer bool
	Records       int // records per producer [2000]
	Members       int // consumer-group members [3]
	// LateMembers, if > 0, runs a second group ("late") that starts only after every producer
	// finished: its children have their new-epoch records at once while the parents still hold
	// a backlog, so its gates must really wait.
	LateMembers int
	Changes     []Change
	// RestartDuring is the index (1-based) of the change during which the broker is stopped
	// after fencing and started again on the same data directory; 0: none.
	RestartDuring int
	// KillMember crashes one member mid-run (its connection closes without handing anything
	// back) and starts a replacement.
	KillMember bool
	// DisableGating turns off epoch gating in the consumers (benchmark baseline; order is then
	// not guaranteed).
	DisableGating bool
	// PipelinedThin makes the thin producers keep many requests in flight (client.ThinProducer)
	// instead of one at a time; they then do not retry across a broker restart.
	PipelinedThin bool
	// SlowMember makes member m0's handler take this long per record, so that the group lags
	// unevenly and new-epoch records really have to wait for their parents.
	SlowMember time.Duration
	// Pace spreads each producer's records over about this long [2s].
	Pace time.Duration
	// Timeout bounds the run [2m].
	Timeout time.Duration
	Logf    func(format string, args ...any)
}

// Result is what a run observed.
type Result struct {
	Sent, Acked, Keyless int
	Keys                 int
	Deliveries           int
	Epochs               []wire.Epoch
	// Groups are the consumer groups the run started ("live", and "late" with LateMembers):
	// each must have a report in Verify.
	Groups []string
	// Verify is the order checker's verdict (client/verify), with Options.Groups = Groups and,
	// when no crash was injected (no member killed, no broker restarted), NoDuplicates.
	Verify  *verify.Result
	Reports []verify.Report // Verify.Groups
	// Placement checks every keyed delivery's partition against f_epoch(key), computed
	// independently of the producers (CheckPlacements).
	Placement      PlacementReport
	WrongPartition int // Placement.Wrong
	// MisplacedRecords counts stored records on the wrong side of a boundary: a record of epoch
	// x stored after epoch x's boundary of its partition, or before epoch x-1's (an audit of
	// every stream after the run).
	MisplacedRecords int
	Gated            int64
	MaxGateWait      time.Duration
	GateWaits        []time.Duration
	Resent           int64
	ChangeTimes      []time.Duration // how long each repartition took
	Elapsed          time.Duration
	Restarted        bool
	Killed           bool
	// MemberErrors lists the members that stopped on their own, with the error their Run
	// returned (a member the run crashed on purpose is not one): no member may, and one that
	// does is otherwise seen only as records its group never delivered.
	MemberErrors []string
	// SendErrors holds the first errors producers reported for records (at most 10): a record
	// that failed is not acknowledged, and the checker only counts it.
	SendErrors []string
}

// OK reports whether the checkers found nothing wrong: the order checker passed with a report
// for every group the run started, every keyed delivery was checked and found in its
// partition, and the audit found no record on the wrong side of a boundary.
func (r *Result) OK() bool { return len(r.Failures()) == 0 }

// Failures says what is wrong, one line per problem; empty when OK.
func (r *Result) Failures() []string {
	out := []string{}
	if r.Verify == nil {
		return []string{"the order checker did not run"}
	}
	if !r.Verify.OK() {
		out = append(out, "order checker: "+strings.Join(r.Verify.Failures, ", "))
	}
	if len(r.Groups) == 0 {
		out = append(out, "no consumer group ran")
	}
	for _, g := range r.Groups {
		if r.Verify.Group(g) == nil {
			out = append(out, "group "+g+" has no report")
		}
	}
	if r.Placement.Wrong > 0 {
		out = append(out, fmt.Sprintf("%d keyed deliveries outside f_epoch(key)", r.Placement.Wrong))
	}
	if r.Placement.Errors > 0 {
		out = append(out, fmt.Sprintf("%d keyed deliveries whose partition could not be checked", r.Placement.Errors))
	}
	if r.MisplacedRecords > 0 {
		out = append(out, fmt.Sprintf("%d stored records on the wrong side of a boundary", r.MisplacedRecords))
	}
	for _, e := range r.MemberErrors {
		out = append(out, "member stopped: "+e)
	}
	return out
}

func (c *Config) defaults() {
	if c.Topic == "" {
		c.Topic = "orders"
	}
	if c.Partitions == 0 {
		c.Partitions = 4
	}
	if c.Partitioner == "" {
		c.Partitioner = "librdkafka-consistent"
	}
	if c.Keys == 0 {
		c.Keys = 200
	}
	if c.ClientProducers == 0 && c.ThinProducers == 0 {
		c.ClientProducers, c.ThinProducers = 2, 1
	}
	if c.Records == 0 {
		c.Records = 2000
	}
	if c.Members == 0 {
		c.Members = 3
	}
	if c.Pace == 0 {
		c.Pace = 2 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

type run struct {
	cfg       Config
	ctx       context.Context
	mu        sync.Mutex
	b         *broker.Broker
	url       string
	listen    string
	sent      []verify.Sent
	deliv     []verify.Delivered
	places    []Placement // keyed deliveries, for the placement check
	order     atomic.Int64
	acked     atomic.Int64
	res       Result
	fenceN    atomic.Int32 // changes started, for the restart fault
	restarted atomic.Bool  // the broker was restarted (read by the broker's step hook)
}

// Run executes a scenario.
func Run(parent context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	if cfg.DataDir == "" {
		return nil, errors.New("scenario: DataDir is required")
	}
	ctx, cancel := context.WithTimeout(parent, cfg.Timeout)
	defer cancel()
	r := &run{cfg: cfg, ctx: ctx}
	start := time.Now()
	if err := r.startBroker(""); err != nil {
		return nil, err
	}
	defer func() { r.broker().Close() }()

	admin, err := r.connect(broker.RoleAdmin)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: cfg.Topic, Partitions: cfg.Partitions, Partitioner: cfg.Partitioner}); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}

	// The consumer group.
	group := &groupRun{r: r, name: "live"}
	for i := 0; i < cfg.Members; i++ {
		if err := group.add(fmt.Sprintf("m%d", i)); err != nil {
			return nil, err
		}
	}
	defer group.stopAll()

	// Producers.
	var pwg sync.WaitGroup
	total := (cfg.ClientProducers + cfg.ThinProducers) * cfg.Records
	var perr error
	var perrMu sync.Mutex
	setErr := func(err error) {
		perrMu.Lock()
		if perr == nil {
			perr = err
		}
		perrMu.Unlock()
	}
	for i := 0; i < cfg.ClientProducers; i++ {
		pwg.Add(1)
		go func(i int) {
			defer pwg.Done()
			if err := r.clientProducer(fmt.Sprintf("c%d", i), cfg.Seed*100+int64(i), nil); err != nil {
				setErr(err)
			}
		}(i)
	}
	for i := 0; i < cfg.ThinProducers; i++ {
		pwg.Add(1)
		go func(i int) {
			defer pwg.Done()
			if err := r.thinProducer(fmt.Sprintf("t%d", i), cfg.Seed*100+50+int64(i)); err != nil {
				setErr(err)
			}
		}(i)
	}
	changesDone := make(chan struct{})
	if cfg.StaleProducer {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			if err := r.clientProducer("stale", cfg.Seed*100+99, changesDone); err != nil {
				setErr(err)
			}
		}()
		total += cfg.Records
	}

	// Epoch changes while traffic flows, spread over the producers' pace; a member crash half way.
	for i, ch := range cfg.Changes {
		select {
		case <-time.After(cfg.Pace / time.Duration(len(cfg.Changes)+1)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if cfg.KillMember && i == len(cfg.Changes)/2 {
			if err := group.crashOne(); err != nil {
				return nil, err
			}
			r.res.Killed = true
		}
		t0 := time.Now()
		if err := r.change(admin, i+1, ch); err != nil {
			return nil, fmt.Errorf("change %d (%s): %w", i+1, ch, err)
		}
		r.res.ChangeTimes = append(r.res.ChangeTimes, time.Since(t0))
		// The admin client may have been replaced by a broker restart; reconnects are automatic.
	}
	if cfg.KillMember && len(cfg.Changes) == 0 {
		if err := group.crashOne(); err != nil {
			return nil, err
		}
		r.res.Killed = true
	}
	close(changesDone)
	pwg.Wait()
	if perr != nil {
		return nil, perr
	}
	acked := r.acked.Load()
	groups := []*groupRun{group}
	if cfg.LateMembers > 0 {
		late := &groupRun{r: r, name: "late"}
		for i := 0; i < cfg.LateMembers; i++ {
			if err := late.add(fmt.Sprintf("m%d", i)); err != nil {
				return nil, err
			}
		}
		defer late.stopAll()
		groups = append(groups, late)
	}
	// Wait until each group delivered every acknowledged record (or time runs out: then the
	// checker reports what is missing).
	for _, g := range groups {
		for g.delivered() < acked && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(100 * time.Millisecond) // let in-flight duplicates land too
	var stats groupStats
	for _, g := range groups {
		st := g.stopAll()
		stats.gated += st.gated
		stats.waits = append(stats.waits, st.waits...)
		if st.maxWait > stats.maxWait {
			stats.maxWait = st.maxWait
		}
	}

	// The checks after the run: nothing here may pass because it could not tell.
	desc, _, err := admin.Topic(context.Background(), cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("topic descriptor after the run: %w", err)
	}
	r.res.Epochs = desc.Epochs
	n, err := auditBoundaries(context.Background(), admin, desc)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	r.res.MisplacedRecords = n
	for _, g := range groups {
		r.res.Groups = append(r.res.Groups, g.name)
	}
	r.mu.Lock()
	sent, deliv, places := r.sent, r.deliv, r.places
	r.mu.Unlock()
	r.res.Placement = CheckPlacements(context.Background(), desc, admin.Module, places)
	r.res.WrongPartition = r.res.Placement.Wrong
	r.res.Sent = len(sent)
	r.res.Deliveries = len(deliv)
	r.res.Verify = verify.Check(sent, deliv, verify.Options{Groups: r.res.Groups, NoDuplicates: !r.res.Killed && !r.res.Restarted})
	r.res.Reports = r.res.Verify.Groups
	r.res.Acked = int(acked)
	r.res.Keys = cfg.Keys
	r.res.Gated, r.res.MaxGateWait, r.res.GateWaits = stats.gated, stats.maxWait, stats.waits
	r.res.Elapsed = time.Since(start)
	_ = total
	return &r.res, nil
}

func (r *run) broker() *broker.Broker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b
}

func (r *run) startBroker(listen string) error {
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	hook := func(topic, state string) error {
		if r.cfg.RestartDuring > 0 && int(r.fenceN.Load()) == r.cfg.RestartDuring && state == "fenced" && !r.restarted.Load() {
			return errBrokerDies
		}
		return nil
	}
	b, err := broker.Start(r.ctx, broker.Config{DataDir: r.cfg.DataDir, Listen: listen, ConformanceKeys: 2000, Testing: testhook.Steps(hook),
		Logf: func(f string, a ...any) { r.cfg.Logf("broker: "+f, a...) }})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.b = b
	r.url = b.ClientURL()
	if u, err := urlHostPort(r.url); err == nil {
		r.listen = u
	}
	r.mu.Unlock()
	return nil
}

var errBrokerDies = errors.New("scenario: the broker dies here (fault injection)")

func urlHostPort(u string) (string, error) {
	const p = "nats://"
	if len(u) > len(p) && u[:len(p)] == p {
		u = u[len(p):]
	}
	_, _, err := net.SplitHostPort(u)
	return u, err
}

func (r *run) connect(role string) (*client.Client, error) {
	r.mu.Lock()
	url, creds := r.url, r.b.CredsPath(role)
	r.mu.Unlock()
	return client.Connect(r.ctx, client.Options{URL: url, Creds: creds, Name: "scenario-" + role, AckTimeout: 2 * time.Second, Timeout: 10 * time.Second})
}

// change runs one epoch change; with the restart fault it kills the broker after fencing and
// starts it again, which must finish the change.
func (r *run) change(admin *client.Client, n int, ch Change) error {
	r.fenceN.Store(int32(n))
	req := wire.RepartitionRequest{Topic: r.cfg.Topic, Partitions: ch.Partitions, Partitioner: ch.Partitioner}
	_, err := admin.Repartition(r.ctx, req)
	if err == nil {
		r.cfg.Logf("epoch change %d (%s) done", n, ch)
		return nil
	}
	if r.cfg.RestartDuring != n || r.restarted.Load() {
		return err
	}
	// The broker "died" after fencing: stop it and start it again on the same data and port.
	r.cfg.Logf("change %d: broker stopped after fencing (%v); restarting", n, err)
	r.restarted.Store(true)
	r.res.Restarted = true
	r.broker().Abort()
	r.mu.Lock()
	listen := r.listen
	r.mu.Unlock()
	var serr error
	for i := 0; i < 50; i++ {
		if serr = r.startBroker(listen); serr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if serr != nil {
		return fmt.Errorf("restart broker: %w", serr)
	}
	// Resumption finished the change during Start.
	for {
		t, _, err := admin.Topic(r.ctx, r.cfg.Topic)
		if err == nil && t.Change == nil && len(t.Epochs) == n+1 {
			r.cfg.Logf("epoch change %d (%s) finished by the restarted broker", n, ch)
			return nil
		}
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *run) logSent(s verify.Sent) {
	r.mu.Lock()
	r.sent = append(r.sent, s)
	r.mu.Unlock()
	if s.Acked {
		r.acked.Add(1)
	}
}

func keyOf(rng *rand.Rand, keys int) []byte {
	return []byte("key-" + strconv.Itoa(rng.Intn(keys)))
}

// clientProducer sends Records records with client-side partitioning; with wait set, it fetches
// the descriptor first and sends only once wait is closed (a stale descriptor by then).
func (r *run) clientProducer(id string, seed int64, wait chan struct{}) error {
	c, err := r.connect(broker.RoleProducer)
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.NewProducer(r.ctx, r.cfg.Topic, client.ProducerOptions{ID: id, MaxInFlight: 64, Logf: r.cfg.Logf})
	if err != nil {
		return fmt.Errorf("producer %s: %w", id, err)
	}
	if wait != nil {
		select {
		case <-wait:
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
	if err := r.sendRecords(id, seed, p.Send); err != nil {
		return err
	}
	if err := p.Close(r.ctx); err != nil {
		return fmt.Errorf("producer %s: %w", id, err)
	}
	r.mu.Lock()
	r.res.Resent += p.Resent()
	r.mu.Unlock()
	return nil
}

// thinProducer uses only a NATS connection and the broker's produce service, one request at a
// time, retrying a request whose answer did not come with the same sequence number (the broker
// deduplicates it).
func (r *run) thinProducer(id string, seed int64) error {
	c, err := r.connect(broker.RoleProducer)
	if err != nil {
		return err
	}
	defer c.Close()
	if r.cfg.PipelinedThin {
		return r.pipelinedThin(c, id, seed)
	}
	nc := c.Conn()
	rng := rand.New(rand.NewSource(seed))
	pause := r.cfg.Pace / time.Duration(r.cfg.Records+1)
	for i := 1; i <= r.cfg.Records; i++ {
		m := nats.NewMsg(wire.ProduceSubject(r.cfg.Topic))
		m.Data = []byte(id + "-" + strconv.Itoa(i))
		m.Header.Set(wire.HeaderProducer, id)
		m.Header.Set(wire.HeaderSeq, strconv.Itoa(i))
		var key []byte
		noKey := rng.Intn(50) == 0
		if !noKey {
			key = keyOf(rng, r.cfg.Keys)
			m.Header.Set(wire.HeaderKey, wire.EncodeKey(key))
		}
		acked := false
		for attempt := 0; attempt < 100 && r.ctx.Err() == nil; attempt++ {
			reply, err := nc.RequestMsg(m, 2*time.Second)
			if err != nil {
				time.Sleep(100 * time.Millisecond) // broker restarting: same request again
				continue
			}
			if code := reply.Header.Get(wire.HeaderError); code != "" {
				var er wire.ErrorReply
				_ = json.Unmarshal(reply.Data, &er)
				if code == "unavailable" || code == "internal" {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				return fmt.Errorf("thin producer %s record %d: %s: %s", id, i, code, er.Message)
			}
			acked = true
			break
		}
		r.logSent(verify.Sent{Producer: id, PSeq: uint64(i), Key: key, NoKey: noKey, Acked: acked})
		if pause > 0 && i%10 == 0 {
			time.Sleep(pause * 10)
		}
	}
	return nil
}

// groupRun is the consumer group under test.
type groupRun struct {
	r       *run
	name    string
	seen    sync.Map // "producer-pseq" delivered at least once
	unique  atomic.Int64
	mu      sync.Mutex
	members map[string]*member
	n       int
	stats   groupStats
	waits   gateWaits // every member's gate waits (client.HookGateWait)
}

// gateWaits collects a group's gate waits through the consumers' hooks (client.HookGateWait),
// the first maxGateWaits of them, for percentiles.
type gateWaits struct {
	mu sync.Mutex
	d  []time.Duration
}

const maxGateWaits = 1000000

// OnGateWait implements client.HookGateWait.
func (w *gateWaits) OnGateWait(topic, group string, partition, epoch int, waited time.Duration) {
	w.mu.Lock()
	if len(w.d) < maxGateWaits {
		w.d = append(w.d, waited)
	}
	w.mu.Unlock()
}

type groupStats struct {
	gated   int64
	maxWait time.Duration
	waits   []time.Duration
}

type member struct {
	c       *client.Client
	cn      *client.Consumer
	cancel  context.CancelFunc
	done    chan error
	crashed atomic.Bool // crashed by the run on purpose (crashOne)
}

func (g *groupRun) add(id string) error {
	r := g.r
	c, err := r.connect(broker.RoleConsumer)
	if err != nil {
		return err
	}
	cn, err := c.NewConsumer(r.ctx, r.cfg.Topic, client.ConsumerOptions{
		Group: g.name, Member: id, FromBeginning: true,
		Heartbeat: 100 * time.Millisecond, SessionTimeout: 1500 * time.Millisecond, CommitInterval: 50 * time.Millisecond,
		Testing: &testhook.Consumer{DisableGating: r.cfg.DisableGating}, Logf: r.cfg.Logf,
		Hooks: []client.Hook{&g.waits},
	})
	if err != nil {
		c.Close()
		return err
	}
	ctx, cancel := context.WithCancel(r.ctx)
	m := &member{c: c, cn: cn, cancel: cancel, done: make(chan error, 1)}
	go func() {
		slow := time.Duration(0)
		if id == "m0" {
			slow = r.cfg.SlowMember
		}
		var err error
		defer func() {
			if err != nil && ctx.Err() == nil && !m.crashed.Load() {
				// Stopped on its own: the checkers would only see records never delivered.
				r.cfg.Logf("group %s: member %s stopped: %v", g.name, id, err)
				r.mu.Lock()
				r.res.MemberErrors = append(r.res.MemberErrors, fmt.Sprintf("group %s member %s: %v", g.name, id, err))
				r.mu.Unlock()
			}
			m.done <- err
		}()
		err = cn.Run(ctx, func(ctx context.Context, msg *client.Message) error {
			if slow > 0 {
				time.Sleep(slow)
			}
			d := verify.Delivered{Group: g.name, Member: id, Producer: msg.Producer, PSeq: msg.ProducerSeq, Key: msg.Key, NoKey: msg.NoKey}
			r.mu.Lock()
			d.Order = r.order.Add(1)
			r.deliv = append(r.deliv, d)
			if !msg.NoKey {
				r.places = append(r.places, Placement{Epoch: msg.Epoch, Partition: msg.Partition, Key: msg.Key})
			}
			r.mu.Unlock()
			if _, dup := g.seen.LoadOrStore(msg.Producer+"-"+strconv.FormatUint(msg.ProducerSeq, 10), true); !dup {
				g.unique.Add(1)
			}
			return nil
		})
	}()
	g.mu.Lock()
	if g.members == nil {
		g.members = map[string]*member{}
	}
	g.members[id] = m
	g.n++
	g.mu.Unlock()
	return nil
}

// crashOne closes one member's connection without a goodbye (its leases must expire), then
// starts a replacement.
func (g *groupRun) crashOne() error {
	g.mu.Lock()
	var victim string
	for id := range g.members {
		if victim == "" || id < victim {
			victim = id
		}
	}
	m := g.members[victim]
	delete(g.members, victim)
	g.mu.Unlock()
	if m == nil {
		return nil
	}
	g.r.cfg.Logf("crashing member %s", victim)
	m.crashed.Store(true)
	m.c.Conn().Close() // no release, no commit: a crash
	m.cancel()
	<-m.done
	g.collect(m.cn.Stats())
	m.c.Close()
	return g.add(fmt.Sprintf("m%d", g.n))
}

func (g *groupRun) collect(s client.ConsumerStats) {
	g.stats.gated += s.Gated
	if s.MaxWait > g.stats.maxWait {
		g.stats.maxWait = s.MaxWait
	}
}

func (g *groupRun) stopAll() groupStats {
	g.mu.Lock()
	ms := g.members
	g.members = nil
	g.mu.Unlock()
	for _, m := range ms {
		m.cancel()
		<-m.done
		g.collect(m.cn.Stats())
		m.c.Close()
	}
	g.waits.mu.Lock()
	g.stats.waits = append([]time.Duration(nil), g.waits.d...)
	g.waits.mu.Unlock()
	return g.stats
}

func (g *groupRun) delivered() int64 { return g.unique.Load() }

// pipelinedThin is a thin producer with many requests in flight (client.ThinProducer).
func (r *run) pipelinedThin(c *client.Client, id string, seed int64) error {
	// A record is given up on after a minute, not the client's 10s request timeout: on a loaded
	// machine under -race the broker has been seen answering nothing for over 5s while 4,096
	// records were in flight (CI, 2026-12-01), and the re-sent records then ran out of their 10s
	// although every one was stored. The run's own bound (Timeout) still ends a run that hangs.
	tp, err := c.NewThinProducer(r.cfg.Topic, client.ThinOptions{ID: id, Timeout: time.Minute})
	if err != nil {
		return err
	}
	if err := r.sendRecords(id, seed, tp.Send); err != nil {
		return err
	}
	return tp.Close(r.ctx)
}

// sendRecords sends Records records (one in fifty keyless), spread over Pace, and logs each
// record's fate for the checker.
func (r *run) sendRecords(id string, seed int64, send func(context.Context, client.Record, func(client.Result)) error) error {
	rng := rand.New(rand.NewSource(seed))
	pause := r.cfg.Pace / time.Duration(r.cfg.Records+1)
	for i := 0; i < r.cfg.Records; i++ {
		rec := client.Record{Value: []byte(id + "-" + strconv.Itoa(i))}
		if rng.Intn(50) == 0 {
			rec.NoKey = true
		} else {
			rec.Key = keyOf(rng, r.cfg.Keys)
		}
		err := send(r.ctx, rec, func(res client.Result) {
			if res.Err != nil {
				r.mu.Lock()
				if len(r.res.SendErrors) < 10 {
					r.res.SendErrors = append(r.res.SendErrors, fmt.Sprintf("producer %s record %d: %v", id, res.ProducerSeq, res.Err))
				}
				r.mu.Unlock()
			}
			r.logSent(verify.Sent{Producer: id, PSeq: res.ProducerSeq, Key: rec.Key, NoKey: rec.NoKey, Acked: res.Err == nil})
		})
		if err != nil {
			return fmt.Errorf("producer %s: %w", id, err)
		}
		if pause > 0 && i%10 == 0 {
			time.Sleep(pause * 10)
		}
	}
	return nil
}

// auditBoundaries reads every partition stream and counts records stored on the wrong side of
// a boundary (see Result.MisplacedRecords).
func auditBoundaries(ctx context.Context, c *client.Client, t *wire.Topic) (int, error) {
	bad := 0
	for q := 0; q < t.MaxPartitions(); q++ {
		s, err := c.JetStream().Stream(ctx, wire.StreamName(t.Name, q))
		if err != nil {
			return 0, err
		}
		last := s.CachedInfo().State.LastSeq
		if last == 0 {
			continue
		}
		cons, err := c.JetStream().OrderedConsumer(ctx, wire.StreamName(t.Name, q), jetstream.OrderedConsumerConfig{HeadersOnly: true, MaxResetAttempts: 3})
		if err != nil {
			return 0, err
		}
		it, err := cons.Messages()
		if err != nil {
			return 0, err
		}
		for {
			m, err := it.Next()
			if err != nil {
				it.Stop()
				return 0, err
			}
			md, _ := m.Metadata()
			seq := md.Sequence.Stream
			if m.Headers().Get(wire.HeaderFence) == "" {
				if _, x, _, err := wire.ParseDataSubject(m.Subject()); err == nil {
					if e := t.Epoch(x); e != nil && q < len(e.Boundaries) && seq > e.Boundaries[q] {
						bad++ // stored after its own epoch ended in this partition
					}
					if p := t.Epoch(x - 1); p != nil && q < len(p.Boundaries) && seq <= p.Boundaries[q] {
						bad++ // stored before the previous epoch ended in this partition
					}
				}
			}
			if seq >= last {
				break
			}
		}
		it.Stop()
	}
	return bad, nil
}
