package broker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/ancestry"
	"pctl.dev/pctl/internal/logging"
)

// Epoch change states, in order (spec/protocol.md §5). Every step is idempotent and recorded in
// the descriptor by compare-and-set before the next begins, so a broker that dies at any point
// resumes from the recorded state on start.
const (
	statePlanned = "planned" // Change written; new streams may not exist yet
	stateCreated = "created" // every stream of the new epoch exists
	stateFenced  = "fenced"  // every old partition refuses old-epoch records; boundaries recorded
)

// maxObservedRecords bounds the scan that computes observed ancestry.
const maxObservedRecords = 2_000_000

func (b *Broker) apiTopicRepartition(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.RepartitionRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	// Plan by compare-and-set. A conflict with a write that is not another change (the
	// background computation of an earlier epoch's observed ancestry) is retried.
	var t *wire.Topic
	var cur *wire.Epoch
	var p wire.Partitioner
	var n int
	for attempt := 0; ; attempt++ {
		var rev uint64
		var err error
		t, rev, err = b.getTopic(ctx, req.Topic)
		if err != nil {
			return nil, err
		}
		switch {
		case t.Change != nil:
			return nil, fmt.Errorf("%w: topic %s is already changing to epoch %d (state %s, started %s); wait for it to finish ('pctl topic describe %s')",
				wire.ErrChangeInProgress, t.Name, t.Change.To, t.Change.State, t.Change.Started.Format(time.RFC3339), t.Name)
		case t.Reconfig != nil:
			return nil, fmt.Errorf("%w: topic %s is changing its replicas or placement (to R%d, started %s); wait for it to finish ('pctl topic describe %s')",
				wire.ErrChangeInProgress, t.Name, t.Reconfig.Replicas, t.Reconfig.Started.Format(time.RFC3339), t.Name)
		case t.Creating || t.Deleting:
			return nil, fmt.Errorf("%w: topic %s is being created or deleted", wire.ErrConflict, t.Name)
		case t.Backfilling() != nil:
			bf := t.Backfilling()
			return nil, fmt.Errorf("%w: topic %s is still backfilling epoch %d (%s); the next epoch change starts from a complete epoch: wait for it ('pctl topic describe %s')",
				wire.ErrChangeInProgress, t.Name, bf.Epoch, backfillText(t, bf), t.Name)
		case t.Retiring != nil:
			return nil, fmt.Errorf("%w: topic %s is retiring epochs up to %d; wait for it to finish ('pctl topic describe %s')",
				wire.ErrChangeInProgress, t.Name, t.Retiring.Through, t.Name)
		}
		cur = t.Current()
		n = req.Partitions
		if n == 0 {
			n = cur.Partitions
		}
		if n < 1 || n > MaxTopicPartitions {
			return nil, fmt.Errorf("%w: --partitions %d: a topic has 1 to %d partitions", wire.ErrBadRequest, n, MaxTopicPartitions)
		}
		ref, cfg := cur.Partitioner.Digest, cur.Partitioner.Config
		if req.Partitioner != "" {
			ref, cfg = req.Partitioner, req.Config
		}
		if req.SetConfig {
			cfg = req.Config
		}
		p, err = b.resolvePartitioner(ctx, ref, cfg)
		if err != nil {
			return nil, err
		}
		if n == cur.Partitions && p.Digest == cur.Partitioner.Digest && bytes.Equal(p.Config, cur.Partitioner.Config) {
			return nil, fmt.Errorf("%w: topic %s already has %d partitions with %s and this config; nothing to change", wire.ErrBadRequest, t.Name, n, cur.Partitioner.Name)
		}
		t.Change = &wire.Change{To: cur.Epoch + 1, Partitions: n, Partition: p, State: statePlanned,
			Boundaries: make([]uint64, cur.Partitions), Started: time.Now().UTC(), FenceToken: fenceToken()}
		holdTombstones(t) // a compacted topic's tombstones are held from here to the backfill's end (§10.2)
		_, err = b.putTopic(ctx, t, rev)
		if err == nil {
			break
		}
		if !errors.Is(err, wire.ErrConflict) || attempt >= 20 {
			return nil, err
		}
	}
	b.cfg.Logger.Info("epoch change planned", "topic", t.Name, "from", cur.Epoch, "to", cur.Epoch+1, "partitions_from", cur.Partitions, "partitions_to", n,
		"partitioner_from", cur.Partitioner.Name, "partitioner_to", p.Name)
	if b.cfg.Testing.StepHook() != nil {
		if err := b.cfg.Testing.StepHook()(t.Name, statePlanned); err != nil {
			return nil, err
		}
	}
	if err := b.runChange(ctx, t.Name); err != nil {
		return nil, fmt.Errorf("%w (the change to epoch %d is recorded and the broker keeps retrying it; 'pctl topic describe %s' shows its state)", err, cur.Epoch+1, t.Name)
	}
	t, rev, err := b.getTopic(ctx, t.Name)
	if err != nil {
		return nil, err
	}
	return wire.TopicReply{Topic: *t, Revision: rev}, nil
}

// runChange drives a topic's epoch change from its recorded state to activation.
func (b *Broker) runChange(ctx context.Context, name string) error {
	mu := b.locks.get(name)
	mu.Lock()
	defer mu.Unlock()
	return b.runChangeLocked(ctx, name)
}

// runChangeLocked is runChange with the topic's lock held.
func (b *Broker) runChangeLocked(ctx context.Context, name string) error {
	stale, poisoned := 0, 0
	var unavailableSince time.Time
	pause := 250 * time.Millisecond
	for {
		stepStart := time.Now()
		t, rev, err := b.getTopic(ctx, name)
		if err != nil && errors.Is(err, wire.ErrUnavailable) && b.retryInPlace(ctx, &unavailableSince, &pause) {
			continue
		}
		if err != nil {
			return err
		}
		ch := t.Change
		if ch == nil {
			return nil
		}
		cur := t.Current()
		step := stepName(ch.State)
		switch ch.State {
		case statePlanned:
			prog := b.stepProgress(name, ch.To, step, max(ch.Partitions-cur.Partitions, 0))
			err = b.forPartitionsRetried(ctx, ch.Partitions, func(q int) error {
				if q < cur.Partitions {
					return nil // fenced and moved to the new subject in the next step
				}
				if err := b.partitionHook(name, step, q); err != nil {
					return err
				}
				subj := wire.StreamSubject(t.Name, ch.To, q, t.KeySubjects())
				exact, err := b.createStream(ctx, t, q, subj, ch.To)
				if err != nil {
					return err
				}
				if !exact { // a retired stream coming back
					if err := b.setSubject(ctx, t.Name, q, subj, ch.To); err != nil {
						return err
					}
				}
				prog.add() // one round trip for a new stream
				return nil
			})
			prog.stop()
			ch.State = stateCreated
		case stateCreated:
			if ch.FenceToken == "" {
				// A change planned by an older broker: draw its token and record it before any
				// marker carries it.
				ch.FenceToken = fenceToken()
				if _, err := b.putTopic(ctx, t, rev); err != nil && !errors.Is(err, wire.ErrConflict) {
					return err
				}
				continue
			}
			prog := b.stepProgress(name, ch.To, step, cur.Partitions)
			err = b.forPartitionsRetried(ctx, cur.Partitions, func(q int) error {
				if err := b.partitionHook(name, step, q); err != nil {
					return err
				}
				subj := wire.StreamRetiredSubject(t.Name, q, t.KeySubjects())
				if q < ch.Partitions {
					subj = wire.StreamSubject(t.Name, ch.To, q, t.KeySubjects())
				}
				// Moving the stream off the old subject is the fence: from now on JetStream
				// refuses old-epoch publishes to it. But publishes the stream accepted just
				// before the move may still be queued inside the server, to be stored after it,
				// so the last sequence right after the move is not yet the boundary. A fence
				// marker published to the new subject queues behind them: every old-epoch
				// record is below the marker, every new-epoch record (none exists before
				// activation) above it. Its deduplication id (with the change's recorded token)
				// makes a re-run after a crash get the same marker, so the boundary is the same
				// however often this runs.
				if err := b.setSubject(ctx, t.Name, q, subj, ch.To); err != nil {
					return err
				}
				marker, err := b.fenceMarker(ctx, t, ch, q, subj)
				if err != nil {
					return err
				}
				ch.Boundaries[q] = marker - 1
				prog.add()
				return nil
			})
			prog.stop()
			if errors.Is(err, errFenceClaimed) && poisoned < 10 {
				// A look-alike holds the marker's id: draw a new token, record it, fence again
				// (every partition gets a marker with the new id; boundaries follow them).
				poisoned++
				b.cfg.Logger.Warn("fence marker id claimed by another message; fencing again with a new token", "topic", name, "to", ch.To, "err", err)
				ch.FenceToken = fenceToken()
				if _, err := b.putTopic(ctx, t, rev); err != nil && !errors.Is(err, wire.ErrConflict) {
					return err
				}
				continue
			}
			ch.State = stateFenced
			ch.Fenced = nil // the state says it for every old partition (a change planned by an older broker had a list)
		case stateFenced:
			anc := b.declaredAncestry(ctx, cur, ch)
			cur.Boundaries = ch.Boundaries
			next := wire.Epoch{Epoch: ch.To, Partitioner: ch.Partition, Partitions: ch.Partitions, Started: time.Now().UTC(), Ancestry: anc}
			if t.Backfills() {
				// The copying of the ended epoch's records starts with the activation
				// (spec/protocol.md §10.3): recorded in the same write, so it is never lost.
				// A compacted topic's tombstones are held until it ends (§10.2).
				startBackfill(t, &next, cur.Partitions)
			}
			t.Epochs = append(t.Epochs, next)
			t.Change = nil
			if _, err := b.putTopic(ctx, t, rev); err != nil {
				if errors.Is(err, wire.ErrConflict) {
					continue // re-read and activate again (idempotent)
				}
				return err
			}
			b.cfg.Logger.Info("epoch change step", "topic", t.Name, "to", ch.To, "step", "activate", "state", "active", "took", time.Since(stepStart).Round(time.Microsecond))
			b.cfg.Logger.Info("epoch active", "topic", t.Name, "epoch", ch.To, "partitions", ch.Partitions, "partitioner", ch.Partition.Name,
				"boundaries", logging.Uints(cur.Boundaries), "ancestry", anc.Source, "change_took", time.Since(ch.Started).Round(time.Millisecond))
			b.hookEpochStep(name, ch.To, "activate", time.Since(stepStart), nil)
			b.hookEpochChange(name, ch.To, time.Since(ch.Started))
			if b.cfg.Testing.StepHook() != nil {
				_ = b.cfg.Testing.StepHook()(name, "active")
			}
			if anc.Source == "pending" {
				b.observeInBackground(name, ch.To)
			}
			if next.Backfill != nil {
				b.backfillInBackground(name, ch.To)
			}
			return nil
		default:
			return fmt.Errorf("%w: topic %s has an epoch change in unknown state %q", wire.ErrInternal, name, ch.State)
		}
		if errors.Is(err, wire.ErrConflict) && stale < 10 {
			// A stream is bound for a later epoch than this step's: the descriptor read moved on
			// meanwhile (another broker finished the step and more). Re-read it.
			stale++
			continue
		}
		if err != nil && errors.Is(err, wire.ErrUnavailable) && b.retryInPlace(ctx, &unavailableSince, &pause) {
			continue // a stream or the bucket without a leader for a moment (an election)
		}
		if err != nil {
			// The retry loop logs its failures once per distinct error itself: its repeated
			// attempts go to Debug here, so that a node that stays down is not a line per retry.
			logStep := b.cfg.Logger.Warn
			if retrying(ctx) {
				logStep = b.cfg.Logger.Debug
			}
			logStep("epoch change step failed", "topic", name, "to", ch.To, "step", step, "took", time.Since(stepStart).Round(time.Microsecond), "err", err)
			b.hookEpochStep(name, ch.To, step, time.Since(stepStart), err)
			return err
		}
		unavailableSince, pause = time.Time{}, 250*time.Millisecond
		if _, err := b.putTopic(ctx, t, rev); err != nil {
			if errors.Is(err, wire.ErrConflict) {
				// Another writer (the background ancestry of an earlier epoch) changed the
				// descriptor: re-read it and run this step again; steps are idempotent.
				continue
			}
			b.hookEpochStep(name, ch.To, step, time.Since(stepStart), err)
			return err
		}
		b.cfg.Logger.Info("epoch change step", "topic", name, "to", ch.To, "step", step, "state", ch.State, "partitions", ch.Partitions, "took", time.Since(stepStart).Round(time.Microsecond))
		b.hookEpochStep(name, ch.To, step, time.Since(stepStart), nil)
		if b.cfg.Testing.StepHook() != nil {
			if err := b.cfg.Testing.StepHook()(name, ch.State); err != nil {
				return err
			}
		}
	}
}

// partitionAttempts is how often a step tries one partition's work that fails with
// ErrUnavailable (a stream request past its bound on a busy server, a leader election) before the
// partition counts as failed: one slow request among thousands then costs a retry of that
// partition, not a re-run of the whole step.
const partitionAttempts = 2

// forPartitionsRetried is forPartitions with each partition's work (idempotent) tried up to
// partitionAttempts times while it fails with ErrUnavailable. Such failures also halve the work in
// flight for the rest of the step (once per wave, down to minInFlight): on a server whose every stream request
// costs tens of milliseconds (thousands of streams), requests queued behind 64 others pass their
// bound before they are answered, and fewer in flight is then faster, not slower.
func (b *Broker) forPartitionsRetried(ctx context.Context, n int, f func(q int) error) error {
	lim := newLimiter(b.cfg.StreamOpsInFlight)
	return b.forPartitions(ctx, n, func(q int) error {
		for attempt := 1; ; attempt++ {
			seen := lim.acquire()
			err := f(q)
			lim.release()
			if err == nil || attempt >= partitionAttempts || !errors.Is(err, wire.ErrUnavailable) || errors.Is(err, wire.ErrConflict) {
				if err != nil && errors.Is(err, wire.ErrUnavailable) {
					lim.shrink(seen)
				}
				return err
			}
			lim.shrink(seen)
			select {
			case <-ctx.Done():
				return err
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
}

// minInFlight is the least work in flight a step's limiter shrinks to.
const minInFlight = 4

// limiter bounds the partitions of a step worked on at once, a bound that only shrinks.
type limiter struct {
	mu           sync.Mutex
	cond         *sync.Cond
	limit, inUse int
}

func newLimiter(limit int) *limiter {
	l := &limiter{limit: max(limit, 1)}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// acquire waits for room and returns the bound it was admitted under.
func (l *limiter) acquire() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.inUse >= l.limit {
		l.cond.Wait()
	}
	l.inUse++
	return l.limit
}

func (l *limiter) release() {
	l.mu.Lock()
	l.inUse--
	l.cond.Broadcast()
	l.mu.Unlock()
}

// shrink halves the bound, down to minInFlight, once per bound: the failures of one wave of work
// admitted under a bound halve it once.
func (l *limiter) shrink(admittedUnder int) {
	l.mu.Lock()
	if l.limit == admittedUnder && l.limit > minInFlight {
		l.limit = max(l.limit/2, minInFlight)
	}
	l.mu.Unlock()
}

func (b *Broker) partitionHook(topic, step string, q int) error {
	h := b.cfg.Testing.PartitionHook()
	if h == nil {
		return nil
	}
	return h(topic, step, q)
}

// progressEvery is how often a step over partitions publishes its progress.
const progressEvery = 500 * time.Millisecond

// stepProgress counts the partitions a step has done and publishes the count on
// wire.ChangeSubject every progressEvery while the step runs, and once at its end (best effort:
// 'pctl topic repartition' shows it, and waits as long as it moves). The descriptor is written once
// per step, not per partition: a step over thousands of partitions would otherwise write it
// thousands of times.
func (b *Broker) stepProgress(topic string, to int, step string, of int) *progress {
	p := &progress{b: b, ev: wire.ChangeEvent{Topic: topic, To: to, Step: step, Of: of, Broker: b.id}, quit: make(chan struct{}), over: make(chan struct{})}
	go func() {
		defer close(p.over)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-p.quit:
				p.publish()
				return
			case <-tick.C:
				p.publish()
			}
		}
	}()
	return p
}

// progress is a step's count of partitions done.
type progress struct {
	b    *Broker
	ev   wire.ChangeEvent
	done atomic.Int64
	quit chan struct{}
	over chan struct{}
}

func (p *progress) add() { p.done.Add(1) }

func (p *progress) publish() {
	ev := p.ev
	ev.Done = int(p.done.Load())
	body, _ := json.Marshal(ev)
	_ = p.b.nc.Publish(wire.ChangeSubject(ev.Topic), body)
}

// stop publishes the final count and ends the publishing.
func (p *progress) stop() {
	close(p.quit)
	<-p.over
}

// stepRetryWindow is how long a step that fails with ErrUnavailable (a stream or the bucket
// without a leader: an election after a node died usually takes a few seconds) is retried in place
// before the step fails and is left to the retry loop.
const stepRetryWindow = 20 * time.Second

// retryInPlace pauses before another try of a step that failed with ErrUnavailable, while the
// failures have lasted less than stepRetryWindow; it reports whether to try again.
func (b *Broker) retryInPlace(ctx context.Context, since *time.Time, pause *time.Duration) bool {
	if since.IsZero() {
		*since = time.Now()
	}
	if time.Since(*since) > stepRetryWindow || b.loopCtx.Err() != nil {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(*pause):
	}
	if *pause *= 2; *pause > 2*time.Second {
		*pause = 2 * time.Second
	}
	return true
}

// stepName names the step an epoch change in a recorded state runs next (metrics and logs).
func stepName(state string) string {
	switch state {
	case statePlanned:
		return "create"
	case stateCreated:
		return "fence"
	case stateFenced:
		return "activate"
	}
	return state
}

// setSubject binds partition q's stream to subject for the change to epoch `epoch`. A stream
// already bound by a later epoch's change is left alone and the step fails with ErrConflict: this
// step belongs to a change that has been overtaken (its broker was paused between reading the
// descriptor and acting), and moving the stream back would unfence it. The check and the update
// are not atomic (JetStream has no compare-and-set on stream configurations), so this narrows
// the window to the time between one stream info and one stream update.
func (b *Broker) setSubject(ctx context.Context, topic string, q int, subject string, epoch int) error {
	ctx, cancel := opContext(ctx)
	defer cancel()
	s, err := b.js.Stream(ctx, wire.StreamName(topic, q))
	if err != nil {
		return fmt.Errorf("%w: stream %s: %v", wire.ErrUnavailable, wire.StreamName(topic, q), err)
	}
	cfg := s.CachedInfo().Config
	if bound := bindingEpoch(cfg); bound > epoch {
		return fmt.Errorf("%w: stream %s is bound for epoch %d already; the step for epoch %d is stale", wire.ErrConflict, cfg.Name, bound, epoch)
	}
	if len(cfg.Subjects) == 1 && cfg.Subjects[0] == subject && bindingEpoch(cfg) == epoch && cfg.AllowBatchPublish {
		return nil
	}
	cfg.Subjects = []string{subject}
	cfg.AllowBatchPublish = true // producers send fast batches (a stream of an older pctl)
	meta := map[string]string{}
	for k, v := range cfg.Metadata {
		meta[k] = v
	}
	meta[metaBindingEpoch] = strconv.Itoa(epoch)
	cfg.Metadata = meta
	if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("%w: move stream %s to %s: %v", wire.ErrUnavailable, cfg.Name, subject, err)
	}
	return nil
}

// bindingEpoch is the epoch whose change last bound a stream: from its metadata, else (a stream
// bound before the metadata existed) from its subject; 0 if neither says.
func bindingEpoch(cfg jetstream.StreamConfig) int {
	if v, err := strconv.Atoi(cfg.Metadata[metaBindingEpoch]); err == nil {
		return v
	}
	if len(cfg.Subjects) == 1 {
		if _, e, _, err := wire.ParseDataSubject(cfg.Subjects[0]); err == nil {
			return e
		}
	}
	return 0
}

// errFenceClaimed: a fence marker was acknowledged as a duplicate of a stored message that is
// not the marker (a look-alike published with its id beforehand).
var errFenceClaimed = fmt.Errorf("%w: fence marker id claimed", wire.ErrConflict)

// fenceToken draws a change's fence token: 32 hex digits from a secure random source.
func fenceToken() string {
	var buf [16]byte
	if _, err := rand.Read(buf[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on supported systems
	}
	return hex.EncodeToString(buf[:])
}

// fenceMarker publishes partition q's fence marker for change ch and returns its stream sequence
// (spec/protocol.md §7), given the subject the stream was just bound to. A duplicate acknowledgement counts only when the message stored at its
// sequence is this marker: on the marker's subject (the stream's new one, where nothing could
// be published before the move), with its headers and no data. Anything else is a look-alike
// that claimed the id (errFenceClaimed): its sequence says nothing about the fence.
func (b *Broker) fenceMarker(ctx context.Context, t *wire.Topic, ch *wire.Change, q int, subject string) (uint64, error) {
	subject = wire.MarkerSubject(subject, ch.To) // on a compacted topic: <binding>.f<to> (§10.1)
	stream := wire.StreamName(t.Name, q)
	id := fmt.Sprintf("pctl-fence-%s-%d-%d-%s", t.ID, ch.To, q, ch.FenceToken)
	m := nats.NewMsg(subject)
	m.Header.Set(wire.HeaderFence, strconv.Itoa(ch.To))
	m.Header.Set(wire.HeaderMsgID, id)
	ctx, cancel := opContext(ctx)
	defer cancel()
	ack, err := b.js.PublishMsg(ctx, m, jetstream.WithExpectStream(stream))
	if err != nil {
		return 0, fmt.Errorf("%w: fence marker of %s: %v", wire.ErrUnavailable, stream, err)
	}
	if !ack.Duplicate {
		return ack.Sequence, nil
	}
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("%w: stream %s: %v", wire.ErrUnavailable, stream, err)
	}
	stored, err := s.GetMsg(ctx, ack.Sequence) // from the stream leader (not a direct get)
	if err != nil {
		return 0, fmt.Errorf("%w: reading the message a fence marker of %s duplicates (sequence %d): %v", wire.ErrUnavailable, stream, ack.Sequence, err)
	}
	if stored.Subject != subject || len(stored.Data) != 0 || stored.Header.Get(wire.HeaderMsgID) != id || stored.Header.Get(wire.HeaderFence) != strconv.Itoa(ch.To) {
		return 0, fmt.Errorf("%w: %s sequence %d (subject %s) carries the id %s of the fence marker for epoch %d but is not that marker", errFenceClaimed, stream, ack.Sequence, stored.Subject, id, ch.To)
	}
	return ack.Sequence, nil
}

// declaredAncestry returns the partition-level ancestry that is available at once: identity for
// a change that keeps the function and count (a config change), the plugin's declared ancestry
// when the function is unchanged and the plugin's ancestry was verified, else "pending" (the
// observed ancestry is computed after activation, so that producers do not wait for a scan).
func (b *Broker) declaredAncestry(ctx context.Context, cur *wire.Epoch, ch *wire.Change) *wire.Ancestry {
	if cur.Partitioner.Digest == ch.Partition.Digest && bytes.Equal(cur.Partitioner.Config, ch.Partition.Config) {
		info, err := b.pluginInfo(ctx, ch.Partition.Digest)
		if err == nil && info.AncestryVerified {
			if w, err := b.partitionerFor(ctx, ch.Partition); err == nil {
				if parents, err := ancestry.Declared(w, cur.Partitions, ch.Partitions); err == nil {
					return &wire.Ancestry{Source: "declared", Parents: parents}
				}
			}
		}
	}
	return &wire.Ancestry{Source: "pending"}
}

// observeAncestry computes the ancestry of epoch e from the keys stored in epoch e-1's
// partitions (up to their boundaries), evaluating both epochs' functions; a topic with more than
// maxObservedRecords records gets "all".
func (b *Broker) observeAncestry(ctx context.Context, name string, e int) error {
	t, _, err := b.getTopic(ctx, name)
	if err != nil {
		return err
	}
	prev, next := t.Epoch(e-1), t.Epoch(e)
	if prev == nil || next == nil || next.Ancestry == nil || next.Ancestry.Source != "pending" {
		return nil
	}
	total := uint64(0)
	for _, bd := range prev.Boundaries {
		total += bd
	}
	source := "observed"
	// Distinct keys per edge (wire.Ancestry.Keys), for the graphs of status pages.
	obs := ancestry.NewObserver(prev.Partitions, next.Partitions, next.Partitions <= wire.MaxAncestryKeyPartitions)
	if total > maxObservedRecords {
		source = "all"
	} else {
		fOld, err := b.partitionerFor(ctx, prev.Partitioner)
		if err != nil {
			return err
		}
		fNew, err := b.partitionerFor(ctx, next.Partitioner)
		if err != nil {
			return err
		}
		for q := 0; q < prev.Partitions; q++ {
			err := b.scanKeys(ctx, name, q, prev.Boundaries[q], func(key []byte, epoch int) error {
				if epoch != prev.Epoch {
					return nil
				}
				c, err := fNew.Partition(key, int32(next.Partitions))
				if err != nil {
					return err
				}
				p, err := fOld.Partition(key, int32(prev.Partitions))
				if err != nil {
					return err
				}
				obs.Add(key, int(p), int(c))
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	anc := &wire.Ancestry{Source: source}
	if source == "all" {
		anc.Parents = ancestry.All(prev.Partitions, next.Partitions)
	} else {
		anc.Parents, anc.Keys = obs.Parents(), obs.EdgeKeys()
	}
	for {
		t, rev, err := b.getTopic(ctx, name)
		if err != nil {
			return err
		}
		ep := t.Epoch(e)
		if ep == nil || ep.Ancestry == nil || ep.Ancestry.Source != "pending" {
			return nil
		}
		ep.Ancestry = anc
		if _, err := b.putTopic(ctx, t, rev); err == nil || !errors.Is(err, wire.ErrConflict) {
			return err
		}
	}
}

// scanKeys calls f with the key and epoch of every keyed record of partition q up to seq last.
func (b *Broker) scanKeys(ctx context.Context, topic string, q int, last uint64, f func(key []byte, epoch int) error) error {
	if last == 0 {
		return nil
	}
	// A bounded re-creation on reset (nats.go's default is for ever): the scan fails and is retried.
	cons, err := b.js.OrderedConsumer(ctx, wire.StreamName(topic, q), jetstream.OrderedConsumerConfig{HeadersOnly: true, MaxResetAttempts: 3})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	// Next does not watch ctx: a scan whose records do not come (a replica behind, a node gone)
	// waited in it for ever, and Close waited for the scan (loopWG).
	defer context.AfterFunc(ctx, it.Stop)()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		if v := msg.Headers().Get(wire.HeaderKey); v != "" {
			key, err := wire.DecodeKey(v)
			if err == nil {
				_, e, _, perr := wire.ParseDataSubject(msg.Subject())
				if perr == nil {
					if err := f(key, e); err != nil {
						return err
					}
				}
			}
		}
		if md.Sequence.Stream >= last {
			return nil
		}
	}
}
