package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/produce"
	"pctl.dev/pctl/partitioner"
)

// Backfill (spec/protocol.md §10.3): after an epoch change of a topic that backfills, the broker
// copies every keyed record of the ended epoch (a compacted topic's live records: the last one of
// each key; a plain topic's whole history) into the new epoch's partition of its key, while
// producers keep writing there. A copy is published with JetStream's expected last sequence of
// its key's subject, so the server stores it only if no newer record of the key is there: a copy
// never overtakes or overwrites one. Progress (Backfill.Done per old partition) is recorded in
// the descriptor every backfillFlushEvery; a broker that dies resumes from it, and publishing a copy
// again is refused like any copy whose subject is taken.
//
// A compacted topic's tombstones are held while its backfill runs (spec/protocol.md §10.2): the
// activation that starts the backfill also gives producers a tombstone TTL of TombstoneHoldMS in
// the descriptor, and the write that ends it gives the topic's delete retention back. A key
// deleted in the new epoch keeps its tombstone there until the backfill has decided its copy, so
// the copy is refused however long the backfill takes or however long the brokers are down: the
// key's old value is never copied back.

const (
	// backfillWindow bounds the copies in flight per old partition.
	backfillWindow = 256
	// backfillFlush is how often progress is written to the descriptor, at most (see
	// backfillFlushEvery).
	backfillFlush = 2 * time.Second
	// backfillParallel bounds the old partitions copied at once.
	backfillParallel = 4
)

// backfillFlushEvery is how often a running backfill records its progress: every backfillFlush,
// or every retry interval if that is shorter. The retry loops of the other brokers take up a
// backfill whose descriptor did not change for two retry intervals; a broker that records less
// often than that has every other broker run its backfill beside it (twice the reads and
// copies), as with a retry interval of 150 ms against a 2 s flush.
func (b *Broker) backfillFlushEvery() time.Duration {
	return min(backfillFlush, b.cfg.RetryInterval)
}

// backfillText words a running backfill's progress for messages.
func backfillText(t *wire.Topic, ep *wire.Epoch) string {
	bf := ep.Backfill
	prev := t.Epoch(ep.Epoch - 1)
	done := 0
	for q, d := range bf.Done {
		if prev != nil && q < len(prev.Boundaries) && d >= prev.Boundaries[q] {
			done++
		}
	}
	return fmt.Sprintf("%d of %d partitions done, %d copies, %d refused as older than the key's record, running for %v",
		done, len(bf.Done), bf.Copied, bf.Newer, time.Since(bf.Started).Round(time.Second))
}

// backfillPartitionsDone counts the old partitions whose copying is complete.
func backfillPartitionsDone(t *wire.Topic, ep *wire.Epoch) int {
	prev := t.Epoch(ep.Epoch - 1)
	n := 0
	for q, d := range ep.Backfill.Done {
		if prev != nil && q < len(prev.Boundaries) && (d >= prev.Boundaries[q] || t.EpochStart(prev.Epoch, q) > prev.Boundaries[q]) {
			n++
		}
	}
	return n
}

// startBackfill records, in the activation's write of epoch next (spec/protocol.md §10.3), the
// backfill of the topic's ended epoch of `from` partitions into next, and on a compacted topic
// holds tombstones (§10.2): producers that see epoch next give tombstones TombstoneHoldMS as TTL
// until the backfill ends.
func startBackfill(t *wire.Topic, next *wire.Epoch, from int) {
	next.Backfill = &wire.Backfill{State: wire.BackfillRunning, Started: next.Started, Done: make([]uint64, from)}
	holdTombstones(t)
}

// holdTombstones gives a compacted topic's producers TombstoneHoldMS as tombstone TTL (spec §10.2),
// from the write that plans an epoch change on: a producer that learns of the change before its
// fence already sends its tombstones held, so that fewer of the tombstones it re-sends into the new
// epoch after the fence carry the retention they were created with.
func holdTombstones(t *wire.Topic) {
	if c := t.Compact; c != nil && !c.Held() {
		c.HeldRetentionMS, c.DeleteRetentionMS = c.DeleteRetentionMS, wire.TombstoneHoldMS
	}
}

// releaseTombstones gives a compacted topic's producers its delete retention back as tombstone
// TTL, in the write that ends its backfill.
func releaseTombstones(t *wire.Topic) {
	if c := t.Compact; c != nil && c.Held() {
		c.DeleteRetentionMS, c.HeldRetentionMS = c.HeldRetentionMS, 0
	}
}

// drivingBackfill reports whether this process runs a backfill of the topic right now.
func (b *Broker) drivingBackfill(name string) bool {
	busy := false
	b.backfilling.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), name+"/") {
			busy = true
			return false
		}
		return true
	})
	return busy
}

// backfillInBackground runs the backfill into epoch `epoch` of a topic (at most one per topic and
// epoch in this process). The retry loop takes it up again if it fails or this broker dies.
func (b *Broker) backfillInBackground(name string, epoch int) {
	key := fmt.Sprintf("%s/%d", name, epoch)
	if _, busy := b.backfilling.LoadOrStore(key, true); busy {
		return
	}
	b.loopWG.Add(1)
	go func() {
		defer b.loopWG.Done()
		defer b.backfilling.Delete(key)
		if err := b.runBackfill(b.loopCtx, name, epoch); err != nil && b.loopCtx.Err() == nil {
			b.cfg.Logger.Warn("backfill stopped; the retry loop resumes it from its recorded progress", "topic", name, "epoch", epoch, "err", err)
		}
	}()
}

// bfProgress is a running backfill's progress not yet written to the descriptor.
//
// Its counts are tied to positions: each decided record is a tally of its old partition and
// sequence, and a flush adds to the descriptor only the tallies between the recorded done[q] and
// the done[q] it records. Another broker may run the same backfill at once (the retry loop takes
// up a backfill whose descriptor did not change for two intervals, and a slow flush can look like
// that); both decide the same records, and the one that records a position first counts them. A
// record decided but not yet handled (its tally made, its position not raised) waits for the next
// flush, so a broker that resumes from done[q] never counts it a second time.
type bfProgress struct {
	mu                      sync.Mutex
	done                    []uint64
	pending                 [][]bfTally // per old partition, in sequence order: not yet recorded
	totalCopied, totalNewer int64       // including what the descriptor had
	// confirmed: the descriptor, read after this time, showed the backfill running.
	confirmed time.Time
}

func (p *bfProgress) confirm(at time.Time) {
	p.mu.Lock()
	if at.After(p.confirmed) {
		p.confirmed = at
	}
	p.mu.Unlock()
}

func (p *bfProgress) confirmedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.confirmed
}

func (p *bfProgress) handled(q int, seq uint64) {
	p.mu.Lock()
	if seq > p.done[q] {
		p.done[q] = seq
	}
	p.mu.Unlock()
}

func (p *bfProgress) doneOf(q int) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done[q]
}

// bfOutcome is how a record of the old epoch was decided.
type bfOutcome uint8

const (
	bfCopied  bfOutcome = iota // its copy is stored (by this attempt or an earlier one)
	bfNewer                    // refused: the key has a newer record in the new epoch
	bfExpired                  // a tombstone whose retention ended: not copied
)

// bfTally is one decided record, counted once its position is recorded.
type bfTally struct {
	seq     uint64
	outcome bfOutcome
}

// count tallies the decision on old partition q's record at seq.
func (p *bfProgress) count(q int, seq uint64, o bfOutcome) {
	p.mu.Lock()
	p.pending[q] = append(p.pending[q], bfTally{seq, o})
	p.mu.Unlock()
}

// bfCounts is what a flush adds to the descriptor's counters.
type bfCounts struct{ copied, newer, expired int64 }

// between sums the tallies of partition q whose sequence is in (from, to].
func between(ts []bfTally, from, to uint64) bfCounts {
	var n bfCounts
	for _, t := range ts {
		if t.seq <= from || t.seq > to {
			continue
		}
		switch t.outcome {
		case bfCopied:
			n.copied++
		case bfNewer:
			n.newer++
		case bfExpired:
			n.expired++
		}
	}
	return n
}

// recorded drops the tallies that a flush recorded (or found recorded by another broker): those
// of partition q at or below upTo[q].
func (p *bfProgress) recorded(upTo []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, ts := range p.pending {
		if q >= len(upTo) {
			break
		}
		keep := ts[:0]
		for _, t := range ts {
			if t.seq > upTo[q] {
				keep = append(keep, t)
			}
		}
		p.pending[q] = keep
	}
}

// errBackfillGone: the topic was deleted (or re-created) or the backfill finished elsewhere.
var errBackfillGone = errors.New("backfill no longer needed")

// errBackfillDied: the step hook stopped the backfill as if the broker had died.
var errBackfillDied = errors.New("backfill stopped by the step hook")

// runBackfill copies the ended epoch's records into epoch `epoch`, from the recorded progress on.
func (b *Broker) runBackfill(ctx context.Context, name string, epoch int) error {
	read := time.Now()
	t, _, err := b.getTopic(ctx, name)
	if err != nil {
		return err
	}
	ep, prev := t.Epoch(epoch), t.Epoch(epoch-1)
	if ep == nil || prev == nil || ep.Backfill == nil || ep.Backfill.State != wire.BackfillRunning {
		return nil
	}
	id := t.ID
	fOld, err := b.partitionerFor(ctx, prev.Partitioner)
	if err != nil {
		return err
	}
	fNew, err := b.partitionerFor(ctx, ep.Partitioner)
	if err != nil {
		return err
	}
	if err := b.backfillStep(name, "backfill-start"); err != nil {
		return err
	}
	prog := &bfProgress{done: make([]uint64, prev.Partitions), pending: make([][]bfTally, prev.Partitions),
		totalCopied: ep.Backfill.Copied, totalNewer: ep.Backfill.Newer, confirmed: read}
	copy(prog.done, ep.Backfill.Done)
	started := time.Now()
	b.cfg.Logger.Info("backfill running", "topic", name, "epoch", epoch, "from_epoch", prev.Epoch, "partitions", prev.Partitions,
		"compacted", t.Compact != nil, "resumed", ep.Backfill.Copied+ep.Backfill.Newer > 0)

	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The checkpointer records the progress, every backfillFlush and whenever an old partition
	// is done (asked on ckReq); the step hook runs after each (a test's "broker dies here"). One
	// goroutine does them all, so no lock is held across their network calls.
	ckReq := make(chan chan error)
	flushed := make(chan error, 1)
	go func() {
		tick := time.NewTicker(b.backfillFlushEvery())
		defer tick.Stop()
		checkpoint := func() error {
			if err := b.flushBackfill(bctx, name, id, epoch, prog, false); err != nil {
				return err
			}
			return b.backfillStep(name, "backfilling")
		}
		var failed error
		for {
			var reply chan error
			select {
			case <-bctx.Done():
				flushed <- failed
				return
			case <-tick.C:
			case reply = <-ckReq:
			}
			err := failed
			if err == nil {
				err = checkpoint()
			}
			if err != nil && failed == nil {
				failed = err
				cancel(err)
			}
			if reply != nil {
				reply <- err
			}
		}
	}()
	checkpoint := func() error {
		reply := make(chan error, 1)
		select {
		case ckReq <- reply:
			return <-reply
		case <-bctx.Done():
			return context.Cause(bctx)
		}
	}
	job := &bfJob{b: b, t: t, prev: prev, next: ep, fOld: fOld, fNew: fNew, prog: prog}
	sem := make(chan struct{}, backfillParallel)
	var wg sync.WaitGroup
	var firstMu sync.Mutex
	var first error
	for q := 0; q < prev.Partitions; q++ {
		sem <- struct{}{}
		if bctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func(q int) {
			defer func() { <-sem; wg.Done() }()
			err := job.partition(bctx, q)
			if err == nil {
				err = checkpoint()
			}
			if err != nil {
				firstMu.Lock()
				if first == nil {
					first = err
				}
				firstMu.Unlock()
				cancel(err)
			}
		}(q)
	}
	wg.Wait()
	stopErr := context.Cause(bctx)
	cancel(nil)
	if ferr := <-flushed; ferr != nil && first == nil {
		first = ferr
	}
	if first == nil && stopErr != nil && !errors.Is(stopErr, context.Canceled) {
		first = stopErr
	}
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	if first == nil {
		first = b.backfillStep(name, "backfill-final")
	}
	if errors.Is(first, errBackfillDied) {
		return first // as if the broker had died: nothing more is recorded
	}
	// Record what was done, finished or not (a crash loses at most one flush interval of it).
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	if err := b.flushBackfill(fctx, name, id, epoch, prog, first == nil); err != nil {
		if errors.Is(err, errBackfillGone) {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	if first != nil {
		if errors.Is(first, errBackfillGone) {
			return nil
		}
		return first
	}
	prog.mu.Lock()
	copied, newer := prog.totalCopied, prog.totalNewer
	prog.mu.Unlock()
	b.cfg.Logger.Info("backfill done", "topic", name, "epoch", epoch, "copied", copied, "newer", newer, "took", time.Since(started).Round(time.Millisecond))
	if b.cfg.Testing.StepHook() != nil {
		_ = b.cfg.Testing.StepHook()(name, "backfilled")
	}
	return nil
}

// backfillStep runs the step hook at a backfill's step (Config.Testing: testhook.Broker.Step); its error stops the
// backfill as if the broker had died there.
func (b *Broker) backfillStep(topic, step string) error {
	if b.cfg.Testing.StepHook() == nil {
		return nil
	}
	if err := b.cfg.Testing.StepHook()(topic, step); err != nil {
		return fmt.Errorf("%w at %s: %v", errBackfillDied, step, err)
	}
	return nil
}

// flushBackfill writes the progress into the descriptor (compare-and-set, merged with what is
// there: positions only grow), and with final, marks the backfill done when every old partition
// is complete. It announces the topic only when the backfill ends.
func (b *Broker) flushBackfill(ctx context.Context, name, id string, epoch int, prog *bfProgress, final bool) error {
	prog.mu.Lock()
	done := append([]uint64(nil), prog.done...)
	pending := make([][]bfTally, len(prog.pending))
	for q, ts := range prog.pending {
		pending[q] = append([]bfTally(nil), ts...)
	}
	prog.mu.Unlock()
	for attempt := 0; ; attempt++ {
		read := time.Now()
		t, rev, err := b.getTopic(ctx, name)
		if errors.Is(err, wire.ErrNotFound) {
			return errBackfillGone
		}
		if err != nil {
			return err
		}
		ep := t.Epoch(epoch)
		if t.ID != id || t.Deleting || ep == nil || ep.Backfill == nil || ep.Backfill.State != wire.BackfillRunning {
			return errBackfillGone
		}
		bf := ep.Backfill
		upTo := make([]uint64, len(done))
		for q := range done {
			if q >= len(bf.Done) {
				continue
			}
			upTo[q] = max(bf.Done[q], done[q])
			if done[q] > bf.Done[q] {
				n := between(pending[q], bf.Done[q], done[q])
				bf.Copied += n.copied
				bf.Newer += n.newer
				bf.Expired += n.expired
				bf.Done[q] = done[q]
			}
		}
		ended := false
		if final {
			prev := t.Epoch(epoch - 1)
			ended = backfillPartitionsDone(t, ep) == prev.Partitions
			if ended {
				now := time.Now().UTC()
				bf.State, bf.Ended = wire.BackfillDone, &now
				releaseTombstones(t)
			}
		}
		put := b.putTopicQuiet
		if ended {
			put = b.putTopic // producers and consumers learn that the current epoch is complete
		}
		if _, err := put(ctx, t, rev); err != nil {
			if errors.Is(err, wire.ErrConflict) && attempt < 20 {
				continue
			}
			return err
		}
		if !ended {
			prog.confirm(read)
		}
		prog.recorded(upTo)
		prog.mu.Lock()
		prog.totalCopied, prog.totalNewer = bf.Copied, bf.Newer
		prog.mu.Unlock()
		state := bf.State
		partsDone := backfillPartitionsDone(t, ep)
		ev, _ := json.Marshal(wire.BackfillEvent{Topic: name, Epoch: epoch, DonePartitions: partsDone, Partitions: len(bf.Done),
			Copied: bf.Copied, Newer: bf.Newer, Expired: bf.Expired, State: state})
		_ = b.nc.Publish(wire.BackfillSubject(name), ev)
		b.hookBackfill(name, epoch, bf, partsDone)
		return nil
	}
}

// bfJob is one backfill's shared state.
type bfJob struct {
	b          *Broker
	t          *wire.Topic
	prev, next *wire.Epoch
	fOld, fNew partitioner.Partitioner
	prog       *bfProgress
}

// bfCopy is one record of the old partition in the copying window.
type bfCopy struct {
	q      int // its old partition
	seq    uint64
	key    []byte
	skip   bool // nothing to publish (a marker, a keyless or misplaced record, an expired tombstone)
	msg    *nats.Msg
	id     string // the copy's first deduplication id
	stream string
	expect uint64
	// inProcess counts the 10158 answers for the copy's id (produce.InProcess, the rule the
	// producer engine shares).
	inProcess produce.InProcess
	fut       jetstream.PubAckFuture
	// the answer, once taken from fut
	answered bool
	ack      *jetstream.PubAck
	err      error
}

// partition copies old partition q's records from its recorded progress to its boundary.
func (j *bfJob) partition(ctx context.Context, q int) error {
	b := j.b
	last := j.prev.Boundaries[q]
	j.prog.mu.Lock()
	from := j.prog.done[q] + 1
	j.prog.mu.Unlock()
	if s := j.t.EpochStart(j.prev.Epoch, q); s > from {
		from = s
	}
	if from > last {
		j.prog.handled(q, last)
		return nil
	}
	cons, err := b.js.OrderedConsumer(ctx, wire.StreamName(j.t.Name, q), jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		// nats.go re-creates a reset consumer for ever by default: a few attempts, then Next
		// fails and the retry loop resumes from the recorded progress.
		MaxResetAttempts: 3})
	if err != nil {
		return fmt.Errorf("%w: read partition %d: %v", wire.ErrUnavailable, q, err)
	}
	// Heartbeats every second: nats.go notices missing ones only within one Next call (after two
	// intervals), so with its default for ordered consumers (5 s, noticed after 10 s) no 5-second
	// Next ever noticed them, and a read whose consumer went silent (its stream's leader stepped
	// down) waited forever (CI, 2026-12-01: a resumed backfill stuck in Next, partition 2 at 0).
	it, err := cons.Messages(jetstream.PullMaxMessages(backfillWindow), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fmt.Errorf("%w: read partition %d: %v", wire.ErrUnavailable, q, err)
	}
	defer it.Stop()
	silent := 0 // Next calls in a row that timed out
	compact := j.t.Compact != nil
	var window []*bfCopy
	busy := map[string]*bfCopy{}    // key -> its copy in flight (plain topics chain a key's copies)
	lastCopy := map[string]uint64{} // key -> sequence of its last copy in the new partition (plain)
	overtaken := map[string]bool{}  // key -> a newer record came first (plain: the rest is not copied)
	// settle finishes the window's first copy.
	settle := func() error {
		c := window[0]
		window = window[1:]
		if !c.skip {
			delete(busy, string(c.key))
			if err := j.finish(ctx, c, compact, lastCopy, overtaken); err != nil {
				return err
			}
			if err := b.backfillStep(j.t.Name, "backfill-copy"); err != nil {
				return err
			}
		}
		j.prog.handled(q, c.seq)
		return nil
	}
	for {
		msg, err := it.Next(jetstream.NextMaxWait(5 * time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				// The ordered consumer recovers by itself (the marker at last+1 ends the read);
				// one silent for 30 s is given up, and the retry loop resumes from the progress.
				if silent++; silent >= 6 {
					return fmt.Errorf("%w: read partition %d: nothing delivered for %v from sequence %d (boundary %d)", wire.ErrUnavailable, q, 6*5*time.Second, j.prog.doneOf(q)+1, last)
				}
				continue
			}
			return fmt.Errorf("%w: read partition %d: %v", wire.ErrUnavailable, q, err)
		}
		silent = 0
		md, err := msg.Metadata()
		if err != nil {
			continue
		}
		seq := md.Sequence.Stream
		if seq > last {
			break
		}
		c := j.prepare(msg, md, q, compact)
		if !c.skip {
			if overtaken[string(c.key)] {
				c.skip = true
			} else {
				// A plain topic's copies of one key are chained: the next waits for the previous.
				for busy[string(c.key)] != nil {
					if err := settle(); err != nil {
						return err
					}
				}
				c.expect = lastCopy[string(c.key)]
				if err := j.publish(ctx, c); err != nil {
					return err
				}
				busy[string(c.key)] = c
			}
		}
		window = append(window, c)
		for len(window) >= backfillWindow || (len(window) > 0 && (window[0].skip || window[0].done())) {
			if err := settle(); err != nil {
				return err
			}
		}
		if seq == last {
			break
		}
	}
	for len(window) > 0 {
		if err := settle(); err != nil {
			return err
		}
	}
	j.prog.handled(q, last)
	return nil
}

// done reports whether a copy's publish has been answered (without waiting).
func (c *bfCopy) done() bool {
	if c.fut == nil || c.answered {
		return true
	}
	select {
	case c.ack = <-c.fut.Ok():
		c.answered = true
	case c.err = <-c.fut.Err():
		c.answered = true
	default:
	}
	return c.answered
}

// wait waits for a copy's answer.
func (c *bfCopy) wait(ctx context.Context) error {
	if c.answered {
		return nil
	}
	select {
	case c.ack = <-c.fut.Ok():
	case c.err = <-c.fut.Err():
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	c.answered = true
	return nil
}

// prepare builds the copy of an old record (or marks it skipped).
func (j *bfJob) prepare(msg jetstream.Msg, md *jetstream.MsgMetadata, q int, compact bool) *bfCopy {
	seq := md.Sequence.Stream
	c := &bfCopy{q: q, seq: seq, skip: true}
	hdr := msg.Headers()
	v := hdr.Get(wire.HeaderKey)
	if hdr.Get(wire.HeaderFence) != "" || v == "" {
		return c // a fence marker or a keyless record: nothing to carry
	}
	_, e, sq, _, err := wire.SplitRecordSubject(msg.Subject())
	key, kerr := wire.DecodeKey(v)
	if err != nil || kerr != nil || e != j.prev.Epoch || sq != q {
		return c // not a record of the ended epoch in its place
	}
	if want, err := j.fOld.Partition(key, int32(j.prev.Partitions)); err != nil || int(want) != q {
		return c // misplaced (spec/protocol.md §6.8): its key's records are elsewhere
	}
	p, err := j.fNew.Partition(key, int32(j.next.Partitions))
	if err != nil {
		return c
	}
	m := nats.NewMsg(wire.RecordSubject(j.t.Name, j.next.Epoch, int(p), j.t.KeySubjects(), key))
	for name, vs := range hdr {
		if strings.HasPrefix(strings.ToLower(name), "nats-") || name == wire.HeaderBackfill {
			continue
		}
		m.Header[name] = append([]string(nil), vs...)
	}
	if hdr.Get(wire.HeaderTombstone) != "" && compact {
		left := time.Duration(j.t.Compact.Retention())*time.Millisecond - time.Since(md.Timestamp)
		if left <= 0 {
			j.prog.count(q, seq, bfExpired)
			return c // the tombstone has done its work: the key is gone
		}
		m.Header.Set(wire.HeaderTTL, strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10))
	}
	m.Header.Set(wire.HeaderBackfill, wire.FormatOrigin(j.prev.Epoch, q, seq))
	c.id = fmt.Sprintf("pctl-bf-%s-%d-%d-%d", j.t.ID, j.next.Epoch, q, seq)
	m.Header.Set(wire.HeaderMsgID, c.id)
	m.Data = msg.Data()
	c.skip, c.key, c.msg, c.stream = false, key, m, wire.StreamName(j.t.Name, int(p))
	return c
}

// confirmRunning makes sure that this backfill was still running less than half the delete
// retention ago, reading the descriptor again if not (spec/protocol.md §10.2). Tombstones are
// held only until the backfill ends: a broker that went on copying long after another one ended
// the backfill could otherwise store a copy after a tombstone written since (with the topic's
// retention as TTL again) has expired. The descriptor is read every backfillFlushEvery anyway; this
// matters only for a short delete retention or a broker that stalled.
func (j *bfJob) confirmRunning(ctx context.Context) error {
	d := time.Duration(j.t.Compact.Retention()) * time.Millisecond
	if time.Since(j.prog.confirmedAt()) < d/2 {
		return nil
	}
	read := time.Now()
	t, _, err := j.b.getTopic(ctx, j.t.Name)
	if errors.Is(err, wire.ErrNotFound) {
		return errBackfillGone
	}
	if err != nil {
		return err
	}
	ep := t.Epoch(j.next.Epoch)
	if t.ID != j.t.ID || t.Deleting || ep == nil || ep.Backfill == nil || ep.Backfill.State != wire.BackfillRunning {
		return errBackfillGone
	}
	j.prog.confirm(read)
	return nil
}

// publish sends a copy asynchronously, with the expected last sequence of its subject.
func (j *bfJob) publish(ctx context.Context, c *bfCopy) error {
	c.msg.Header.Set(wire.HeaderExpectedLastSubjectSeq, strconv.FormatUint(c.expect, 10))
	if j.t.Compact != nil {
		if err := j.confirmRunning(ctx); err != nil {
			return err
		}
	}
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		fut, err := j.b.js.PublishMsgAsync(c.msg, jetstream.WithExpectStream(c.stream))
		if err == nil {
			c.fut, c.answered, c.ack, c.err = fut, false, nil, nil
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		select { // too many publishes pending: wait a moment
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(pause):
		}
	}
}

// finish waits for a copy's answer and decides it: stored, refused because the key's subject
// holds a newer record (or this copy, from an earlier attempt), or published again.
func (j *bfJob) finish(ctx context.Context, c *bfCopy, compact bool, lastCopy map[string]uint64, overtaken map[string]bool) error {
	for attempt := 0; ; attempt++ {
		if err := c.wait(ctx); err != nil {
			return err
		}
		if c.err == nil {
			lastCopy[string(c.key)] = c.ack.Sequence
			j.prog.count(c.q, c.seq, bfCopied)
			return nil
		}
		err := c.err
		var apiErr *jetstream.APIError
		code := 0
		if errors.As(err, &apiErr) {
			code = int(apiErr.ErrorCode)
		}
		wrongLast := code == int(jetstream.JSErrCodeStreamWrongLastSequence) || code == int(jetstream.JSErrCodeStreamWrongLastSequenceConstant)
		if c.inProcess.Note(code) {
			// The stream holds the copy's id as "in process" without a sequence: a proposal
			// lost in a leader change, which the server forgets only when its duplicate window
			// (2 minutes by default) ends, refusing every re-send until then (seen after
			// step-downs, 2026-12-01). The shared rule (produce.InProcess, spec/protocol.md
			// §5.1.5) allows a new id here because the copy carries its guard: the expected
			// last subject sequence (c.expect) refuses the renewed copy if the lost one was
			// stored after all, and refused below then finds it.
			c.msg.Header.Set(wire.HeaderMsgID, fmt.Sprintf("%s-r%d", c.id, attempt))
			c.inProcess.Renewed()
		} else if wrongLast {
			decided, again, err := j.refused(ctx, c, compact, lastCopy, overtaken)
			if err != nil {
				return err
			}
			if decided {
				return nil
			}
			c.expect = again
		} else if attempt > 0 && attempt%10 == 0 {
			j.b.cfg.Logger.Warn("backfill copy keeps failing; retrying", "topic", j.t.Name, "subject", c.msg.Subject, "err", err)
		}
		if attempt >= 100 {
			return fmt.Errorf("%w: copy of %s: %v", wire.ErrUnavailable, c.msg.Subject, err)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(min(time.Duration(attempt+1)*50*time.Millisecond, 2*time.Second)):
		}
		if err := j.publish(ctx, c); err != nil {
			return err
		}
	}
}

// refused decides a copy that JetStream refused for the wrong last sequence of its subject, by
// reading the subject's last message from the stream's leader: decided, or the expected
// sequence to publish it again with.
func (j *bfJob) refused(ctx context.Context, c *bfCopy, compact bool, lastCopy map[string]uint64, overtaken map[string]bool) (bool, uint64, error) {
	e, err := j.b.leaderLast(ctx, c.stream, c.msg.Subject)
	switch {
	case errors.Is(err, errKeyMissing):
		// Refused, yet nothing is there: the newer publish that the server was processing was
		// not stored after all (a cluster). Publish the copy again.
		return false, 0, nil
	case err != nil:
		return false, 0, fmt.Errorf("%w: read %s: %v", wire.ErrUnavailable, c.msg.Subject, err)
	}
	if compact {
		if e.hdr.Get(wire.HeaderBackfill) == c.msg.Header.Get(wire.HeaderBackfill) {
			j.prog.count(c.q, c.seq, bfCopied) // this copy, stored by an attempt whose answer was lost
		} else {
			j.prog.count(c.q, c.seq, bfNewer)
		}
		return true, 0, nil
	}
	// A plain topic: the key's last record in the new partition is this backfill's copy of an
	// earlier (or this) record of the key (an attempt before a crash), or a newer record.
	if o := e.hdr.Get(wire.HeaderBackfill); o != "" {
		oe, oq, os, perr := wire.ParseOrigin(o)
		if perr == nil && oe == j.prev.Epoch && oq < j.prev.Partitions {
			if os >= c.seq {
				lastCopy[string(c.key)] = e.rev
				j.prog.count(c.q, c.seq, bfNewer)
				return true, 0, nil // copied already
			}
			return false, e.rev, nil // chain after the earlier copy
		}
	}
	overtaken[string(c.key)] = true
	j.prog.count(c.q, c.seq, bfNewer)
	return true, 0, nil
}

// finishBackfillWork is the retry loop's part: it starts the topic's running backfill in the
// background (the loop does not wait for it; its progress changes the descriptor's revision).
func (b *Broker) finishBackfillWork(t *wire.Topic) {
	if ep := t.Backfilling(); ep != nil {
		b.backfillInBackground(t.Name, ep.Epoch)
	}
}
