package stateful

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"sync"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// rig is what RunScaleOut and RunWarmUp share: the clients they open on a broker (closed by
// close), the input topic "in" and the changelog topic "cl", the running-total members of group
// "totals", the input producer, and the checker that compares every key's total in the changelog
// with the sums read directly from the input's streams.
type rig struct {
	ctx            context.Context
	b              *broker.Broker
	admin          *client.Client
	pz             *pauses
	sessionTimeout time.Duration
	memberLogf     func(format string, args ...any)

	mu      sync.Mutex
	clients []*client.Client
	members []*member

	// The input: keys k0.., random amounts, every record acknowledged.
	prodIn      *client.Producer
	stopInput   context.CancelFunc
	inputDone   chan struct{}
	sent, nfail int
}

// member is one running-total processor of the group, with its own connections.
type member struct {
	name       string
	cons, prod *client.Client
	cn         *client.Consumer
	proc       *Processor
	stop       context.CancelFunc
	done       chan error
}

// newRig connects an admin to b and creates "in" and "cl" with 4 partitions (linear hashing).
func newRig(ctx context.Context, b *broker.Broker, sessionTimeout time.Duration, memberLogf func(string, ...any)) (*rig, error) {
	r := &rig{ctx: ctx, b: b, pz: &pauses{times: map[string][]time.Time{}}, sessionTimeout: sessionTimeout, memberLogf: memberLogf}
	var err error
	if r.admin, err = r.connect(broker.RoleAdmin); err != nil {
		return nil, err
	}
	for _, topic := range []string{"in", "cl"} {
		if _, err := r.admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 4, Partitioner: "linear-murmur2"}); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

func (r *rig) connect(role string) (*client.Client, error) {
	c, err := client.Connect(r.ctx, client.Options{URL: r.b.ClientURL(), Creds: r.b.CredsPath(role)})
	if err == nil {
		r.mu.Lock()
		r.clients = append(r.clients, c)
		r.mu.Unlock()
	}
	return c, err
}

// close stops the input and closes every connection the rig opened.
func (r *rig) close() {
	if r.stopInput != nil {
		r.stopInput()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.clients {
		c.Close()
	}
}

// start runs a member named name: a processor writing changelog "cl" as producer "cl-"+name, and
// a consumer of "in" in group "totals" with the sticky assignor and the processor's state
// handover. tweak, when set, adjusts the consumer's options (the warm-up, no handover).
func (r *rig) start(name string, tweak func(m *member, o *client.ConsumerOptions)) (*member, error) {
	m := &member{name: name, done: make(chan error, 1)}
	var err error
	if m.cons, err = r.connect(broker.RoleConsumer); err != nil {
		return nil, err
	}
	if m.prod, err = r.connect(broker.RoleProducer); err != nil {
		return nil, err
	}
	p, err := m.prod.NewProducer(r.ctx, "cl", client.ProducerOptions{ID: "cl-" + name})
	if err != nil {
		return nil, err
	}
	m.proc = New(m.cons, "cl", p)
	m.proc.OnApply = r.pz.apply
	opts := client.ConsumerOptions{Group: "totals", Member: name, Assignor: wire.AssignorSticky, FromBeginning: true,
		Heartbeat: 200 * time.Millisecond, SessionTimeout: r.sessionTimeout, State: m.proc, Logf: r.memberLogf}
	if tweak != nil {
		tweak(m, &opts)
	}
	if m.cn, err = m.cons.NewConsumer(r.ctx, "in", opts); err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(r.ctx)
	m.stop = stop
	go func() { m.done <- m.cn.Run(rctx, m.proc.Handle) }()
	r.mu.Lock()
	r.members = append(r.members, m)
	r.mu.Unlock()
	return m, nil
}

// startAll starts members with the default options, one after another.
func (r *rig) startAll(names ...string) error {
	for _, n := range names {
		if _, err := r.start(n, nil); err != nil {
			return err
		}
	}
	return nil
}

// stopMember stops m's consumer and returns the error it stopped with, named, or "".
func stopMember(m *member) string {
	m.stop()
	if err := <-m.done; err != nil {
		return fmt.Sprintf("%s: %v", m.name, err)
	}
	return ""
}

// running is a copy of the members started so far.
func (r *rig) running() []*member {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*member(nil), r.members...)
}

// startInput writes the input until finishInput: a record every interval, key k(i mod keys), an
// amount of 1 to 100 drawn from seed.
func (r *rig) startInput(keys int, interval time.Duration, seed int64) error {
	pc, err := r.connect(broker.RoleProducer)
	if err != nil {
		return err
	}
	if r.prodIn, err = pc.NewProducer(r.ctx, "in", client.ProducerOptions{ID: "input"}); err != nil {
		return err
	}
	pctx, stop := context.WithCancel(r.ctx)
	r.stopInput, r.inputDone = stop, make(chan struct{})
	go func() {
		defer close(r.inputDone)
		rnd := rand.New(rand.NewSource(seed))
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; pctx.Err() == nil; i++ {
			<-tick.C
			key := []byte(fmt.Sprint("k", i%keys))
			v := []byte(strconv.Itoa(1 + rnd.Intn(100)))
			if err := r.prodIn.Send(pctx, client.Record{Key: key, Value: v}, func(res client.Result) {
				if res.Err != nil {
					r.mu.Lock()
					r.nfail++
					r.mu.Unlock()
				}
			}); err != nil {
				return
			}
			r.mu.Lock()
			r.sent++
			r.mu.Unlock()
		}
	}()
	return nil
}

// finishInput stops the input, waits for every acknowledgement and returns the number of records
// written; an error if any was not acknowledged.
func (r *rig) finishInput() (int, error) {
	r.stopInput()
	<-r.inputDone
	if err := r.prodIn.Flush(r.ctx); err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nfail > 0 {
		return 0, fmt.Errorf("%d of %d input records were not acknowledged", r.nfail, r.sent)
	}
	return r.sent, nil
}

// check waits until group "totals" has committed every input record (drain at most), then compares
// every key's state in the changelog with the totals read from the input's streams. records is the
// number of acknowledged input records, which the streams must hold exactly; changelog keys for
// which ignore is true (records of the changelog's own history) are not compared. It returns the
// number of wrong keys and the first few described.
func (r *rig) check(records int, drain time.Duration, ignore func(key string) bool) (wrong int, examples []string, err error) {
	if err := drained(r.ctx, r.admin, "in", "totals", drain); err != nil {
		return 0, nil, err
	}
	want, err := inputTotals(r.ctx, r.admin, "in")
	if err != nil {
		return 0, nil, err
	}
	n := 0
	for _, st := range want {
		n += int(st.Count)
	}
	if n != records {
		return 0, nil, fmt.Errorf("the input streams hold %d records, the producer had %d acknowledged", n, records)
	}
	got, err := changelogTotals(r.ctx, r.admin, "cl")
	if err != nil {
		return 0, nil, err
	}
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok && (ignore == nil || !ignore(k)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, g := want[k], got[k]
		if g.Total != w.Total || g.Count != w.Count {
			wrong++
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("key %s: total %d from %d records, want %d from %d (the input's)", k, g.Total, g.Count, w.Total, w.Count))
			}
		}
	}
	return wrong, examples, nil
}

// stats sums every member's processor statistics.
func (r *rig) stats() Stats {
	var sum Stats
	for _, m := range r.running() {
		s := m.proc.Stats()
		sum.Applied += s.Applied
		sum.Duplicates += s.Duplicates
		sum.Loads += s.Loads
		sum.LoadedKeys += s.LoadedKeys
		sum.Flushes += s.Flushes
		sum.ChangelogRead += s.ChangelogRead
		sum.LoadTime += s.LoadTime
	}
	return sum
}
