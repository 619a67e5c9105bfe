package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/scenario"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
)

// pendingCount is one producer's records handed to it and resolved by it.
type pendingCount struct {
	producer string
	handed   int64
	resolved *atomic.Int64
}

func recordID(producer string, seq uint64) string {
	return producer + "-" + strconv.FormatUint(seq, 10)
}

func (r *run) logSent(s verify.Sent, err error) {
	r.mu.Lock()
	r.sent = append(r.sent, s)
	if s.Acked {
		r.ackedIDs = append(r.ackedIDs, recordID(s.Producer, s.PSeq))
	} else if err != nil && len(r.sendErrs) < 5 {
		r.sendErrs = append(r.sendErrs, fmt.Sprintf("%s #%d: %v", s.Producer, s.PSeq, err))
	}
	r.mu.Unlock()
	switch {
	case s.Acked:
		r.acked.Add(1)
	case errors.Is(err, wire.ErrMsgIDInProcess):
		// A stuck id (spec/protocol.md §5.1.5): the record's fate is unknown, as for a record
		// never acknowledged; the checker allows it stored once or not at all, never twice.
		r.inProcess.Add(1)
	default:
		r.failed.Add(1)
	}
}

// sendLoop sends paced records (one in fifty keyless) until the traffic's end. It returns the
// count of records handed to send and a counter of those resolved (acknowledged or failed).
func (r *run) sendLoop(id string, seed int64, send func(context.Context, client.Record, func(client.Result)) error) {
	rng := rand.New(rand.NewSource(seed))
	var handed int64
	resolved := &atomic.Int64{}
	defer func() {
		r.mu.Lock()
		r.pending = append(r.pending, pendingCount{id, handed, resolved})
		r.mu.Unlock()
	}()
	for i := 0; ; i++ {
		due := time.Duration(i) * time.Second / time.Duration(r.cfg.Rate)
		if due >= r.cfg.Traffic {
			return
		}
		if d := time.Until(r.t0.Add(due)); d > 0 {
			time.Sleep(d)
		}
		if time.Since(r.t0) >= r.cfg.Traffic || r.ctx.Err() != nil {
			return
		}
		rec := client.Record{Value: []byte(id + "-" + strconv.Itoa(i))}
		if rng.Intn(50) == 0 {
			rec.NoKey = true
		} else {
			rec.Key = []byte("key-" + strconv.Itoa(rng.Intn(r.cfg.Keys)))
		}
		handed++
		at := time.Since(r.t0)
		err := send(r.ctx, rec, func(res client.Result) {
			resolved.Add(1)
			r.mu.Lock()
			if r.handedAt == nil {
				r.handedAt = map[string]time.Duration{}
			}
			r.handedAt[recordID(id, res.ProducerSeq)] = at
			r.mu.Unlock()
			r.logSent(verify.Sent{Producer: id, PSeq: res.ProducerSeq, Key: rec.Key, NoKey: rec.NoKey, Acked: res.Err == nil}, res.Err)
		})
		if err != nil {
			r.problem("producer %s stopped after %d records: %v", id, i, err)
			return
		}
	}
}

// clientProducer partitions with the topic's module (client.Producer).
func (r *run) clientProducer(id string, seed int64) {
	c, err := r.connect(broker.RoleProducer, "chaos-"+id)
	if err != nil {
		r.problem("producer %s: %v", id, err)
		return
	}
	defer c.Close()
	p, err := c.NewProducer(r.ctx, Topic, client.ProducerOptions{ID: id, MaxInFlight: 64, Logf: r.cfg.Logf})
	if err != nil {
		r.problem("producer %s: %v", id, err)
		return
	}
	r.sendLoop(id, seed, p.Send)
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Bound)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		// For the post-mortem: where the producer's goroutines are while records wait.
		r.cfg.Logf("chaos: producer %s: flush: %v", id, err)
		r.dumpGoroutines("producer-" + id + "-stuck-goroutines.txt")
		ctx, cancel = context.WithTimeout(r.ctx, 5*time.Second)
		defer cancel()
	}
	if err := p.Close(ctx); err != nil {
		r.problem("producer %s: close: %v", id, err)
	}
}

// thinProducer lets the broker partition (client.ThinProducer, as 'pctl produce --broker-side').
func (r *run) thinProducer(id string, seed int64) {
	c, err := r.connect(broker.RoleProducer, "chaos-"+id)
	if err != nil {
		r.problem("thin producer %s: %v", id, err)
		return
	}
	defer c.Close()
	tp, err := c.NewThinProducer(Topic, client.ThinOptions{ID: id, MaxInFlight: 64})
	if err != nil {
		r.problem("thin producer %s: %v", id, err)
		return
	}
	r.sendLoop(id, seed, tp.Send)
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Bound)
	defer cancel()
	if err := tp.Close(ctx); err != nil {
		r.problem("thin producer %s: close: %v", id, err)
	}
}

// group is a consumer group under test.
type group struct {
	r       *run
	name    string
	live    bool // record first-delivery times (stalls)
	mu      sync.Mutex
	seen    map[string]bool
	members []*member
	stopped bool
	unique  atomic.Int64 // distinct records delivered
}

type member struct {
	id     string
	c      *client.Client
	cancel context.CancelFunc
	done   chan error
	early  atomic.Bool // it ended before stop, and that was reported then
}

func (g *group) add(id string) error {
	r := g.r
	c, err := r.connect(broker.RoleConsumer, "chaos-"+g.name+"-"+id)
	if err != nil {
		return err
	}
	cn, err := c.NewConsumer(r.ctx, Topic, client.ConsumerOptions{
		Group: g.name, Member: id, FromBeginning: true,
		Heartbeat: 250 * time.Millisecond, SessionTimeout: 3 * time.Second, CommitInterval: 100 * time.Millisecond,
		Logf: r.cfg.Logf,
	})
	if err != nil {
		c.Close()
		return err
	}
	ctx, cancel := context.WithCancel(r.ctx)
	m := &member{id: id, c: c, cancel: cancel, done: make(chan error, 1)}
	go func() {
		var err error
		defer func() {
			// Said when it happens: a member that ends early delivers nothing more, and the
			// run's verdict (built before the group is stopped) would only say what is missing.
			if err != nil && ctx.Err() == nil && !isCancel(err) {
				r.cfg.Logf("chaos: group %s member %s ended early: %v", g.name, id, err)
				r.problem("group %s member %s ended during the run: %v", g.name, id, err)
				m.early.Store(true)
			}
			m.done <- err
		}()
		err = cn.Run(ctx, func(ctx context.Context, msg *client.Message) error {
			rid := recordID(msg.Producer, msg.ProducerSeq)
			r.mu.Lock()
			d := verify.Delivered{Group: g.name, Member: id, Producer: msg.Producer, PSeq: msg.ProducerSeq, Key: msg.Key, NoKey: msg.NoKey, Order: r.order.Add(1)}
			r.deliv = append(r.deliv, d)
			if !msg.NoKey {
				r.places = append(r.places, scenario.Placement{Epoch: msg.Epoch, Partition: msg.Partition, Key: msg.Key})
			}
			r.mu.Unlock()
			g.mu.Lock()
			first := !g.seen[rid]
			if first {
				if g.seen == nil {
					g.seen = map[string]bool{}
				}
				g.seen[rid] = true
			}
			g.mu.Unlock()
			if first {
				g.unique.Add(1)
				if g.live {
					r.mu.Lock()
					if r.liveAt == nil {
						r.liveAt = map[string]time.Duration{}
					}
					r.liveAt[rid] = time.Since(r.t0)
					r.mu.Unlock()
				}
			}
			return nil
		})
	}()
	g.mu.Lock()
	g.members = append(g.members, m)
	g.mu.Unlock()
	return nil
}

// delivered counts the acknowledged records the group has delivered.
func (g *group) delivered() int64 {
	g.r.mu.Lock()
	ids := g.r.ackedIDs
	g.r.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	for _, id := range ids {
		if g.seen[id] {
			n++
		}
	}
	return n
}

// waitAll waits up to bound until the group delivered every acknowledged record (acked of
// them): it returns when, and whether it got there.
func (g *group) waitAll(acked int64, bound time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(bound)
	for {
		if g.delivered() >= acked {
			return time.Now(), true
		}
		if time.Now().After(deadline) || g.r.ctx.Err() != nil {
			return time.Now(), false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops every member (idempotent); a member that does not stop within 15s, or that had
// failed, is a problem of the run.
func (g *group) stop() {
	g.mu.Lock()
	ms := g.members
	g.members = nil
	g.mu.Unlock()
	for _, m := range ms {
		m.cancel()
	}
	for _, m := range ms {
		select {
		case err := <-m.done:
			if err != nil && g.r.ctx.Err() == nil && !isCancel(err) && !m.early.Load() {
				g.r.problem("group %s member %s failed: %v", g.name, m.id, err)
			}
		case <-time.After(15 * time.Second):
			g.r.problem("group %s member %s did not stop within 15s", g.name, m.id)
		}
		m.c.Close()
	}
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// change runs one epoch change as an operator with a retrying script would: request it, and on
// an error look at the descriptor before asking again (the change may have been made, or be in
// progress, when the answer was lost), until the new epoch exists with no change in progress.
func (r *run) change(admin *client.Client, ch Change) ChangeRecord {
	rec := ChangeRecord{Change: ch, Began: time.Since(r.t0)}
	start := time.Now()
	deadline := r.t0.Add(r.cfg.Traffic + r.cfg.Bound) // all changes, not each
	read := func() (*wire.Topic, error) {
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		defer cancel()
		t, _, err := admin.Topic(ctx, Topic)
		return t, err
	}
	var before int
	for {
		t, err := read()
		if err == nil && t.Change == nil {
			before = len(t.Epochs)
			break
		}
		if err != nil {
			rec.Errors = append(rec.Errors, "read: "+err.Error())
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			rec.Took = time.Since(start)
			return rec
		}
		time.Sleep(200 * time.Millisecond)
	}
	requested := false
	for time.Now().Before(deadline) && r.ctx.Err() == nil {
		if requested {
			t, err := read()
			switch {
			case err != nil:
				// Unknown: the change may be in progress. Read again; never ask twice blindly.
				rec.Errors = append(rec.Errors, "read: "+err.Error())
				time.Sleep(200 * time.Millisecond)
				continue
			case len(t.Epochs) > before && t.Change == nil:
				rec.Done = true
				rec.Took = time.Since(start)
				r.cfg.Logf("chaos: change %s done in %v (%d attempts)", ch, rec.Took.Round(time.Millisecond), rec.Attempts)
				return rec
			case t.Change != nil || len(t.Epochs) > before:
				time.Sleep(100 * time.Millisecond)
				continue // in progress: wait, do not ask again
			}
		}
		rec.Attempts++
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		_, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: Topic, Partitions: ch.Partitions, Partitioner: ch.Partitioner})
		cancel()
		requested = true
		if err != nil {
			if len(rec.Errors) < 8 {
				rec.Errors = append(rec.Errors, err.Error())
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	// The deadline may have passed during a request: what counts is whether the change is done.
	if t, err := read(); err == nil && requested && len(t.Epochs) > before && t.Change == nil {
		rec.Done = true
	}
	rec.Took = time.Since(start)
	return rec
}

// auditBoundaries reads every partition stream and counts records stored on the wrong side of
// a boundary: a record of epoch x stored after epoch x's boundary of its partition, or at or
// before epoch x-1's.
func auditBoundaries(ctx context.Context, c *client.Client, t *wire.Topic) (int, error) {
	bad := 0
	n := 0 // the committed epochs' streams (a change stuck in "planned" has not made its own)
	for _, e := range t.Epochs {
		n = max(n, e.Partitions)
	}
	for q := 0; q < n; q++ {
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
				return 0, fmt.Errorf("%s: %w", wire.StreamName(t.Name, q), err)
			}
			md, _ := m.Metadata()
			seq := md.Sequence.Stream
			if m.Headers().Get(wire.HeaderFence) == "" {
				if _, x, _, err := wire.ParseDataSubject(m.Subject()); err == nil {
					if e := t.Epoch(x); e != nil && q < len(e.Boundaries) && seq > e.Boundaries[q] {
						bad++
					}
					if p := t.Epoch(x - 1); p != nil && q < len(p.Boundaries) && seq <= p.Boundaries[q] {
						bad++
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
