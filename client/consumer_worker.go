package client

// The Consumer (consumer.go): a partition's worker: its reader, deliveries and placement checks.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/proto"
	"pctl.dev/pctl/partitioner"
)

// partitionerFor returns epoch e's partitioner. A member cannot go on without it, and a fetch
// that fails for a while (no broker answers: one restarts; or it answers too late) must not stop
// the member for good: such failures (wire.ErrUnavailable) are retried until ctx ends; others (a
// module that does not load, a refusal) are returned.
func (cn *Consumer) partitionerFor(ctx context.Context, e *wire.Epoch) (partitioner.Partitioner, error) {
	var backoff time.Duration
	for {
		f, err := cn.c.partitionerFor(ctx, e.Partitioner)
		if err == nil || !errors.Is(err, wire.ErrUnavailable) || ctx.Err() != nil {
			return f, err
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
		cn.opts.Logf("member %s: epoch %d's partitioner %s: %v; again in %v", cn.opts.Member, e.Epoch, e.Partitioner.Name, err, backoff)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// worker reads one partition in order and delivers its records. Lock order: worker.mu, then
// Consumer.mu. Neither is ever held across a network call.
type worker struct {
	cn        *Consumer
	partition int

	mu        sync.Mutex
	delivered uint64 // last record handled (acknowledged by the handler)
	committed uint64
	rev       uint64 // KV revision of our PartitionState
	gen       uint64 // the group generation the partition was acquired under
	isLost    bool
	// leaseUntil is when our lease ends by our own clock (measured from before the write that
	// set it). The worker delivers nothing past leaseUntil minus a margin: by then another
	// member may take the partition over.
	leaseUntil time.Time
	waiting    bool      // the worker waits for its reader (see stalled)
	waitSince  time.Time // since when
	// waitingReader: the worker has a reader open (not opening one).
	waitingReader bool
	cancel        context.CancelFunc
	done          chan struct{}

	// commitSem lets one compare-and-set on the partition's state run at a time (each needs the
	// revision the previous one produced); it is not held by anything else.
	commitSem chan struct{}
	// unsure is the last write of the partition's state whose answer never came: if the next
	// compare-and-set fails, the key is read, and a key holding exactly this was our write.
	unsure *unsureWrite
	// The reader the worker waits for: readerN numbers them (0: none open), readerCons is its
	// consumer (for the watchdog's report); restarts counts the readers replaced in a row at
	// position restartAt. kick carries the number of the reader the watchdog replaces.
	readerN    uint64
	readerCons jetstream.Consumer
	restarts   int
	restartAt  uint64
	kick       chan uint64
}

func newWorker(cn *Consumer, q int, pos, rev uint64) *worker {
	return &worker{cn: cn, partition: q, delivered: pos, committed: pos, rev: rev, done: make(chan struct{}),
		commitSem: make(chan struct{}, 1), kick: make(chan uint64, 1)}
}

func (w *worker) lost() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isLost
}

// stop stops the worker and waits for it: the record in hand is finished (its handler returns);
// the reader is closed without waiting for it.
func (w *worker) stop() {
	w.mu.Lock()
	c := w.cancel
	w.mu.Unlock()
	if c != nil {
		c()
	}
	<-w.done
}

// commit writes the delivered position (and a renewed lease) by compare-and-set, when there is
// something new to commit or a third of the lease is used up (always with renew). A failed
// compare-and-set means another member took the partition: the worker stops at once.
func (w *worker) commit(ctx context.Context, kv jetstream.KeyValue, renew bool) {
	select {
	case w.commitSem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-w.commitSem }()
	session := w.cn.opts.SessionTimeout
	w.mu.Lock()
	if w.isLost || (!renew && w.delivered == w.committed && time.Until(w.leaseUntil) > session*2/3) {
		w.mu.Unlock()
		return
	}
	pos, rev, gen := w.delivered, w.rev, w.gen
	w.mu.Unlock()
	if w.cn.staleGen(gen) {
		return // commit nothing more under an old generation
	}

	now := time.Now()
	ps := wire.PartitionState{Owner: w.cn.opts.Member, LeaseEnd: now.Add(session).UnixMilli(), Position: pos, Generation: gen}
	body, _ := json.Marshal(ps)
	octx, cancel := w.cn.op(ctx)
	newRev, err := kv.Update(octx, wire.PartitionKey(w.cn.topicID, w.cn.opts.Group, w.partition), body, rev)
	cancel()
	if err == nil && w.cn.opts.testLoseAnswer != nil && w.cn.opts.testLoseAnswer() {
		err = context.DeadlineExceeded
	}

	if err != nil && (errors.Is(err, jetstream.ErrKeyExists) || isWrongSeq(err)) && w.unsure != nil {
		// The last write's answer was lost (a timeout, a leader change), so the key's revision
		// may be that write's, not a takeover's: if the key holds exactly what we wrote then,
		// it was ours (issue 10: a member stopped and re-acquired its own partitions after
		// every ambiguous renewal). Another member's write would name another owner or lease.
		gctx, gcancel := w.cn.op(ctx)
		e, gerr := kv.Get(gctx, wire.PartitionKey(w.cn.topicID, w.cn.opts.Group, w.partition))
		gcancel()
		if w.cn.opts.testFailReadBack != nil && w.cn.opts.testFailReadBack() {
			gerr = context.DeadlineExceeded
		}
		if gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) {
			// The key could not be read back (no answer, the member stopping): ours or a
			// takeover, we cannot tell yet (spec/protocol.md §6.3). Not lost: the unanswered
			// write stays, the next commit asks again, and the lease still bounds delivery.
			w.cn.opts.Logf("member %s: partition %d: commit refused, and the key could not be read back (%v); retrying", w.cn.opts.Member, w.partition, gerr)
			return
		}
		if gerr == nil && bytes.Equal(e.Value(), w.unsure.body) {
			w.mu.Lock()
			w.rev = e.Revision()
			if w.unsure.pos > w.committed {
				w.committed = w.unsure.pos
			}
			if w.unsure.until.After(w.leaseUntil) {
				w.leaseUntil = w.unsure.until
			}
			w.unsure = nil
			w.mu.Unlock()
			w.cn.opts.Logf("member %s: partition %d: the commit whose answer was lost was stored (revision %d); committing again", w.cn.opts.Member, w.partition, e.Revision())
			octx, cancel := w.cn.op(ctx)
			newRev, err = kv.Update(octx, wire.PartitionKey(w.cn.topicID, w.cn.opts.Group, w.partition), body, e.Revision())
			cancel()
		}
	}
	w.mu.Lock()
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSeq(err) {
			// Not answered: stored or not, we cannot tell yet (the next compare-and-set can).
			w.unsure = &unsureWrite{body: body, pos: pos, until: now.Add(session)}
		}
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongSeq(err) {
			w.cn.opts.Logf("member %s: partition %d: lost (taken over); delivered %d, committed %d", w.cn.opts.Member, w.partition, w.delivered, w.committed)
			w.isLost = true // taken over: stop at once, commit nothing more
			if w.cancel != nil {
				w.cancel()
			}
		}
		w.mu.Unlock()
		return
	}
	w.rev = newRev
	w.unsure = nil
	if pos > w.committed {
		w.committed = pos
	}
	w.leaseUntil = now.Add(session)
	w.mu.Unlock()
	w.cn.setPosition(w.partition, newRev, ps)
	w.cn.noteCommit(newRev)
}

// commitNow commits the worker's position at once (at a boundary, so that gates open quickly).
func (w *worker) commitNow(ctx context.Context) {
	kv, err := w.cn.kv(ctx)
	if err == nil {
		w.commit(ctx, kv, false)
	}
}

func (w *worker) run(parent context.Context, h Handler, fail func(error)) {
	defer close(w.done)
	ctx, cancel := context.WithCancel(parent)
	w.mu.Lock()
	w.cancel = cancel
	start := w.delivered
	w.mu.Unlock()
	defer cancel()
	cn := w.cn
	// Boundaries below the start position were passed by an earlier owner, which ran their
	// keys-revoked steps before moving past them (spec/protocol.md §6.5); one right at it may
	// still owe its step (the owner that reached it stopped before running it).
	w.skipPassed(start)
	w.passBoundaries(ctx, start)
	var rd *partitionReader
	defer func() {
		if rd != nil {
			rd.close()
		}
	}()
	tick := time.NewTicker(cn.opts.Heartbeat)
	defer tick.Stop()
	var backoff time.Duration
	opened := false
	for {
		if rd == nil {
			// Opening is not waiting for a reader: the watchdog leaves the worker alone (an open
			// that fails is logged and retried here).
			w.setReader(0, nil)
			from := w.position() + 1
			if opened && cn.opts.testOpenDelay > 0 {
				// Test hook: a server so loaded that making a consumer takes this long.
				select {
				case <-ctx.Done():
					return
				case <-time.After(cn.opts.testOpenDelay):
				}
			}
			r, err := openReader(ctx, cn.c.js, cn.topic, w.partition, from)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// The stream may have no leader for a while (a node died): retry, never give up
				// the partition for that.
				backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
				cn.opts.Logf("member %s: partition %d: cannot read from %d: %v; again in %v", cn.opts.Member, w.partition, from, err, backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				continue
			}
			rd, backoff, opened = r, 0, true
			w.setReader(w.nextReader(), r.cons)
		}
		select {
		case <-ctx.Done():
			return
		case err := <-rd.errc:
			if ctx.Err() != nil {
				return
			}
			cn.opts.Logf("member %s: partition %d: reader stopped: %v; reading again from %d", cn.opts.Member, w.partition, err, w.position()+1)
			rd.close()
			rd = nil
		case n := <-w.kick:
			if n != w.currentReader() {
				continue // meant for a reader already replaced
			}
			// The watchdog found the reader silent while the stream has records past our
			// position: whatever happened to its pull requests, read again from there.
			rd.close()
			rd = nil
			cn.mu.Lock()
			cn.stats.ReaderRestarts++
			cn.mu.Unlock()
		case <-tick.C:
			w.passBoundaries(ctx, w.position())
		case msg := <-rd.msgs:
			w.setWaiting(false, false)
			if !w.deliver(ctx, msg, h, fail) {
				return
			}
			w.setWaiting(true, true)
		}
	}
}

// nextReader returns the number of the worker's next reader.
func (w *worker) nextReader() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readerN + 1
}

// currentReader returns the number of the reader the worker waits for (0: none).
func (w *worker) currentReader() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.waitingReader {
		return 0
	}
	return w.readerN
}

// setReader records the reader the worker now waits for (n > 0, from now on), or that it has
// none (n == 0: it is opening one). A kick still queued for an older reader is dropped.
func (w *worker) setReader(n uint64, cons jetstream.Consumer) {
	w.mu.Lock()
	if n > 0 {
		w.readerN = n
	}
	w.waitingReader = n > 0
	w.readerCons = cons
	w.waiting = n > 0
	w.waitSince = time.Now()
	w.mu.Unlock()
	select {
	case <-w.kick:
	default:
	}
}

// setWaiting records whether the worker is waiting for its reader (and, with reset, that the wait
// starts now): the watchdog only looks at readers the worker waits for.
func (w *worker) setWaiting(waiting, reset bool) {
	w.mu.Lock()
	w.waiting = waiting
	if reset {
		w.waitSince = time.Now()
	}
	w.mu.Unlock()
}

// stalled reports whether the worker has waited for its reader for longer than that reader may
// stay silent (stallLimit), and what the watchdog saw then.
func (w *worker) stalled() (readerStallSeen, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.waiting || !w.waitingReader || w.isLost {
		return readerStallSeen{}, false
	}
	restarts := 0
	if w.restartAt == w.delivered {
		restarts = w.restarts
	}
	waited := time.Since(w.waitSince)
	if waited < stallLimit(restarts+1) {
		return readerStallSeen{}, false
	}
	return readerStallSeen{n: w.readerN, cons: w.readerCons, since: w.waitSince, waited: waited, pos: w.delivered}, true
}

// kickIf asks the worker to replace the reader the watchdog saw silent, if the worker still
// waits for that reader at that position since then (never blocks). It returns how many readers
// in a row have now been replaced at this position.
func (w *worker) kickIf(s readerStallSeen) (int, bool) {
	w.mu.Lock()
	if !w.waiting || !w.waitingReader || w.isLost || w.readerN != s.n || !w.waitSince.Equal(s.since) || w.delivered != s.pos {
		w.mu.Unlock()
		return 0, false
	}
	if w.restartAt != s.pos {
		w.restartAt, w.restarts = s.pos, 0
	}
	w.restarts++
	n := w.restarts
	w.mu.Unlock()
	select {
	case w.kick <- s.n:
	default:
	}
	return n, true
}

// deliver handles one message from the reader: a fence marker moves the position; a record is
// gated, delivered and acknowledged. It returns false when the worker must stop.
func (w *worker) deliver(ctx context.Context, msg jetstream.Msg, h Handler, fail func(error)) bool {
	cn := w.cn
	md, err := msg.Metadata()
	if err != nil {
		return true
	}
	if f := msg.Headers().Get(wire.HeaderFence); f != "" {
		// A fence marker, not a record: nothing to deliver, but the position moves past it.
		// The epoch before it ended at the marker's sequence - 1: the keys-revoked step of that
		// boundary runs before the position passes the marker (spec/protocol.md §6.5), so the
		// descriptor must say so first (a marker can be read before the epoch is active).
		cn.mu.Lock()
		t := cn.desc
		cn.mu.Unlock()
		if e, err := strconv.Atoi(f); err == nil && proto.MarkerNeedsDescriptor(t, e) {
			if err := w.ensureEnded(ctx, e-1); err != nil {
				return false
			}
		}
		if !w.current(ctx) {
			return false
		}
		w.passBoundaries(ctx, md.Sequence.Stream-1)
		w.mu.Lock()
		if md.Sequence.Stream > w.delivered {
			w.delivered = md.Sequence.Stream
		}
		w.mu.Unlock()
		w.passBoundaries(ctx, md.Sequence.Stream)
		// Past the marker: commit at once, children's keys-assigned steps wait for it.
		w.commitNow(ctx)
		return true
	}
	m := &Message{Topic: cn.topic, Partition: w.partition, Seq: md.Sequence.Stream, Value: msg.Data(), NoKey: true}
	hdr := msg.Headers()
	m.Producer = hdr.Get(wire.HeaderProducer)
	m.ProducerSeq, _ = strconv.ParseUint(hdr.Get(wire.HeaderSeq), 10, 64)
	m.Headers = AppHeaders(hdr)
	m.Stored = md.Timestamp.Truncate(time.Millisecond)
	m.Time = m.Stored
	if ms, ok := ParseTime(hdr.Get(HeaderTime)); ok {
		m.Time, m.ProducerTime = time.UnixMilli(ms), true
	}
	mp, err := w.placement(ctx, m, msg.Subject(), hdr)
	if err != nil {
		if ctx.Err() == nil {
			fail(err)
		}
		return false
	}
	if mp != nil {
		m.Misplaced = mp
		cn.mu.Lock()
		cn.stats.Misplaced++
		cn.mu.Unlock()
		cn.opts.Logf("member %s: partition %d: misplaced record at %d (epoch %d, key %q): %s", cn.opts.Member, w.partition, m.Seq, m.Epoch, m.Key, mp.Reason)
		if cn.opts.OnMisplaced != nil {
			cn.opts.OnMisplaced(m)
		}
		switch cn.opts.Misplaced {
		case MisplacedSkip:
			if !w.holdLease(ctx) {
				return false
			}
			w.mu.Lock()
			w.delivered = m.Seq
			w.mu.Unlock()
			w.passBoundaries(ctx, m.Seq)
			return true
		case MisplacedDeliver:
		default:
			if ctx.Err() == nil {
				fail(&MisplacedError{Topic: cn.topic, Partition: w.partition, Seq: m.Seq, Epoch: m.Epoch, Key: m.Key, Misplacement: *mp})
			}
			return false
		}
	}

	m.Tombstone = hdr.Get(wire.HeaderTombstone) != ""
	if o := hdr.Get(wire.HeaderBackfill); o != "" && m.Misplaced == nil {
		// A backfilled copy (spec/protocol.md §10.4): delivered only when the group cannot
		// have delivered its origin, else passed like a fence marker.
		if oe, oq, os, err := wire.ParseOrigin(o); err == nil && oe < m.Epoch {
			m.Backfill = &CopyOrigin{Epoch: oe, Partition: oq, Seq: os}
			cn.mu.Lock()
			deliver := (cn.startEpoch > 0 && oe < cn.startEpoch) || cn.desc.OriginRetired(oe)
			cn.mu.Unlock()
			if !deliver {
				if !w.holdLease(ctx) {
					return false
				}
				w.mu.Lock()
				w.delivered = m.Seq
				w.mu.Unlock()
				w.passBoundaries(ctx, m.Seq)
				return true
			}
		}
	}
	if (!cn.opts.Testing.Ungated() || cn.opts.OnKeysAssigned != nil) && !m.NoKey && m.Misplaced == nil {
		if err := w.gate(ctx, m); err != nil {
			if ctx.Err() == nil && !errors.Is(err, errStale) {
				fail(err)
			}
			return false
		}
	}
	if cn.opts.State != nil && !m.NoKey && m.Misplaced == nil {
		// The key's state, after its gate: every older record of it is committed (state.go).
		if err := cn.stateEnsure(ctx, w.partition, m.Key); err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return false
		}
	}
	if !w.holdLease(ctx) {
		return false // lost, or stopping: another member redelivers from the committed position
	}
	handled := time.Now()
	if err := h(ctx, m); err != nil {
		if ctx.Err() == nil {
			fail(fmt.Errorf("handler failed on partition %d seq %d: %w", w.partition, m.Seq, err))
		}
		return false
	}
	cn.hookConsumed(m, time.Since(handled)) // hooks.go
	w.mu.Lock()
	w.delivered = m.Seq
	w.mu.Unlock()
	cn.mu.Lock()
	cn.stats.Delivered++
	cn.mu.Unlock()
	w.passBoundaries(ctx, m.Seq)
	return true
}

// placement decodes the record's epoch and key into m and checks that the record is in its key's
// partition under that epoch's partitioner (spec/protocol.md §6.8). It returns nil for a record
// in its place (and for a keyless one), a Misplacement otherwise; an error only when the
// partitioner cannot be run (the member stops: it cannot tell).
func (w *worker) placement(ctx context.Context, m *Message, subject string, hdr nats.Header) (*Misplacement, error) {
	cn := w.cn
	_, e, q, token, err := wire.SplitRecordSubject(subject)
	if err == nil {
		m.Epoch = e
	}
	v := hdr.Get(wire.HeaderKey)
	if v == "" && len(hdr.Values(wire.HeaderKey)) == 0 {
		return nil, nil // keyless: any partition will do
	}
	k, kerr := wire.DecodeKey(v)
	if kerr != nil {
		return &Misplacement{Expected: -1, Reason: fmt.Sprintf("its %s header %.40q is not b64:<standard base64>", wire.HeaderKey, v)}, nil
	}
	m.Key, m.NoKey = k, false
	if err != nil {
		return &Misplacement{Expected: -1, Reason: fmt.Sprintf("its subject %q is not an epoch's record subject", subject)}, nil
	}
	if q != w.partition {
		return &Misplacement{Expected: -1, Reason: fmt.Sprintf("its subject %q names partition %d", subject, q)}, nil
	}
	cn.mu.Lock()
	keys := cn.desc.KeySubjects()
	cn.mu.Unlock()
	switch {
	case keys && token != wire.KeyToken(k):
		return &Misplacement{Expected: -1, Reason: fmt.Sprintf("its subject %.80q does not end with its key's token (a compacted or backfilled topic's record subject names its key, spec/protocol.md §10.1)", subject)}, nil
	case !keys && token != "":
		return &Misplacement{Expected: -1, Reason: fmt.Sprintf("its subject %.80q has a key token, but the topic has no key subjects (neither compacted nor backfilled)", subject)}, nil
	}
	for {
		cn.mu.Lock()
		ep, cur := cn.desc.Epoch(e), cn.desc.Current().Epoch
		cn.mu.Unlock()
		if ep != nil {
			break
		}
		if e <= cur {
			return &Misplacement{Expected: -1, Reason: fmt.Sprintf("the topic has no epoch %d", e)}, nil
		}
		// A record of an epoch newer than our descriptor (its streams are bound before the
		// descriptor says it is active): wait for the descriptor.
		cn.refresh(ctx)
		cn.mu.Lock()
		known := cn.desc.Epoch(e) != nil
		cn.mu.Unlock()
		if !known {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	cn.mu.Lock()
	ep := cn.desc.Epoch(e)
	cn.mu.Unlock()
	f, err := cn.partitionerFor(ctx, ep)
	if err != nil {
		return nil, err
	}
	want, err := f.Partition(k, int32(ep.Partitions))
	if err != nil {
		return nil, fmt.Errorf("%w: partition of key %x in epoch %d: %v", wire.ErrPluginFailed, k, ep.Epoch, err)
	}
	if int(want) != w.partition {
		return &Misplacement{Expected: int(want), Reason: fmt.Sprintf("epoch %d's partitioner (%d partitions) puts the key in partition %d", e, ep.Partitions, want)}, nil
	}
	return nil, nil
}

// current waits while a Seek of this member is writing its reset (it delivers nothing
// meanwhile), and reports whether the worker's generation is still the member's: false once a
// reset is pending or applied (the worker must stop: nothing more is delivered under it).
func (w *worker) current(ctx context.Context) bool {
	cn := w.cn
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for cn.seeking > 0 && cn.pending == nil && ctx.Err() == nil {
		waitCondTimeout(ctx, cn.cond, time.Second)
	}
	return ctx.Err() == nil && cn.pending == nil && cn.gen == w.gen
}

// holdLease makes sure the lease still has a safe margin before a delivery, renewing it if
// needed; it returns false if the partition was lost or the worker is stopping.
func (w *worker) holdLease(ctx context.Context) bool {
	if !w.current(ctx) {
		return false
	}
	session := w.cn.opts.SessionTimeout
	for {
		w.mu.Lock()
		lost, until := w.isLost, w.leaseUntil
		w.mu.Unlock()
		if lost || ctx.Err() != nil {
			return false
		}
		if proto.MayDeliver(until.UnixMilli(), time.Now().UnixMilli(), session) {
			return true
		}
		w.commitNow(ctx) // renews the lease (or finds it lost)
		w.mu.Lock()
		ok := proto.MayDeliver(w.leaseUntil.UnixMilli(), time.Now().UnixMilli(), session)
		w.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}
