package clientconf

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/netproxy"
)

var execLookPath = exec.LookPath

// The records of every scenario (spec/client-conformance.md §3).
const (
	numKeys     = 24
	valueBytes  = 6000 // a phase is more than twice 64 KiB: a client that reads its input in 64 KiB blocks holds back less than half a phase
	heartbeat   = "300ms"
	catchUpWait = 60 * time.Second // for the group to deliver what was written but half a phase
	joinWait    = 60 * time.Second // for the members to join (a JVM starts slowly)
	drainWait   = 60 * time.Second // after the producer exits, for every acknowledged record
	produceWait = 90 * time.Second // after stdin is closed, for the producer to exit
	stopWait    = 20 * time.Second // after SIGTERM, for a member to exit
)

// scenarios are the rows, in order (spec/client-conformance.md §4).
var scenarios = []scenario{
	{name: "baseline", description: "2 members, no fault", members: 2, dups: dupFail, run: func(r *run) error {
		return r.phases(3, nil)
	}},
	{name: "conn-cuts", description: "every connection cut (TCP reset) 5 times at seeded moments", members: 2, proxy: true, allowUnacked: true, dups: dupCount, run: func(r *run) error {
		return r.phases(6, func(phase int) error {
			if phase < 2 {
				return nil // the first phase is delivered before any fault: every client is connected
			}
			r.sleepUpTo(150 * time.Millisecond)
			n := r.proxy.Cut()
			r.fault("phase %d: cut %d connections", phase, n)
			return nil
		})
	}},
	{name: "ack-timeout", description: "acknowledgements late: the proxy freezes 4 times for 400ms", members: 2, proxy: true, allowUnacked: true, dups: dupCount, run: func(r *run) error {
		return r.phases(5, func(phase int) error {
			if phase < 2 {
				return nil
			}
			r.sleepUpTo(150 * time.Millisecond)
			r.proxy.Freeze()
			time.Sleep(400 * time.Millisecond)
			r.proxy.Thaw()
			r.fault("phase %d: froze every connection for 400ms", phase)
			return nil
		})
	}},
	{name: "broker-restart", description: "the broker crashes and restarts (same port and data) in the middle of traffic", members: 2, allowUnacked: true, dups: dupCount, run: func(r *run) error {
		return r.phases(4, func(phase int) error {
			if phase != 2 {
				return nil
			}
			r.sleepUpTo(150 * time.Millisecond)
			r.b.Abort()
			time.Sleep(300 * time.Millisecond)
			b, err := startBroker(r.ctx, r.dataDir, r.listen, nil)
			if err != nil {
				return err
			}
			r.b = b
			r.fault("phase %d: broker killed and restarted", phase)
			return nil
		})
	}},
	{name: "epochs", description: "grow 3->5, swap the function, shrink 5->2 in the middle of traffic", members: 2, dups: dupFail, run: func(r *run) error {
		changes := []struct {
			what string
			req  wire.RepartitionRequest
		}{
			{"grow 3 -> 5", wire.RepartitionRequest{Partitions: 5}},
			{"swap kafka-murmur2 -> librdkafka-consistent", wire.RepartitionRequest{Partitioner: "librdkafka-consistent"}},
			{"shrink 5 -> 2", wire.RepartitionRequest{Partitions: 2}},
		}
		// A change after phases 2, 4 and 6: the phase after each is written once the change is
		// done, so every epoch has records whatever the producer's speed.
		return r.phases(7, func(phase int) error {
			if phase%2 == 1 || phase > 6 {
				return nil
			}
			c := changes[phase/2-1]
			r.sleepUpTo(50 * time.Millisecond)
			c.req.Topic = r.topic
			if _, err := r.admin.Repartition(r.ctx, c.req); err != nil {
				return fmt.Errorf("%s: %w", c.what, err)
			}
			r.fault("phase %d: %s", phase, c.what)
			return nil
		})
	}},
	{name: "member-crash", description: "one of 3 members killed with SIGKILL", members: 3, dups: dupVictim, run: func(r *run) error {
		return r.phases(4, func(phase int) error {
			if phase != 2 {
				return nil
			}
			if err := r.caughtUp(); err != nil {
				return err
			}
			var cands []*member
			for _, m := range r.members {
				if m.count() > 0 {
					cands = append(cands, m)
				}
			}
			if len(cands) == 0 {
				return fmt.Errorf("no member delivered anything to crash")
			}
			r.victim = cands[r.rng.IntN(len(cands))]
			r.victim.signal(syscall.SIGKILL)
			<-r.victim.exited
			r.victim.mu.Lock()
			cut := ""
			if r.victim.cut != "" {
				cut = ", its last line cut short (not a delivery)"
			}
			r.victim.mu.Unlock()
			r.fault("phase %d: member %s killed (SIGKILL) after %d deliveries%s", phase, r.victim.name, r.victim.count(), cut)
			return nil
		})
	}},
	{name: "late-member", description: "a second member joins after 2 phases", members: 1, dups: dupFail, run: func(r *run) error {
		if err := r.phases(2, nil); err != nil {
			return err
		}
		if err := r.caughtUp(); err != nil {
			return err
		}
		m, err := r.startMember("m-late")
		if err != nil {
			return err
		}
		r.late = m
		if err := r.joined(2); err != nil {
			return err
		}
		r.fault("phase 2: member m-late joined")
		// At least 3 more phases, and more (up to 10) until the late member has delivered: it
		// takes partitions over at a rebalance, which may come after a phase was delivered.
		for i := 3; i <= 12; i++ {
			if err := r.prod.write(phaseLines(i)); err != nil {
				return err
			}
			if err := r.caughtUp(); err != nil {
				return err
			}
			if i >= 5 && m.count() > 0 {
				return nil
			}
		}
		return fmt.Errorf("the late member delivered nothing in 10 phases after it joined (it should take partitions over); stderr: %s", m.stderrTail(3))
	}},
	compactedScenario, // compact.go
}

// run is one scenario in progress.
type run struct {
	ctx     context.Context
	opts    Options
	s       scenario
	dir     string
	rng     *rand.Rand
	dataDir string
	listen  string
	b       *broker.Broker
	admin   *client.Client
	proxy   *netproxy.Proxy
	topic   string
	group   string
	prod    *producer
	members []*member
	victim  *member
	late    *member
	fresh   *member       // compacted: the member of a new group reading the current epoch alone
	held    chan struct{} // compacted: closed when the first backfill is held at its start
	release chan struct{} // compacted: closing it lets that backfill go on
	relOnce sync.Once
	faults  []string
	fail    []string
}

func (r *run) logf(format string, args ...any) {
	if r.opts.Logf != nil {
		r.opts.Logf("%s: "+format, append([]any{r.s.name}, args...)...)
	}
}

func (r *run) fault(format string, args ...any) {
	f := fmt.Sprintf(format, args...)
	r.faults = append(r.faults, f)
	r.logf("%s", f)
}

func (r *run) failf(format string, args ...any) {
	r.fail = append(r.fail, fmt.Sprintf(format, args...))
}

func (r *run) sleepUpTo(d time.Duration) {
	time.Sleep(time.Duration(r.rng.Int64N(int64(d) + 1)))
}

// url is where the client's commands connect: the proxy when the scenario cuts connections.
func (r *run) url() string {
	if r.proxy != nil {
		return "nats://" + r.proxy.Addr()
	}
	return r.b.ClientURL()
}

func (r *run) env() []string {
	return r.opts.Env
}

func (r *run) startMember(name string) (*member, error) {
	argv := append(append([]string(nil), r.opts.Consumer...), "--server", r.url(), "--creds", broker.CredsPath(r.dataDir, broker.RoleConsumer),
		"--topic", r.topic, "--group", r.group, "--member", name, "--from-beginning", "--heartbeat", heartbeat)
	m, err := startMember(argv, r.env(), r.dir, name)
	if err != nil {
		return nil, err
	}
	r.members = append(r.members, m)
	return m, nil
}

// joined waits until the group has n members.
func (r *run) joined(n int) error {
	deadline := time.Now().Add(joinWait)
	for {
		gs, err := r.admin.Groups(r.ctx, r.topic)
		if err == nil {
			for _, g := range gs {
				if g.Group == r.group && len(g.Members) >= n {
					return nil
				}
			}
		}
		for _, m := range r.members {
			if !m.alive() && !m.told.Load() {
				return fmt.Errorf("member %s exited before it joined the group: %v; stderr: %s", m.name, m.waitErr, m.stderrTail(4))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the group did not have %d members within %v (groups: %v, %v)", n, joinWait, gs, err)
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// distinct counts the distinct records of this run's producer the group delivered.
func (r *run) distinct() int {
	seen := map[uint64]bool{}
	for _, m := range r.members {
		for _, d := range m.deliveries() {
			if d.Producer == r.prod.id {
				seen[d.PSeq] = true
			}
		}
	}
	return len(seen)
}

// caughtUp waits until the group delivered all that was written but half a phase (a client
// reading its input in 64 KiB blocks holds up to 64 KiB of it back: 10 lines).
func (r *run) caughtUp() error {
	if r.s.compact {
		return r.caughtUpKeys(len(r.prod.sent) - (numKeys+1)/2)
	}
	want := len(r.prod.sent) - (numKeys+1)/2
	deadline := time.Now().Add(catchUpWait)
	for r.distinct() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("the group delivered %d distinct records of the %d written within %v (want %d); producer stderr: %s",
				r.distinct(), len(r.prod.sent), catchUpWait, want, r.prod.stderrTail(3))
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// phaseLines are one phase: one record per key in key order, then a keyless one.
func phaseLines(phase int) []line {
	pad := func(s string) string { return s + strings.Repeat(".", max(0, valueBytes-len(s))) }
	out := make([]line, 0, numKeys+1)
	for k := 0; k < numKeys; k++ {
		out = append(out, line{key: fmt.Sprintf("k%02d", k), value: pad(fmt.Sprintf("%d-k%02d-", phase, k))})
	}
	return append(out, line{noKey: true, value: pad(fmt.Sprintf("keyless-%d-", phase))})
}

// phases writes n phases; after writing phase i (1-based) it calls after(i), then waits for the
// group to catch up before the next.
func (r *run) phases(n int, after func(phase int) error) error {
	for i := 1; i <= n; i++ {
		if err := r.prod.write(phaseLines(i)); err != nil {
			return err
		}
		if after != nil {
			if err := after(i); err != nil {
				return err
			}
		}
		if i < n {
			if err := r.caughtUp(); err != nil {
				return err
			}
		}
	}
	return nil
}

func runScenario(ctx context.Context, opts Options, s scenario, dir string, rng *rand.Rand) (Row, error) {
	start := time.Now()
	r := &run{ctx: ctx, opts: opts, s: s, dir: dir, rng: rng, dataDir: dir + "/broker", topic: "cc-" + s.name, group: "g-" + s.name}
	r.logf("starting: %s", s.description)
	var err error
	if r.listen, err = freePort(); err != nil {
		return Row{}, err
	}
	var hook func(topic, step string) error
	if s.hold {
		hook = r.holdFirstBackfill()
	}
	if r.b, err = startBroker(ctx, r.dataDir, r.listen, hook); err != nil {
		return Row{}, err
	}
	defer func() { r.b.Close() }()
	defer r.releaseBackfill() // before the broker closes: it waits for its backfill
	if r.admin, err = connectAdmin(ctx, r.b); err != nil {
		return Row{}, fmt.Errorf("connect to the broker: %w", err)
	}
	defer r.admin.Close()
	if s.proxy {
		if r.proxy, err = netproxy.New(r.listen); err != nil {
			return Row{}, err
		}
		defer r.proxy.Close()
	}
	if _, err := r.admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: r.topic, Partitions: 3, Partitioner: "kafka-murmur2", Compact: s.compact}); err != nil {
		return Row{}, fmt.Errorf("create topic %s: %w", r.topic, err)
	}
	defer func() {
		for _, m := range r.members {
			m.stop(syscall.SIGKILL, stopWait)
		}
		if r.prod != nil {
			r.prod.stop(syscall.SIGKILL, stopWait)
		}
		if r.fresh != nil {
			r.fresh.stop(syscall.SIGKILL, stopWait)
		}
	}()

	stopped := func() error {
		for i := 0; i < s.members; i++ {
			if _, err := r.startMember(fmt.Sprintf("m%d", i+1)); err != nil {
				return err
			}
		}
		if err := r.joined(s.members); err != nil {
			return err
		}
		pargv := append(append([]string(nil), opts.Producer...), "--server", r.url(), "--creds", broker.CredsPath(r.dataDir, broker.RoleProducer),
			"--topic", r.topic, "--producer-id", "cc-"+s.name)
		if s.name == "ack-timeout" {
			pargv = append(pargv, opts.AckArgs...)
		}
		pargv = append(pargv, s.prodArgs...)
		if r.prod, err = startProducer(pargv, r.env(), dir, "cc-"+s.name); err != nil {
			return err
		}
		return s.run(r)
	}()
	if stopped != nil {
		r.failf("stopped: %v", stopped)
	}
	if s.name == "ack-timeout" && len(opts.AckArgs) == 0 {
		r.fault("no --ack-args: the producer ran with its default acknowledgement timeout")
	}
	r.finish()
	if s.after != nil && stopped == nil {
		if err := s.after(r); err != nil {
			r.failf("stopped: %v", err)
		}
	}
	row := r.check()
	row.Name, row.Description = s.name, s.description
	row.DurationMS = time.Since(start).Milliseconds()
	r.logf("%s in %v", map[bool]string{true: "PASS", false: "FAIL"}[row.Passed], time.Since(start).Round(time.Millisecond))
	return row, nil
}

// finish closes the producer's input, waits for it and for the group to deliver every
// acknowledged record, then stops the members with SIGTERM.
func (r *run) finish() {
	if r.prod != nil {
		r.prod.stdin.Close()
		select {
		case <-r.prod.exited:
		case <-time.After(produceWait):
			res, _, _ := r.prod.snapshot()
			r.failf("producer: did not exit within %v of the end of its input (%d of %d results); stderr: %s", produceWait, len(res), len(r.prod.sent), r.prod.stderrTail(3))
			r.prod.stop(syscall.SIGKILL, time.Second)
		}
		res, _, _ := r.prod.snapshot()
		acked := map[uint64]bool{}
		for p, x := range res {
			if x.Acked {
				acked[p] = true
			}
		}
		latest := latestAcked(r.prod.sent, res)
		delivered := func() int {
			if r.s.compact { // every key's latest acknowledged record, or a later one
				want := map[string]uint64{}
				for k, w := range latest {
					want[k] = w.pseq
				}
				return len(acked) - r.keysBehind(want)
			}
			n := 0
			seen := map[uint64]bool{}
			for _, m := range r.members {
				for _, d := range m.deliveries() {
					if d.Producer == r.prod.id && acked[d.PSeq] && !seen[d.PSeq] {
						seen[d.PSeq] = true
						n++
					}
				}
			}
			return n
		}
		// Up to drainWait, but not 30 s past the last new delivery (a record lost stays lost).
		deadline := time.Now().Add(drainWait)
		last, lastAt := -1, time.Now()
		for n := delivered(); n < len(acked) && time.Now().Before(deadline) && time.Since(lastAt) < 30*time.Second && r.ctx.Err() == nil; n = delivered() {
			if n != last {
				last, lastAt = n, time.Now()
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second) // duplicates, if any, would show now
	}
	for _, m := range r.members {
		if m == r.victim {
			continue
		}
		if !m.alive() {
			if !m.told.Load() {
				r.failf("member %s exited by itself (%v) before it was stopped; stderr: %s", m.name, m.waitErr, m.stderrTail(4))
			}
			continue
		}
		if !m.stop(syscall.SIGTERM, stopWait) {
			r.failf("member %s did not exit within %v of SIGTERM", m.name, stopWait)
		} else if m.waitErr != nil {
			r.failf("member %s exited with %v after SIGTERM (want 0: commit, leave the group, exit); stderr: %s", m.name, m.waitErr, m.stderrTail(4))
		}
	}
}

// partitionFunc returns, for the topic's epochs, the partition each epoch's module gives a key.
func (r *run) partitionFunc() (func(epoch int, key []byte) (int, error), int, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	desc, _, err := r.admin.Topic(ctx, r.topic)
	if err != nil {
		return nil, 0, err
	}
	type part interface {
		Partition(key []byte, n int32) (int32, error)
	}
	parts := map[int]part{}
	ns := map[int]int{}
	for _, e := range desc.Epochs {
		p, err := r.admin.Partitioner(ctx, e.Partitioner)
		if err != nil {
			return nil, 0, err
		}
		parts[e.Epoch], ns[e.Epoch] = p, e.Partitions
	}
	cache := map[string]int{}
	return func(epoch int, key []byte) (int, error) {
		ck := fmt.Sprintf("%d/%x", epoch, key)
		if v, ok := cache[ck]; ok {
			return v, nil
		}
		p, ok := parts[epoch]
		if !ok {
			return 0, fmt.Errorf("the topic has no epoch %d", epoch)
		}
		v, err := p.Partition(key, int32(ns[epoch]))
		if err != nil {
			return 0, err
		}
		cache[ck] = int(v)
		return int(v), nil
	}, len(desc.Epochs), nil
}

// check computes the row (spec/client-conformance.md §5).
func (r *run) check() (row Row) {
	row = Row{Faults: r.faults}
	if row.Faults == nil {
		row.Faults = []string{}
	}
	defer func() {
		row.Failures = r.fail
		if row.Failures == nil {
			row.Failures = []string{}
		}
		row.Passed = len(r.fail) == 0
	}()
	if r.prod == nil {
		return row
	}
	res, twice, bad := r.prod.snapshot()
	row.Sent = len(r.prod.sent)

	// 1. The producer's results.
	var missing, outside []uint64
	var firstErr string
	for p := uint64(1); p <= uint64(len(r.prod.sent)); p++ {
		x, ok := res[p]
		switch {
		case !ok:
			missing = append(missing, p)
		case x.Acked:
			row.Acked++
		case firstErr == "":
			firstErr = fmt.Sprintf("pseq %d: %s", p, x.Error)
		}
	}
	for p := range res {
		if p < 1 || p > uint64(len(r.prod.sent)) {
			outside = append(outside, p)
		}
	}
	if len(missing) > 0 {
		r.failf("producer: no result for %d of %d records (first pseqs %v)", len(missing), row.Sent, head(missing))
	}
	if len(twice) > 0 {
		r.failf("producer: %d results for a record already reported (pseqs %v)", len(twice), head(twice))
	}
	if len(outside) > 0 {
		sort.Slice(outside, func(i, j int) bool { return outside[i] < outside[j] })
		r.failf("producer: results for pseqs it was never given %v (%d lines written)", head(outside), row.Sent)
	}
	if len(bad) > 0 {
		r.failf("producer: stdout lines that are not results (want {\"pseq\": n, \"acked\": bool, ...}): %q", bad)
	}
	unacked := row.Sent - len(missing) - row.Acked
	switch {
	case unacked > 0 && !r.s.allowUnacked:
		r.failf("producer: %d of %d records not acknowledged, and no fault explains it (%s); stderr: %s", unacked, row.Sent, firstErr, r.prod.stderrTail(3))
	case unacked*2 > row.Sent:
		r.failf("producer: %d of %d records not acknowledged: more than half (%s); stderr: %s", unacked, row.Sent, firstErr, r.prod.stderrTail(3))
	}
	if !r.prod.alive() && r.prod.waitErr != nil && unacked == 0 && len(missing) == 0 {
		r.failf("producer: exited with %v though every record was acknowledged; stderr: %s", r.prod.waitErr, r.prod.stderrTail(3))
	}
	if !r.prod.alive() && r.prod.waitErr == nil && unacked+len(missing) > 0 {
		r.failf("producer: exited 0 though %d records were not acknowledged", unacked+len(missing))
	}

	part, epochs, perr := r.partitionFunc()
	row.Epochs = epochs
	if perr != nil {
		r.failf("placement: cannot load the topic's modules: %v", perr)
	}

	// 2. Placement of the acknowledged records, as the producer reports it.
	if part != nil {
		wrong, ex := 0, []string{}
		for p, x := range res {
			if !x.Acked || x.Partition == nil || x.Epoch == nil || p < 1 || p > uint64(len(r.prod.sent)) || r.prod.sent[p-1].noKey {
				continue
			}
			key := []byte(r.prod.sent[p-1].key)
			want, err := part(*x.Epoch, key)
			if err != nil || want != *x.Partition {
				wrong++
				if len(ex) < 3 {
					ex = append(ex, placementText(p, key, *x.Epoch, *x.Partition, want, err))
				}
			}
		}
		if wrong > 0 {
			r.failf("placement (producer): %d acknowledged records in another partition than their epoch's module gives: %s", wrong, strings.Join(ex, "; "))
		}
	}

	// 2b. Storage order, as the producer reports it (seq 0: not known, as for the Go producer's
	// records inside a fast batch, client.Result.Seq): records of one key stored in one partition
	// of one epoch have increasing sequence numbers in send order. (Says whether an order
	// violation below is the producer's: it stored them out of order.)
	type slot struct {
		key         string
		epoch, part int
	}
	type stored struct {
		pseq, seq uint64
	}
	byKey := map[slot][]stored{}
	for p, x := range res {
		if !x.Acked || x.Partition == nil || x.Epoch == nil || x.Seq == nil || *x.Seq == 0 || p < 1 || p > uint64(len(r.prod.sent)) || r.prod.sent[p-1].noKey {
			continue
		}
		k := slot{r.prod.sent[p-1].key, *x.Epoch, *x.Partition}
		byKey[k] = append(byKey[k], stored{p, *x.Seq})
	}
	inversions, iex := 0, []string{}
	for k, ss := range byKey {
		sort.Slice(ss, func(i, j int) bool { return ss[i].pseq < ss[j].pseq })
		for i := 1; i < len(ss); i++ {
			if ss[i].seq <= ss[i-1].seq {
				inversions++
				if len(iex) < 3 {
					iex = append(iex, fmt.Sprintf("key %q, partition %d of epoch %d: pseq %d stored at seq %d, before pseq %d at seq %d", k.key, k.part, k.epoch, ss[i].pseq, ss[i].seq, ss[i-1].pseq, ss[i-1].seq))
				}
			}
		}
	}
	if inversions > 0 {
		sort.Strings(iex)
		r.failf("order (producer): %d records stored before a record of their key sent earlier, by the producer's own results: %s", inversions, strings.Join(iex, "; "))
	}

	// 3. client/verify.
	sent := make([]verify.Sent, 0, len(r.prod.sent))
	for i, l := range r.prod.sent {
		s := verify.Sent{Producer: r.prod.id, PSeq: uint64(i + 1), Acked: res[uint64(i+1)].Acked}
		if l.noKey {
			s.NoKey = true
		} else {
			s.Key = []byte(l.key)
		}
		sent = append(sent, s)
	}
	var all []delivery
	var dels []verify.Delivered
	for _, m := range r.members {
		m.mu.Lock()
		if m.nbad > 0 {
			r.failf("member %s: %d stdout lines that are not deliveries (want pctl consume --format jsonl --timestamps lines): %s", m.name, m.nbad, strings.Join(m.bad, "; "))
		}
		m.mu.Unlock()
		for _, d := range m.deliveries() {
			all = append(all, d)
			k, keyed := d.key()
			dels = append(dels, verify.Delivered{Group: r.group, Member: m.name, Order: d.TS, Producer: d.Producer, PSeq: d.PSeq, Key: k, NoKey: !keyed})
		}
	}
	vr := verify.Check(sent, dels, verify.Options{Groups: []string{r.group}, NoDuplicates: r.s.dups == dupFail, Compacted: r.s.compact})
	if g := vr.Group(r.group); g != nil {
		row.Delivered, row.Duplicates = g.Distinct, g.Duplicates
		var what []string
		for _, f := range g.Failures {
			switch f {
			case verify.FailLost:
				what = append(what, fmt.Sprintf("%d acknowledged records lost", g.Lost))
			case verify.FailOrder:
				what = append(what, fmt.Sprintf("%d per-key order violations", g.Violations))
			case verify.FailWrongKey:
				what = append(what, fmt.Sprintf("%d delivered with a wrong key", g.WrongKey))
			case verify.FailUnexpected:
				what = append(what, fmt.Sprintf("%d unexpected (never sent)", g.Unexpected))
			case verify.FailDuplicates:
				what = append(what, fmt.Sprintf("%d duplicates and no crash", g.Duplicates))
			default:
				what = append(what, f)
			}
		}
		if len(what) > 0 {
			r.failf("verify: %s: %s", strings.Join(what, ", "), strings.Join(head(g.Examples), "; "))
		}
	}
	if len(vr.Failures) > 0 && vr.Group(r.group) != nil && len(vr.Group(r.group).Failures) == 0 {
		r.failf("verify: %v: %v", vr.Failures, vr.Examples)
	}

	// Duplicates only of what the crashed member delivered first.
	if r.s.dups == dupVictim {
		sort.SliceStable(all, func(i, j int) bool { return all[i].TS < all[j].TS })
		first := map[string]string{}
		bad, ex := 0, []string{}
		for _, d := range all {
			k := fmt.Sprint(d.Producer, "/", d.PSeq)
			f, ok := first[k]
			if !ok {
				first[k] = d.member
				continue
			}
			if r.victim == nil || f != r.victim.name {
				bad++
				if len(ex) < 3 {
					ex = append(ex, fmt.Sprintf("pseq %d first by %s, again by %s", d.PSeq, f, d.member))
				}
			}
		}
		if bad > 0 {
			r.failf("duplicates: %d records delivered again though the member that delivered them first did not crash: %s", bad, strings.Join(ex, "; "))
		}
	}

	// 4. Placement of every keyed delivery.
	if part != nil {
		wrong, ex := 0, []string{}
		seenEpochs := map[int]bool{}
		for _, d := range all {
			seenEpochs[d.Epoch] = true
			k, keyed := d.key()
			if !keyed {
				continue
			}
			want, err := part(d.Epoch, k)
			if err != nil || want != d.Partition {
				wrong++
				if len(ex) < 3 {
					ex = append(ex, fmt.Sprintf("member %s: ", d.member)+placementText(d.PSeq, k, d.Epoch, d.Partition, want, err))
				}
			}
		}
		if wrong > 0 {
			r.failf("placement (consumer): %d deliveries from another partition than their epoch's module gives: %s", wrong, strings.Join(ex, "; "))
		}
		if r.s.name == "epochs" && (epochs != 4 || len(seenEpochs) != 4) {
			r.failf("epochs: the topic has %d epochs and records of %d were delivered; want 4 and 4 (the changes came in the middle of traffic)", epochs, len(seenEpochs))
		}
	}

	// 4b. The group that read the current epoch alone (compacted): every key's latest value.
	if r.fresh != nil {
		r.fresh.mu.Lock()
		if r.fresh.nbad > 0 {
			r.failf("member %s: %d stdout lines that are not deliveries: %s", r.fresh.name, r.fresh.nbad, strings.Join(r.fresh.bad, "; "))
		}
		r.fresh.mu.Unlock()
		fresh := r.fresh.deliveries()
		for _, f := range checkCurrentEpoch(latestAcked(r.prod.sent, res), fresh, epochs) {
			r.failf("%s", f)
		}
		if part != nil {
			wrong, ex := 0, []string{}
			for _, d := range fresh {
				if k, keyed := d.key(); keyed {
					if want, err := part(d.Epoch, k); err != nil || want != d.Partition {
						wrong++
						if len(ex) < 3 {
							ex = append(ex, placementText(d.PSeq, k, d.Epoch, d.Partition, want, err))
						}
					}
				}
			}
			if wrong > 0 {
				r.failf("placement (current-epoch consumer): %d deliveries from another partition than their epoch's module gives: %s", wrong, strings.Join(ex, "; "))
			}
		}
	}

	// 5. Members.
	if r.late != nil && r.late.count() == 0 {
		r.failf("late member: delivered nothing (it should have taken over partitions); stderr: %s", r.late.stderrTail(3))
	}
	return row
}

func placementText(pseq uint64, key []byte, epoch, got, want int, err error) string {
	if err != nil {
		return fmt.Sprintf("pseq %d key %q epoch %d partition %d: %v", pseq, key, epoch, got, err)
	}
	return fmt.Sprintf("pseq %d key %q epoch %d in partition %d, the module says %d", pseq, key, epoch, got, want)
}

func head[T any](xs []T) []T {
	if len(xs) > 3 {
		return xs[:3]
	}
	return xs
}
