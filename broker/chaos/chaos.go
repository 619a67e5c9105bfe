// Package chaos runs pctl on a real 3-node NATS JetStream cluster (package natscluster: node
// processes on loopback) under a randomised fault schedule, and checks the outcome with the
// independent checkers: client/verify for loss, per-key order and duplicates, scenario's
// placement check for records outside f_epoch(key), and an audit of every partition stream for
// records on the wrong side of an epoch boundary.
//
// A run, for one seed: R3 topics; 1 or 2 brokers, each a 'pctl serve --nats' process; client-side
// producers (partitioning with the module) and a broker-side (thin) producer sending paced keyed
// records; a live consumer group from the start and a late group that starts after the traffic;
// epoch changes (grow, shrink, swap the function) while the traffic flows; and, at random times,
// faults: kill -9 of a partition stream's leader node, of the meta leader, of the node a producer
// or a broker is connected to; SIGSTOP of a node for seconds; a node cut off by its routes; kill -9
// of a broker in the middle of an epoch change. Everything a fault stops is started again, and
// then every change must be complete and every group must have delivered every acknowledged
// record within a bound.
//
// The schedule is a function of the seed (Schedule): a failing seed is rerun as it was. What
// happened at run time (targets, the longest delivery stall around each fault) is in the Result.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/scenario"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/natscluster"
	"pctl.dev/pctl/internal/natsconf"
)

// Config describes a run. Zero values mean the defaults in brackets.
type Config struct {
	Seed int64
	// Dir is a fresh scratch directory (required): the cluster's nodes, the brokers' data, logs.
	Dir string
	// Bin is the pctl binary for the nodes and the brokers [natscluster.Binary()].
	Bin string
	// Brokers is the number of 'pctl serve' processes [2].
	Brokers int
	// Traffic is how long the producers send [12s].
	Traffic time.Duration
	// Rate is each producer's records per second [150].
	Rate int
	// ClientProducers and ThinProducers are the producers of each kind [2, 1].
	ClientProducers, ThinProducers int
	// Members and LateMembers are the sizes of the live and the late group [2, 2].
	Members, LateMembers int
	// Keys is the number of distinct keys [100].
	Keys int
	// Schedule, if set, replaces Schedule(Seed, ...): the changes and faults to run.
	Schedule *Plan
	// Bound is how long after the traffic (and the last fault) every change must be complete and
	// each group must have delivered every acknowledged record [25s].
	Bound time.Duration
	// Timeout bounds the whole run [Traffic + 3 Bound + 1m].
	Timeout time.Duration
	// Logf receives progress lines [discard].
	Logf func(format string, args ...any)
}

func (c *Config) defaults() error {
	if c.Dir == "" {
		return errors.New("chaos: Config.Dir is required")
	}
	if c.Brokers == 0 {
		c.Brokers = 2
	}
	if c.Traffic == 0 {
		c.Traffic = 12 * time.Second
	}
	if c.Rate == 0 {
		c.Rate = 150
	}
	if c.ClientProducers == 0 && c.ThinProducers == 0 {
		c.ClientProducers, c.ThinProducers = 2, 1
	}
	if c.Members == 0 {
		c.Members = 2
	}
	if c.LateMembers == 0 {
		c.LateMembers = 2
	}
	if c.Keys == 0 {
		c.Keys = 100
	}
	if c.Bound == 0 {
		c.Bound = 25 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = c.Traffic + 3*c.Bound + time.Minute
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// Topic is the run's topic; its initial partitioning is 4 partitions of librdkafka-consistent.
const (
	Topic              = "orders"
	initialPartitions  = 4
	initialPartitioner = "librdkafka-consistent"
)

// Result is what a run observed. Failures says what is wrong.
type Result struct {
	Seed    int64
	Plan    Plan
	Faults  []FaultRecord
	Changes []ChangeRecord
	Epochs  []wire.Epoch
	// Sent and Acked count records; SendFailed counts records a producer gave up on (reported
	// to its caller as failed).
	Sent, Acked, SendFailed int
	SendErrors              []string // a few examples
	// InProcess counts records failed because JetStream kept answering 10158 for their id
	// (spec/protocol.md §5.1.5: a raft proposal undecided, e.g. its leader cut off): their fate is
	// unknown, as a record's never acknowledged is, so they are not failures of the run; the
	// order checker still sees them (stored at most once).
	InProcess int
	// Unresolved counts records handed to a producer that it neither acknowledged nor failed
	// by the end of the run (its Close gave up): they are in no sent log.
	Unresolved int
	// Verify is the order checker's verdict over the live and the late group.
	Verify    *verify.Result
	Placement scenario.PlacementReport
	// Misplaced counts stored records on the wrong side of a boundary (the stream audit).
	Misplaced int
	// Drain is how long after the traffic (and the faults) ended the live group needed to deliver
	// every acknowledged record; LateDrain the same for the late group from its start. A group
	// that never got there has Incomplete set.
	Drain, LateDrain         time.Duration
	LiveIncomplete           bool
	LateIncomplete           bool
	LiveMissing, LateMissing int64
	// WorstStall is the longest delivery delay of the run: from a record's hand-over to its
	// producer (Send) to its first delivery to the live group.
	WorstStall time.Duration
	// SetupRetries are the steps (broker start and restart, topic creation, a first consumer)
	// that failed and were tried again (see run.setup): not failures of the run, but findings.
	SetupRetries []string
	// Problems are failures of the run itself that are not the checkers' (a change that never
	// completed, a broker that did not come back, a group member that returned an error).
	Problems []string
	Elapsed  time.Duration
}

// FaultRecord is a fault as it happened.
type FaultRecord struct {
	Fault
	Target string        // what it hit: "n2 (leader of pctl-orders_3)", "broker b1"
	Began  time.Duration // from the traffic's start
	Ended  time.Duration // when the target was back
	// Stall is the longest delivery delay (Send to the live group's first delivery) of the
	// records handed to producers from 1s before Began to Ended.
	Stall time.Duration
	Err   string // the fault could not be injected (no leader found...)
}

// ChangeRecord is an epoch change as it happened.
type ChangeRecord struct {
	Change
	Began    time.Duration
	Took     time.Duration
	Attempts int
	Errors   []string // the requests' errors on the way (retried)
	Done     bool
}

// OK reports whether the run found nothing wrong.
func (r *Result) OK() bool { return len(r.Failures()) == 0 }

// Failures lists what is wrong, one line each; empty when OK.
func (r *Result) Failures() []string {
	var out []string
	if r.Verify == nil {
		out = append(out, "the order checker did not run")
	} else if !r.Verify.OK() {
		for _, g := range r.Verify.Groups {
			if !g.OK() {
				out = append(out, g.String())
				for _, ex := range g.Examples {
					out = append(out, "  "+ex)
				}
			}
		}
		if len(r.Verify.Failures) > 0 && len(out) == 0 {
			out = append(out, "order checker: "+strings.Join(r.Verify.Failures, ", "))
		}
	}
	if !r.Placement.OK() {
		out = append(out, fmt.Sprintf("placement: %d keyed deliveries outside f_epoch(key), %d not checkable %v", r.Placement.Wrong, r.Placement.Errors, r.Placement.Examples))
	}
	if r.Misplaced > 0 {
		out = append(out, fmt.Sprintf("%d stored records on the wrong side of an epoch boundary", r.Misplaced))
	}
	if r.SendFailed > 0 {
		out = append(out, fmt.Sprintf("%d records failed to send (producers gave up): %s", r.SendFailed, strings.Join(r.SendErrors, "; ")))
	}
	if r.Unresolved > 0 {
		out = append(out, fmt.Sprintf("%d records handed to producers were never resolved (neither acknowledged nor failed)", r.Unresolved))
	}
	if r.LiveIncomplete {
		out = append(out, fmt.Sprintf("live group: %d acknowledged records not delivered within the bound after the traffic", r.LiveMissing))
	}
	if r.LateIncomplete {
		out = append(out, fmt.Sprintf("late group: %d acknowledged records not delivered within the bound", r.LateMissing))
	}
	out = append(out, r.Problems...)
	return out
}

// Summary is a one-line description of the run: seed, faults, verdict.
func (r *Result) Summary() string {
	var fs []string
	for _, f := range r.Faults {
		s := fmt.Sprintf("%s@%.1fs", f.Kind, f.Began.Seconds())
		if f.Target != "" {
			s += "[" + f.Target + "]"
		}
		if f.Err != "" {
			s += "(not injected: " + f.Err + ")"
		}
		fs = append(fs, s)
	}
	var cs []string
	for _, c := range r.Changes {
		if c.Done {
			cs = append(cs, fmt.Sprintf("%s in %v", c.Change, c.Took.Round(time.Millisecond)))
		} else {
			cs = append(cs, fmt.Sprintf("%s NOT DONE (%d attempts)", c.Change, c.Attempts))
		}
	}
	verdict := "OK"
	if !r.OK() {
		verdict = "FAIL"
	}
	return fmt.Sprintf("seed %d: %s; %d sent, %d acked, %d of unknown fate (10158); changes: %s; faults: %s; drain %v, worst delivery delay %v",
		r.Seed, verdict, r.Sent, r.Acked, r.InProcess, strings.Join(cs, ", "), strings.Join(fs, ", "), r.Drain.Round(time.Millisecond), r.WorstStall.Round(time.Millisecond))
}

// run is one run's state.
type run struct {
	cfg     Config
	ctx     context.Context
	t0      time.Time // the traffic's start
	cluster *natscluster.Cluster
	creds   map[string]string // role -> seed file
	brokers []*brokerProc

	mu        sync.Mutex
	sent      []verify.Sent
	deliv     []verify.Delivered
	places    []scenario.Placement
	handedAt  map[string]time.Duration // recordID -> when it was handed to its producer, from t0
	liveAt    map[string]time.Duration // recordID -> its first delivery to the live group, from t0
	sendErrs  []string
	ackedIDs  []string // recordID of every acknowledged record
	pending   []pendingCount
	order     atomic.Int64
	acked     atomic.Int64
	failed    atomic.Int64
	inProcess atomic.Int64
	res       Result
	admin     *client.Client
	named     map[string]*client.Client // connection name -> client (to find a client's node)
}

// Run executes a run. Its error is for a run that could not be set up (the cluster or a broker
// did not start); what the run found is in the Result.
func Run(parent context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	plan := Schedule(cfg.Seed, cfg.Traffic, cfg.Brokers)
	if cfg.Schedule != nil {
		plan = *cfg.Schedule
	}
	ctx, cancel := context.WithTimeout(parent, cfg.Timeout)
	defer cancel()
	start := time.Now()
	r := &run{cfg: cfg, ctx: ctx}
	r.res.Seed, r.res.Plan = cfg.Seed, plan

	if err := r.startCluster(); err != nil {
		return nil, err
	}
	defer r.cluster.Close()
	for i := 0; i < cfg.Brokers; i++ {
		var b *brokerProc
		err := r.setup(fmt.Sprintf("start broker b%d", i+1), func() error {
			var err error
			b, err = r.startBroker(i)
			return err
		})
		if err != nil {
			return nil, err
		}
		r.brokers = append(r.brokers, b)
	}
	defer func() {
		for _, b := range r.brokers {
			b.close()
		}
	}()
	admin, err := r.connect(broker.RoleAdmin, "chaos-admin")
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	r.admin = admin
	if err := r.setup("create topic", func() error {
		_, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: Topic, Partitions: initialPartitions, Partitioner: initialPartitioner})
		if errors.Is(err, wire.ErrExists) {
			// An earlier attempt created it and its answer was lost (the cluster is this run's
			// own and new): go on if it is that topic, as asked (a clean-clone run of
			// TestDemoCluster retried into "already exists" for 20 s).
			if t, _, gerr := admin.Topic(ctx, Topic); gerr == nil && len(t.Epochs) == 1 &&
				t.Current().Partitions == initialPartitions && t.Current().Partitioner.Name == initialPartitioner {
				return nil
			}
		}
		return err
	}); err != nil {
		return nil, err
	}
	if info, err := r.cluster.Stream(ctx, wire.StreamName(Topic, 0)); err != nil || len(info.Replicas) != 2 {
		return nil, fmt.Errorf("chaos: the topic's first partition stream is not on 3 nodes: %+v %v", info, err)
	}

	live := &group{r: r, name: "live", live: true}
	for i := 0; i < cfg.Members; i++ {
		if err := r.setup("start live member", func() error { return live.add(fmt.Sprintf("m%d", i)) }); err != nil {
			return nil, err
		}
	}
	defer live.stop()

	// The traffic, and the schedule beside it.
	r.t0 = time.Now()
	var pwg sync.WaitGroup
	for i := 0; i < cfg.ClientProducers; i++ {
		pwg.Add(1)
		go func(i int) {
			defer pwg.Done()
			r.clientProducer(fmt.Sprintf("c%d", i), cfg.Seed*100+int64(i))
		}(i)
	}
	for i := 0; i < cfg.ThinProducers; i++ {
		pwg.Add(1)
		go func(i int) {
			defer pwg.Done()
			r.thinProducer(fmt.Sprintf("t%d", i), cfg.Seed*100+50+int64(i))
		}(i)
	}
	var swg sync.WaitGroup
	faults := make([]FaultRecord, len(plan.Faults))
	changes := make([]ChangeRecord, len(plan.Changes))
	// Node faults one after the other (one node down at a time, so that the cluster keeps its
	// majority): each starts at its time or when the previous one is over, whichever is later.
	swg.Add(1)
	go func() {
		defer swg.Done()
		for i, f := range plan.Faults {
			if f.Kind == KillBroker {
				continue // rides on a change
			}
			if !r.sleepUntil(f.At) {
				return
			}
			faults[i] = r.inject(f)
		}
	}()
	swg.Add(1)
	go func() {
		defer swg.Done()
		// A broker killed during change i is restarted by its own goroutine, and the next change
		// does not wait for it: the other brokers serve it (a restart under load or the race
		// detector can take 20 s, which used to push the later changes past the run's deadline
		// with no attempt at all).
		var kills sync.WaitGroup
		defer kills.Wait()
		for i, ch := range plan.Changes {
			if !r.sleepUntil(ch.At) {
				return
			}
			for j, f := range plan.Faults {
				if f.Kind == KillBroker && f.During == i+1 {
					kills.Add(1)
					go func() {
						defer kills.Done()
						time.Sleep(f.Delay)
						faults[j] = r.inject(f)
					}()
				}
			}
			changes[i] = r.change(admin, ch)
		}
	}()
	pwg.Wait()
	trafficEnd := time.Since(r.t0)
	r.cfg.Logf("chaos: seed %d: traffic done after %v", cfg.Seed, trafficEnd.Round(time.Millisecond))
	swg.Wait()
	faultsEnd := time.Since(r.t0)
	r.res.Faults, r.res.Changes = faults, changes
	for _, c := range changes {
		if !c.Done {
			r.problem("epoch change %q never completed (%d attempts: %s)", c.Change, c.Attempts, strings.Join(c.Errors, "; "))
		}
	}

	// Every acknowledged record to the live group within the bound.
	acked := r.acked.Load()
	quiet := r.t0.Add(faultsEnd)
	if done, ok := live.waitAll(acked, cfg.Bound); ok {
		r.res.Drain = max(0, done.Sub(quiet))
	} else {
		r.res.LiveIncomplete, r.res.LiveMissing = true, acked-live.delivered()
		r.res.Drain = time.Since(quiet)
		// For the post-mortem: where every goroutine of this process (the live members among
		// them) is while the group is stuck.
		r.dumpGoroutines("live-stuck-goroutines.txt")
	}
	late := &group{r: r, name: "late"}
	lateStart := time.Now()
	for i := 0; i < cfg.LateMembers; i++ {
		if err := late.add(fmt.Sprintf("m%d", i)); err != nil {
			r.problem("late group member: %v", err)
		}
	}
	defer late.stop()
	done, ok := late.waitAll(acked, cfg.Bound)
	if !ok {
		r.res.LateIncomplete, r.res.LateMissing = true, acked-late.delivered()
	}
	r.res.LateDrain = done.Sub(lateStart)
	time.Sleep(200 * time.Millisecond) // let in-flight duplicates land too
	live.stop()
	late.stop()

	// The checks.
	r.stalls(trafficEnd)
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	desc, _, err := admin.Topic(cctx, Topic)
	if err != nil {
		r.problem("topic descriptor after the run: %v", err)
	} else {
		r.res.Epochs = desc.Epochs
		if desc.Change != nil {
			r.problem("a change is still in progress after the run: %+v", desc.Change)
		}
		if want := 1 + len(plan.Changes); len(desc.Epochs) != want {
			r.problem("the topic has %d epochs after %d changes, want %d", len(desc.Epochs), len(plan.Changes), want)
		}
		n, err := auditBoundaries(cctx, admin, desc)
		if err != nil {
			r.problem("boundary audit: %v", err)
		}
		r.res.Misplaced = n
	}
	r.mu.Lock()
	sent, deliv, places := r.sent, r.deliv, r.places
	r.mu.Unlock()
	if desc != nil {
		r.res.Placement = scenario.CheckPlacements(cctx, desc, admin.Module, places)
	}
	r.res.Verify = verify.Check(sent, deliv, verify.Options{Groups: []string{"live", "late"}})
	r.res.Sent, r.res.Acked, r.res.SendFailed, r.res.InProcess = len(sent), int(acked), int(r.failed.Load()), int(r.inProcess.Load())
	r.mu.Lock()
	r.res.SendErrors = r.sendErrs
	for _, p := range r.pending {
		r.res.Unresolved += int(p.handed - p.resolved.Load())
	}
	r.mu.Unlock()
	r.res.Elapsed = time.Since(start)
	return &r.res, nil
}

// setup runs a setup step, trying again for 20s while it fails: on a fresh cluster a broker's
// bucket creation can time out, and requests right after the brokers' ready lines can find no
// responder (interest crosses routes asynchronously). Each retry is recorded.
func (r *run) setup(what string, f func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			return fmt.Errorf("chaos: %s: %w", what, err)
		}
		first, _, _ := strings.Cut(err.Error(), "\n")
		r.mu.Lock()
		r.res.SetupRetries = append(r.res.SetupRetries, what+": "+first)
		r.mu.Unlock()
		r.cfg.Logf("chaos: %s: %v; again", what, err)
		time.Sleep(250 * time.Millisecond)
	}
}

func (r *run) problem(format string, args ...any) {
	r.mu.Lock()
	r.res.Problems = append(r.res.Problems, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// sleepUntil sleeps until at after the traffic's start; false if the run ended.
func (r *run) sleepUntil(at time.Duration) bool {
	select {
	case <-time.After(time.Until(r.t0.Add(at))):
		return true
	case <-r.ctx.Done():
		return false
	}
}

// startCluster starts the 3 nodes with the role users of spec/protocol.md §8 (as 'pctl
// nats-server config' writes them) and routes through proxies (for IsolateNode).
func (r *run) startCluster() error {
	dir := filepath.Join(r.cfg.Dir, "cluster")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	r.creds = map[string]string{}
	var users []natsconf.User
	for _, role := range broker.Roles {
		pub, path, err := natscluster.NewUser(filepath.Join(r.cfg.Dir, role+".nk"))
		if err != nil {
			return err
		}
		r.creds[role] = path
		var perms *natsconf.Permissions
		if p := broker.UserPermissions(role, pub); p != nil { // the role's, with its private inbox
			perms = &natsconf.Permissions{}
			if p.Publish != nil {
				perms.PublishAllow, perms.PublishDeny = p.Publish.Allow, p.Publish.Deny
			}
			if p.Subscribe != nil {
				perms.SubscribeAllow, perms.SubscribeDeny = p.Subscribe.Allow, p.Subscribe.Deny
			}
		}
		users = append(users, natsconf.User{Comment: role, NKey: pub, Permissions: perms})
	}
	c, err := natscluster.New(natscluster.Options{Nodes: 3, Dir: dir, Bin: r.cfg.Bin, Users: users, ProxiedRoutes: true,
		Logf: func(f string, a ...any) { r.cfg.Logf(f, a...) }})
	if err != nil {
		return fmt.Errorf("chaos: cluster: %w", err)
	}
	r.cluster = c
	return nil
}

func (r *run) connect(role, name string) (*client.Client, error) {
	c, err := client.Connect(r.ctx, client.Options{URL: r.cluster.ClientURLs(), Creds: r.creds[role], Name: name})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.named == nil {
		r.named = map[string]*client.Client{}
	}
	r.named[name] = c
	r.mu.Unlock()
	return c, nil
}

// stalls computes the delivery delays: the worst of the run, and of the records sent around each
// fault.
func (r *run) stalls(trafficEnd time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type rec struct{ at, delay time.Duration }
	var recs []rec
	for id, live := range r.liveAt {
		if h, ok := r.handedAt[id]; ok {
			recs = append(recs, rec{h, live - h})
		}
	}
	worst := func(from, to time.Duration) time.Duration {
		var w time.Duration
		for _, x := range recs {
			if x.at >= from && x.at <= to {
				w = max(w, x.delay)
			}
		}
		return w
	}
	r.res.WorstStall = worst(0, trafficEnd)
	for i := range r.res.Faults {
		f := &r.res.Faults[i]
		if f.Began == 0 && f.Ended == 0 {
			continue
		}
		f.Stall = worst(f.Began-time.Second, f.Ended)
	}
}

// dumpGoroutines writes the stacks of every goroutine of this process into the run's directory
// and says where in the log.
func (r *run) dumpGoroutines(name string) {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	path := filepath.Join(r.cfg.Dir, name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		r.cfg.Logf("chaos: goroutine dump: %v", err)
		return
	}
	r.cfg.Logf("chaos: the goroutines of the test process are in %s", path)
}
