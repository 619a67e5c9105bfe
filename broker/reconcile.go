package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// Unfinished work — a topic being created or deleted, an epoch change, an epoch whose observed
// ancestry is still pending — is recorded in the descriptor, so any broker can finish it. A
// request finishes its own work at once; what it could not finish (a node down, a broker that
// died half way, this one or another) is finished by the retry loop that every broker runs: a watch
// of the descriptor bucket says which topics have unfinished work, and every Config.RetryInterval
// the loop reads those descriptors from the leader and takes up work that has made no progress
// (same descriptor revision) for two intervals, with a backoff per topic that doubles up to 4
// intervals for an epoch change (producers wait for it) and up to
// maxRetryBackoff. Several brokers may take up the same work at once: every step is idempotent and
// recorded by compare-and-set, so the first to record a step wins and the others re-read.
//
// Logging: the loop logs once when it takes up a piece of work, once per distinct failure of a
// step (so a node that stays down is one line, not one per retry), and once when it is done.

type retryingKey struct{}

// withRetrying marks a context as the retry loop's, which logs the failures of its attempts itself.
func withRetrying(ctx context.Context) context.Context {
	return context.WithValue(ctx, retryingKey{}, true)
}

func retrying(ctx context.Context) bool { return ctx.Value(retryingKey{}) != nil }

// maxRetryBackoff bounds the pause between retries of one topic's unfinished work.
const maxRetryBackoff = 30 * time.Second

// retryBackoff is the pause after the attempts-th failed retry of a topic's work: the interval
// doubled per attempt, up to maxRetryBackoff; up to 4 intervals for an epoch change, which
// producers wait for (chaos seed 35: a change whose stream creations failed while a node was cut
// off and the meta leader killed resumed 15 s after the cluster was whole, its pause grown to 16 s,
// and the producers' records waited for it).
func retryBackoff(every time.Duration, attempts int, change bool) time.Duration {
	shift := min(attempts, 5)
	if change {
		shift = min(attempts, 2)
	}
	return min(every<<shift, maxRetryBackoff)
}

// topicLocks serialises, within this process, the steps of one topic's unfinished work (no lock
// is held across topics).
type topicLocks struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}

func (l *topicLocks) get(name string) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*sync.Mutex{}
	}
	mu, ok := l.m[name]
	if !ok {
		mu = &sync.Mutex{}
		l.m[name] = mu
	}
	return mu
}

// unfinished describes a descriptor's unfinished work ("" for none). Epoch changes also say their
// state, so that each state is logged once.
func unfinished(t *wire.Topic) string {
	switch {
	case t.Deleting:
		return "deletion"
	case t.Creating:
		return "creation"
	case t.Change != nil:
		return fmt.Sprintf("change to epoch %d (state %s)", t.Change.To, t.Change.State)
	case t.Reconfig != nil:
		return fmt.Sprintf("change to R%d, placement tags %v", t.Reconfig.Replicas, t.Reconfig.PlacementTags)
	case t.Retiring != nil:
		return fmt.Sprintf("retirement of epochs up to %d", t.Retiring.Through)
	case t.Backfilling() != nil:
		return fmt.Sprintf("backfill into epoch %d", t.Backfilling().Epoch)
	}
	for _, e := range t.Epochs {
		if e.Ancestry != nil && e.Ancestry.Source == "pending" {
			return fmt.Sprintf("observed ancestry of epoch %d", e.Epoch)
		}
	}
	return ""
}

// finish drives a topic's unfinished work as far as it goes, with the topic's lock held.
func (b *Broker) finish(ctx context.Context, name string) error {
	mu := b.locks.get(name)
	mu.Lock()
	defer mu.Unlock()
	return b.finishLocked(ctx, name)
}

func (b *Broker) finishLocked(ctx context.Context, name string) error {
	t, rev, err := b.getTopic(ctx, name)
	if err != nil {
		return err
	}
	switch {
	case t.Deleting:
		return b.finishDelete(ctx, t, rev)
	case t.Creating:
		return b.finishCreate(ctx, t, rev)
	case t.Change != nil:
		return b.runChangeLocked(ctx, name)
	case t.Reconfig != nil:
		return b.finishReconfigLocked(ctx, name)
	case t.Retiring != nil:
		return b.finishRetireLocked(ctx, name)
	case t.Backfilling() != nil:
		// Runs in the background (a backfill takes longer than a retry round); its recorded
		// progress changes the descriptor's revision, so the loop leaves it alone meanwhile.
		b.finishBackfillWork(t)
	}
	for _, e := range t.Epochs {
		if e.Ancestry != nil && e.Ancestry.Source == "pending" {
			if err := b.observeAncestry(ctx, name, e.Epoch); err != nil {
				return err
			}
		}
	}
	return nil
}

// observeInBackground computes an epoch's observed ancestry after activation (the retry loop takes
// it up if this broker dies first). At most one scan per topic and epoch runs in this process.
func (b *Broker) observeInBackground(name string, epoch int) {
	key := fmt.Sprintf("%s/%d", name, epoch)
	if _, busy := b.observing.LoadOrStore(key, true); busy {
		return
	}
	b.loopWG.Add(1)
	go func() {
		defer b.loopWG.Done()
		defer b.observing.Delete(key)
		if err := b.observeAncestry(b.loopCtx, name, epoch); err != nil && b.loopCtx.Err() == nil {
			b.cfg.Logger.Warn("observed ancestry failed; the retry loop tries again", "topic", name, "epoch", epoch, "err", err)
		}
	}()
}

// resume finishes, at start, what a previous run (of this broker or another) left unfinished.
// Failures are logged; the retry loop tries again.
func (b *Broker) resume(ctx context.Context) error {
	names, err := b.topicNames(ctx)
	if err != nil {
		return fmt.Errorf("broker: list topics: %w", err)
	}
	for _, name := range names {
		t, _, err := b.getTopic(ctx, name)
		if err != nil {
			continue
		}
		if work := unfinished(t); work != "" {
			if err := b.finish(ctx, name); err != nil {
				b.cfg.Logger.Warn("resuming unfinished work failed; the retry loop tries again", "topic", name, "work", work, "err", err)
			} else {
				b.cfg.Logger.Info("resumed and finished unfinished work", "topic", name, "work", work)
			}
		}
		if err := b.enableBatches(ctx, name); err != nil {
			b.cfg.Logf("topic %s: %v", name, err)
		}
	}
	return nil
}

// enableBatches turns fast batches on for the partition streams of a topic created by an older
// pctl (producers need them), each only while bound where the descriptor says, with the topic's
// lock held and no change in progress: the update writes the stream's whole configuration, and
// must not move a stream back from where an epoch change bound it. A topic with work in progress
// is left to that work (setSubject turns fast batches on too) and to the next start.
func (b *Broker) enableBatches(ctx context.Context, name string) error {
	mu := b.locks.get(name)
	mu.Lock()
	defer mu.Unlock()
	t, _, err := b.getTopic(ctx, name)
	if err != nil {
		return err
	}
	if t.Deleting || t.Creating || t.Change != nil || t.Reconfig != nil {
		return nil
	}
	cur := t.Current()
	return b.forPartitions(ctx, t.MaxPartitions(), func(q int) error {
		subject := wire.StreamRetiredSubject(t.Name, q, t.KeySubjects())
		if q < cur.Partitions {
			subject = wire.StreamSubject(t.Name, cur.Epoch, q, t.KeySubjects())
		}
		return b.allowBatches(ctx, wire.StreamName(t.Name, q), subject)
	})
}

func (b *Broker) topicNames(ctx context.Context) ([]string, error) {
	ctx, cancel := opContext(ctx)
	defer cancel()
	lister, err := b.topic.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, k)
	}
	return names, nil
}

// retryState is the loop's memory of one topic's unfinished work.
type retryState struct {
	rev      uint64    // the descriptor revision last seen
	work     string    // unfinished(descriptor)
	since    time.Time // when rev was first seen
	next     time.Time // no attempt before
	attempts int
	taken    bool   // an attempt was made (and logged) for this work
	failed   string // the last failure logged for this work
}

// workWatch is the retry loop's view of which topics have unfinished work, kept from a watch of
// the descriptor bucket, so that a round reads from the leader only the descriptors that need it
// (not every topic every interval). It may lag behind the bucket; decisions are made on the
// leader read in retryTopic.
type workWatch struct {
	mu    sync.Mutex
	ready bool              // the watch delivered every key's current value
	work  map[string]string // topic -> unfinished(descriptor), for topics with some
}

func (w *workWatch) snapshot() ([]string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	names := make([]string, 0, len(w.work))
	for n := range w.work {
		names = append(names, n)
	}
	return names, w.ready
}

// watchWork runs the watch until the loop stops, starting it again when it ends.
func (b *Broker) watchWork(w *workWatch) {
	defer b.loopWG.Done()
	for b.loopCtx.Err() == nil {
		kw, err := b.topic.WatchAll(b.loopCtx)
		if err == nil {
			// The loop's context ends the reading, not only the watcher closing its channel: the
			// channel was seen to stay open after the context ended, and Close waited for this
			// goroutine for 13 minutes (CI, 2026-12-02, TestServeTwiceOnOneDataDir).
			updates := kw.Updates()
		read:
			for {
				var e jetstream.KeyValueEntry
				select {
				case <-b.loopCtx.Done():
					break read
				case ent, ok := <-updates:
					if !ok {
						break read
					}
					e = ent
				}
				w.mu.Lock()
				switch {
				case e == nil:
					w.ready = true
				case e.Operation() != jetstream.KeyValuePut:
					delete(w.work, e.Key())
				default:
					var t wire.Topic
					if json.Unmarshal(e.Value(), &t) == nil && unfinished(&t) == "" {
						delete(w.work, e.Key())
					} else {
						w.work[e.Key()] = unfinished(&t) // unreadable: let a leader read decide
					}
				}
				w.mu.Unlock()
			}
			_ = kw.Stop()
		}
		w.mu.Lock()
		w.ready = false
		w.mu.Unlock()
		select {
		case <-b.loopCtx.Done():
		case <-time.After(b.cfg.RetryInterval):
		}
	}
}

func (b *Broker) retryLoop() {
	defer b.loopWG.Done()
	every := b.cfg.RetryInterval
	tick := time.NewTicker(every)
	defer tick.Stop()
	w := &workWatch{work: map[string]string{}}
	b.loopWG.Add(1)
	go b.watchWork(w)
	states := map[string]*retryState{}
	listFailed := ""
	for {
		select {
		case <-b.loopCtx.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(b.loopCtx, 5*time.Minute)
		names, ready := w.snapshot()
		if !ready {
			// No watch yet (or it is being started again): read every descriptor.
			var err error
			if names, err = b.topicNames(ctx); err != nil {
				if msg := err.Error(); msg != listFailed && b.loopCtx.Err() == nil {
					b.cfg.Logger.Warn("retry loop cannot list topics", "err", err, "every", every)
					listFailed = msg
				}
				cancel()
				continue
			}
			listFailed = ""
		}
		// Topics the loop is following stay in the round until a leader read says they are done.
		for name := range states {
			names = append(names, name)
		}
		seen := map[string]bool{}
		for _, name := range names {
			if seen[name] {
				continue
			}
			seen[name] = true
			b.retryTopic(ctx, name, states, every)
			if b.loopCtx.Err() != nil {
				break
			}
		}
		cancel()
	}
}

func (b *Broker) retryTopic(ctx context.Context, name string, states map[string]*retryState, every time.Duration) {
	t, rev, err := b.getTopic(ctx, name)
	now := time.Now()
	st := states[name]
	if err != nil {
		if errors.Is(err, wire.ErrNotFound) {
			if st != nil && st.taken {
				b.cfg.Logger.Info("unfinished work finished", "topic", name, "work", st.work)
			}
			delete(states, name)
		}
		return // unreadable now: the next round tries again
	}
	work := unfinished(t)
	if work == "" {
		if st != nil && st.taken {
			b.cfg.Logger.Info("unfinished work finished", "topic", name, "work", st.work)
		}
		delete(states, name)
		return
	}
	grace := 2 * every
	if st == nil || st.work != work {
		if st != nil && st.taken {
			b.cfg.Logger.Info("unfinished work finished", "topic", name, "work", st.work)
		}
		st = &retryState{rev: rev, work: work, since: now, next: now.Add(grace)}
		states[name] = st
	} else if st.rev != rev || b.stepMoved(name, st.since, now) {
		// Progress by someone (another broker, or a request of this one; or another broker's
		// step over thousands of partitions, which writes the descriptor only at its end but
		// publishes its progress): wait again.
		st.rev, st.since = rev, now
		if st.next.Before(now.Add(grace)) {
			st.next = now.Add(grace)
		}
	}
	if now.Before(st.next) {
		return
	}
	if b.drivingBackfill(name) {
		return // this broker is backfilling it right now
	}
	mu := b.locks.get(name)
	if !mu.TryLock() {
		return // this broker is driving it right now (a request)
	}
	st.attempts++
	if !st.taken {
		b.cfg.Logger.Warn("stuck work taken up", "topic", name, "work", work, "unchanged_for", now.Sub(st.since).Round(time.Millisecond))
		st.taken = true
	}
	err = b.finishLocked(withRetrying(ctx), name)
	mu.Unlock()
	if err == nil {
		// Done as far as it goes: what is left (pending ancestry, say) is new work next round.
		b.cfg.Logger.Info("unfinished work finished", "topic", name, "work", st.work, "attempts", st.attempts)
		delete(states, name)
		return
	}
	st.next = time.Now().Add(retryBackoff(every, st.attempts, t.Change != nil))
	if msg := wire.Code(err) + ": " + err.Error(); msg != st.failed && b.loopCtx.Err() == nil {
		b.cfg.Logger.Warn("retried work failed", "topic", name, "work", work, "attempt", st.attempts, "err", err, "max_backoff", maxRetryBackoff)
		st.failed = msg
	}
}

// subscribeSteps follows the progress other brokers publish of their epoch change steps
// (wire.ChangeEvent), for stepMoved. An event delivered by JetStream (a `$JS.` reply subject: a
// consumer may aim a push consumer at the subject) is ignored: events can be flooded, never
// forged (spec/protocol.md §8.4).
func (b *Broker) subscribeSteps() error {
	s, err := b.nc.Subscribe(wire.EventsPrefix+".change.*", func(m *nats.Msg) {
		if strings.HasPrefix(m.Reply, "$JS.") {
			return
		}
		var ev wire.ChangeEvent
		if json.Unmarshal(m.Data, &ev) != nil || ev.Broker == b.id || wire.ChangeSubject(ev.Topic) != m.Subject {
			return
		}
		// Only a count that moved is progress: a broker hung in a step may go on publishing.
		now := stepSeen{to: ev.To, step: ev.Step, done: ev.Done, broker: ev.Broker, at: time.Now()}
		if v, ok := b.stepsSeen.Load(ev.Topic); ok {
			if last := v.(stepSeen); last.to == now.to && last.step == now.step && last.done == now.done && last.broker == now.broker {
				return
			}
		}
		b.stepsSeen.Store(ev.Topic, now)
	})
	if err != nil {
		return err
	}
	b.subs = append(b.subs, s)
	return nil
}

// stepMoved reports whether another broker's step of the topic's epoch change moved (its count
// of partitions done changed) after `since`, or within two event intervals of now (a retry loop whose rounds come
// more often than the events).
func (b *Broker) stepMoved(topic string, since, now time.Time) bool {
	v, ok := b.stepsSeen.Load(topic)
	if !ok {
		return false
	}
	seen := v.(stepSeen).at
	return seen.After(since) || now.Sub(seen) < 2*progressEvery
}

// stepSeen is the last progress of a topic's step another broker published, and when it moved.
type stepSeen struct {
	to     int
	step   string
	done   int
	broker string
	at     time.Time
}
