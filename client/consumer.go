package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/proto"
	"pctl.dev/pctl/internal/testhook"
	"pctl.dev/pctl/partitioner"
)

// Message is a record delivered to a consumer.
type Message struct {
	Topic       string
	Partition   int
	Epoch       int
	Seq         uint64 // stream sequence
	Key         []byte
	NoKey       bool
	Value       []byte
	Producer    string // producer id, if the producer set it
	ProducerSeq uint64
	// Headers are the record's application headers (spec/protocol.md §5.3): every header that
	// is not a protocol one (Pctl-*, Nats-*), name -> values in the order they were sent. Nil
	// when the record has none.
	Headers map[string][]string
	// Time is the record's timestamp: its producer's time (header Pctl-Time, milliseconds) when
	// present and well-formed (ProducerTime is then true), else Stored. Stored is when the
	// stream stored the record.
	Time         time.Time
	Stored       time.Time
	ProducerTime bool
	// Misplaced is set on a record that is not where the topic's partitioner puts it (delivered
	// only with ConsumerOptions.Misplaced = MisplacedDeliver): no order is promised for it.
	Misplaced *Misplacement
	// Tombstone marks a record that deletes its key (spec/protocol.md §10.2); Value is then
	// not a value.
	Tombstone bool
	// Backfill, on a backfilled copy (spec/protocol.md §10.4), names the record it copies. A
	// group delivers a copy only when it cannot have delivered the original: it started at the
	// current epoch, or the original's epoch was retired.
	Backfill *CopyOrigin
}

// CopyOrigin names the stored record a backfilled copy copies.
type CopyOrigin struct {
	Epoch     int
	Partition int
	Seq       uint64
}

// Start is where a new consumer group starts reading (spec/protocol.md §6.1, §10.5).
type Start int

const (
	// StartDefault: StartBeginning with FromBeginning; on a compacted topic StartCurrentEpoch
	// when no backfill runs (StartBeginning while one does); else StartNow.
	StartDefault Start = iota
	// StartNow starts after the records present when the group is created.
	StartNow
	// StartBeginning starts at the first record of every partition, in every epoch (gated).
	StartBeginning
	// StartCurrentEpoch reads the current epoch alone: its first record in every partition on,
	// no gates, and every backfilled copy in it delivered (every key's latest record once the
	// backfill has ended).
	StartCurrentEpoch
)

// String returns the start's name, as the CLI spells it (--from).
func (s Start) String() string {
	switch s {
	case StartDefault:
		return "default"
	case StartNow:
		return "now"
	case StartBeginning:
		return "beginning"
	case StartCurrentEpoch:
		return "current-epoch"
	}
	return "Start(" + strconv.Itoa(int(s)) + ")"
}

// ParseStart parses "now", "beginning", "current-epoch" or "default".
func ParseStart(s string) (Start, error) {
	for _, v := range []Start{StartDefault, StartNow, StartBeginning, StartCurrentEpoch} {
		if v.String() == s {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: start %q: give now, beginning or current-epoch", wire.ErrBadRequest, s)
}

// Misplacement says why a stored record is not in its key's partition (spec/protocol.md §6.8).
// Only a producer that bypasses the partitioner (a bug, or a hostile client with a producer
// credential) can store one: pctl's producers and the produce service never do.
type Misplacement struct {
	// Expected is the partition the epoch's partitioner gives the key, or -1 when the record
	// has no usable key or epoch (Reason says which).
	Expected int
	Reason   string
}

// MisplacedPolicy is what a member does with a misplaced record.
type MisplacedPolicy int

const (
	// MisplacedStop (the default) stops the member before the record: Run returns a
	// *MisplacedError (errors.Is(err, ErrMisplaced)). Nothing after it in that partition is
	// delivered until the group is run with another policy.
	MisplacedStop MisplacedPolicy = iota
	// MisplacedDeliver delivers the record with Message.Misplaced set, in its stream's order;
	// it is neither gated nor counted in key-level callbacks.
	MisplacedDeliver
	// MisplacedSkip does not deliver the record; the group's position moves past it.
	MisplacedSkip
)

// String returns the policy's name, as the CLI spells it.
func (p MisplacedPolicy) String() string {
	switch p {
	case MisplacedStop:
		return "stop"
	case MisplacedDeliver:
		return "deliver"
	case MisplacedSkip:
		return "skip"
	}
	return "MisplacedPolicy(" + strconv.Itoa(int(p)) + ")"
}

// ParseMisplacedPolicy parses "stop", "deliver" or "skip".
func ParseMisplacedPolicy(s string) (MisplacedPolicy, error) {
	for _, p := range []MisplacedPolicy{MisplacedStop, MisplacedDeliver, MisplacedSkip} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: misplaced-record policy %q: give stop, deliver or skip", wire.ErrBadRequest, s)
}

// ErrMisplaced is matched (errors.Is) by the error of a member stopped by a misplaced record.
var ErrMisplaced = errors.New("misplaced record")

// MisplacedError is returned by Run when a misplaced record stopped the member (MisplacedStop).
type MisplacedError struct {
	Topic     string
	Partition int
	Seq       uint64 // the record's stream sequence
	Epoch     int
	Key       []byte
	Misplacement
}

func (e *MisplacedError) Error() string {
	return fmt.Sprintf("misplaced record in topic %s partition %d at sequence %d (epoch %d, key %q): %s. "+
		"A producer bypassed the partitioner; the group stopped before this record. To go on, consume with the deliver (flagged) or skip policy (pctl consume --misplaced deliver|skip)",
		e.Topic, e.Partition, e.Seq, e.Epoch, e.Key, e.Reason)
}

// Unwrap makes errors.Is(err, ErrMisplaced) hold.
func (e *MisplacedError) Unwrap() error { return ErrMisplaced }

// KeyChange describes keys that move between partitions at an epoch change (KIP-253's key-level
// rebalance listener). Moved tells, for any key, whether it is one of them.
type KeyChange struct {
	Topic     string
	FromEpoch int // the epoch the keys leave
	ToEpoch   int // the epoch they arrive in
	// Partition is the partition whose keys leave (OnKeysRevoked) or arrive (OnKeysAssigned).
	Partition int
	// Parent is, for OnKeysAssigned, the old partition the keys come from.
	Parent int
	// Moved reports whether a key is one of the moving keys.
	Moved func(key []byte) bool
}

// ConsumerOptions configures a consumer-group member. Zero values mean defaults.
type ConsumerOptions struct {
	// Group names the consumer group (required): [A-Za-z0-9_-]{1,64}.
	Group string
	// Member identifies this member in the group. Default: random.
	Member string
	// Assignor is the rule that maps the group's partitions to its members (spec/protocol.md
	// §6.1, §6.2): wire.AssignorModulo or wire.AssignorSticky. A group gets it when it is created
	// and keeps it; "" means the group's (modulo for a group this member creates). A member that
	// asks for another assignor than an existing group's is refused with wire.ErrConflict; a
	// group whose assignor this client does not know, with wire.ErrUnsupported.
	Assignor string
	// FromBeginning: a group that does not exist yet starts at the first record of every
	// partition; otherwise it starts after the records present when it is created. Partitions
	// created later (epoch changes) are always read from their first record.
	FromBeginning bool
	// Start says where a group that does not exist yet starts (default: StartDefault). It
	// overrides FromBeginning when set.
	Start Start
	// Heartbeat is how often the member announces itself and rebalances. Default 1s.
	Heartbeat time.Duration
	// SessionTimeout: a member silent for this long is gone, and its partitions' leases expire.
	// Default 6s.
	SessionTimeout time.Duration
	// CommitInterval is how often delivered positions are committed. Default 200ms. A member that
	// crashes redelivers at most what it delivered since its last commit (in order).
	CommitInterval time.Duration
	// Testing holds hooks for this module's own tests and benchmarks (internal/testhook: the
	// benchmark baseline without the epoch gate); nil everywhere else.
	Testing *testhook.Consumer
	// Misplaced is what the member does with a record stored in a partition its key does not
	// map to under its epoch's partitioner (or with a key header it cannot decode). Default
	// MisplacedStop; see RATIONALE.md for why.
	Misplaced MisplacedPolicy
	// OnMisplaced, if set, runs for every misplaced record the member reads, before the policy
	// applies (so also for skipped ones and the one that stops the member).
	OnMisplaced func(m *Message)

	// OnAssigned and OnRevoked run when the member gains or gives up partitions.
	OnAssigned func(partitions []int)
	OnRevoked  func(partitions []int)
	// OnKeysRevoked runs on the member that owns an old partition, after it delivered all the
	// partition's records of the ended epoch and before the group can deliver any moved key's
	// new-epoch record. OnKeysAssigned runs on the member that owns a new partition before it
	// delivers the first record of a key that moved to it from Parent.
	OnKeysRevoked  func(KeyChange)
	OnKeysAssigned func(KeyChange)
	// WarmUp, if set, makes the member warm up before it joins (spec/protocol.md §6.10): as a
	// standby that takes no partition, it builds the state of the keys it will own and joins
	// when its lag is under WarmUp.MaxLag; at most WarmUp.MaxConcurrent members warm at once.
	// The cut-over is an ordinary rebalance: State's Flush and Load run at it as always.
	WarmUp *WarmUp
	// State, if set, hands per-key state over between members (state.go): a key's state is
	// loaded before the member delivers the key's first record (after its epoch gate), and
	// flushed before another member can deliver one (before the partition's release, and after
	// OnKeysRevoked for keys that leave). See StateHandler.
	State StateHandler
	// Logf receives the member's decisions (acquire, release, lease lost). Default: none.
	Logf func(format string, args ...any)
	// Hooks observe the member (hooks.go): records consumed, gate waits, lease changes.
	// Default: none.
	Hooks []Hook

	// keepDrained is a test hook: the member keeps its drained-epochs cache across a reset
	// (Pulsar's bug), to show that the order checks catch it.
	keepDrained bool
	// testOpenDelay is a test hook: every reader after a worker's first is opened this much
	// later (a server so loaded that making a consumer takes this long).
	testOpenDelay time.Duration
	// testLoseAnswer is a test hook: called after each stored commit of a partition's state;
	// true makes the worker take it as unanswered (stored, its answer lost on the way).
	testLoseAnswer func() bool
	// testCoSkew is a test hook: a co-partitioned follower's leader rotates the owners it
	// derives by this much (a wrong assignment, for the control that shows the checks catch it).
	testCoSkew int
	// testCoIndependent is a test hook: a co-partitioned follower computes its own sticky
	// record (two unrelated sticky groups).
	testCoIndependent bool
}

// Handler processes one record. Returning nil acknowledges it; an error stops the member (the
// record is redelivered to the group later). Handlers run concurrently for different partitions,
// sequentially within one.
type Handler func(ctx context.Context, m *Message) error

// Consumer is a member of a consumer group on one topic.
type Consumer struct {
	c       *Client
	topic   string
	topicID string // the topic's id: fixed for the consumer's life (a re-created topic is another)
	opts    ConsumerOptions

	mu        sync.Mutex
	cond      *sync.Cond
	desc      *wire.Topic
	positions map[int]uint64 // committed positions of the whole group (from the KV watch)
	owned     map[int]*worker
	revoked   map[[2]int]bool // (partition, epoch) whose keys-revoked step ran here
	drained   int             // cache of drainedThrough
	kvh       jetstream.KeyValue
	assigned  map[[3]int]bool // (partition, epoch, parent) whose keys-assigned step ran here
	// The positions watch must show our own commits: commitRev is the newest revision we wrote
	// (at commitAt), seenRev the newest the watch brought.
	commitRev uint64
	commitAt  time.Time
	seenRev   uint64

	// Group generations (spec/protocol.md §6.6). positions holds effective positions at gen;
	// states the newest (generation, position) seen of every partition key.
	gen       uint64
	reset     *wire.ResetState // the reset that made gen (nil at 0)
	pending   *wire.ResetState // a newer reset seen and not applied yet: nothing is delivered
	resetKick chan struct{}
	seeking   int // Seek calls in progress: nothing is delivered
	states    map[int]keyState
	// startEpoch is the epoch a group that reads the current epoch alone started at (its
	// g.start key, spec/protocol.md §10.5); 0 for other groups.
	startEpoch int

	// The group's assignor (§6.1) and, for sticky groups, the last assignment record read or
	// written (§6.2.1) with its revision.
	assignor  string
	record    *wire.Assignment
	recordRev uint64
	lastView  []string // the live members at the previous rebalance
	// co is set on a member of a co-partitioned group (copartition.go, spec/protocol.md §6.2.3).
	co *coGroup

	// State handovers (state.go): stateMu serialises them; home maps every key whose state this
	// member holds to the partition it holds it for (under mu). fail stops Run with an error.
	stateMu sync.Mutex
	home    map[string]int
	fail    func(error)

	stats ConsumerStats
	warm  WarmUpStats
}

// ConsumerStats counts what a member did.
type ConsumerStats struct {
	Delivered int64
	Gated     int64         // records that waited for a parent partition
	MaxWait   time.Duration // longest such wait
	TotalWait time.Duration
	// ReaderRestarts counts partition readers replaced because they handed nothing over while
	// their stream held records past the member's position; WatchRestarts counts re-made watches
	// of the group's positions (after a reconnect, or when the watch fell behind).
	ReaderRestarts int64
	WatchRestarts  int64
	// Misplaced counts misplaced records read (whatever the policy did with them).
	Misplaced int64
	// Resets counts group generations this member followed (spec/protocol.md §6.6).
	Resets int64
	// Assignments counts the sticky assignment records this member wrote as the group's
	// leader; Moved and MovedModulo are the last one's fractions of keys that changed member,
	// and what modulo would have moved (spec/protocol.md §6.2.2), -1 when none was written.
	Assignments int64
	Moved       float64
	MovedModulo float64
}

// keyState is what a member knows of a partition key: the revision it saw, and what was
// written there.
type keyState struct {
	rev, gen, pos uint64
	owner         string
	leaseEnd      int64 // unix milliseconds
}

// NewConsumer prepares a member of a group; Run starts it.
func (c *Client) NewConsumer(ctx context.Context, topic string, opts ConsumerOptions) (*Consumer, error) {
	if err := wire.ValidGroup(opts.Group); err != nil {
		return nil, fmt.Errorf("consumer group: %w", err)
	}
	if opts.Member == "" {
		opts.Member = nuid.Next()
	}
	if err := wire.ValidGroup(opts.Member); err != nil {
		return nil, fmt.Errorf("member id: %w", err)
	}
	if opts.State != nil && opts.Testing.Ungated() {
		return nil, fmt.Errorf("%w: a state handler needs the epoch gate (a key's state is loaded after it): drop testhook.Consumer.DisableGating", wire.ErrBadRequest)
	}
	if opts.Assignor == AssignorCopartitioned {
		return nil, fmt.Errorf("%w: assignor %q is for a group over several topics: use Client.NewCoConsumer", wire.ErrBadRequest, opts.Assignor)
	}
	if opts.Assignor != "" && !knownAssignor(opts.Assignor) {
		return nil, fmt.Errorf("%w: assignor %q: give %q or %q", wire.ErrBadRequest, opts.Assignor, wire.AssignorModulo, wire.AssignorSticky)
	}
	if opts.WarmUp != nil && opts.WarmUp.Warm == nil && opts.WarmUp.WarmTopics == nil {
		return nil, fmt.Errorf("%w: WarmUp needs a Warm or WarmTopics function (it builds the state of the partitions the member will own)", wire.ErrBadRequest)
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = time.Second
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 6 * time.Second
	}
	if opts.CommitInterval <= 0 {
		opts.CommitInterval = 200 * time.Millisecond
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	t, _, err := c.Topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	cn := &Consumer{c: c, topic: topic, topicID: t.ID, opts: opts, desc: t, positions: map[int]uint64{}, owned: map[int]*worker{},
		revoked: map[[2]int]bool{}, assigned: map[[3]int]bool{}, states: map[int]keyState{}, resetKick: make(chan struct{}, 1)}
	cn.cond = sync.NewCond(&cn.mu)
	cn.stats.Moved, cn.stats.MovedModulo = -1, -1
	cn.home = map[string]int{}
	if opts.State != nil {
		// The state handover runs after the application's keys-revoked callback (which may still
		// write the state).
		userRevoked := opts.OnKeysRevoked
		cn.opts.OnKeysRevoked = func(kc KeyChange) {
			if userRevoked != nil {
				userRevoked(kc)
			}
			cn.stateKeysRevoked(context.Background(), kc)
		}
	}
	return cn, nil
}

// knownAssignor reports whether this client implements an assignor (spec/protocol.md §6.1).
func knownAssignor(a string) bool {
	return a == wire.AssignorModulo || a == wire.AssignorSticky || a == AssignorCopartitioned
}

// Assignor returns the group's assignor, known once Run has joined the group.
func (cn *Consumer) Assignor() string {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.assignor
}

// op bounds one round trip to the broker: a request lost while the broker restarts must not
// hang the member.
func (cn *Consumer) op(ctx context.Context) (context.Context, context.CancelFunc) {
	d := cn.opts.SessionTimeout
	if d < 2*time.Second {
		d = 2 * time.Second
	}
	return context.WithTimeout(ctx, d)
}

// Stats returns the member's counters.
func (cn *Consumer) Stats() ConsumerStats {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	s := cn.stats
	return s
}

// Member returns the member id.
func (cn *Consumer) Member() string { return cn.opts.Member }

func (cn *Consumer) kv(ctx context.Context) (jetstream.KeyValue, error) {
	cn.mu.Lock()
	kv := cn.kvh
	cn.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	ctx, cancel := cn.op(ctx)
	defer cancel()
	kv, err := cn.c.js.KeyValue(ctx, wire.GroupsBucket)
	if err == nil {
		cn.mu.Lock()
		cn.kvh = kv
		cn.mu.Unlock()
	}
	if err != nil {
		if IsPermission(err) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: consumer-group state: %v (consuming needs the consumer or admin role)", wire.ErrUnavailable, err)
	}
	return kv, nil
}

// Run makes the member take part in the group until ctx is done or the handler fails. On a clean
// stop it commits what it delivered and hands its partitions back.
func (cn *Consumer) Run(ctx context.Context, h Handler) error {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A refusal of one of this member's subjects (its group's state, its topic's readers) is
	// final: the credentials do not allow this topic or group (spec/protocol.md §8).
	var running atomic.Bool
	running.Store(true)
	defer running.Store(false)
	var refusedMu sync.Mutex
	var refused error
	defer cn.c.onViolation(func(subject string) {
		if !running.Load() || !cn.ownSubject(subject) {
			return
		}
		refusedMu.Lock()
		if refused == nil {
			refused = fmt.Errorf("%w: these credentials may not use %s: consuming topic %s as group %s needs the consumer or admin role, or a consumer credential for this topic and group (pctl creds issue)",
				wire.ErrPermission, subject, cn.topic, cn.opts.Group)
		}
		err := refused
		refusedMu.Unlock()
		cancel(err)
	})()
	refusal := func(err error) error {
		refusedMu.Lock()
		defer refusedMu.Unlock()
		if refused != nil {
			return refused
		}
		return err
	}
	// Joining: the group's bucket, the group's keys, the descriptor read after them (spec/
	// protocol.md §10.4: a retirement that did not see this group is shown in it) and the group's
	// generation (§6.6) before the first assignment; the watch brings later resets. A cluster in
	// the middle of an election answers "no response from stream" or times out for a while: that
	// is retried with a backoff (logged) as long as ctx lasts, like every later step of a member;
	// anything else (a refusal, a broken group key) ends Run.
	var kv jetstream.KeyValue
	for backoff := time.Duration(0); ; {
		var err error
		if kv, err = cn.join(runCtx); err == nil {
			break
		} else if !errors.Is(err, wire.ErrUnavailable) || runCtx.Err() != nil {
			return refusal(err)
		} else {
			backoff = min(max(2*backoff, 250*time.Millisecond), 5*time.Second)
			cn.opts.Logf("member %s: joining group %s: %v; again in %v", cn.opts.Member, cn.opts.Group, err, backoff)
			select {
			case <-runCtx.Done():
				return refusal(context.Cause(runCtx))
			case <-time.After(backoff):
			}
		}
	}

	// Watch the group's committed positions (gates wait on them), and the readers.
	go cn.watchPositions(runCtx, kv)
	go cn.watchdog(runCtx)
	// Topic changes (epoch activations) refresh the descriptor at once.
	// Events are hints: one refresh at a time (events meanwhile make one more), and none for
	// what JetStream relays (a consumer may point a push consumer at the events subject,
	// spec/protocol.md §8.6).
	var pending atomic.Int32 // 0 idle, 1 refreshing, 2 refreshing and another one wanted
	sub, err := cn.c.nc.Subscribe(wire.TopicEventSubject(cn.topic), func(m *nats.Msg) {
		if strings.HasPrefix(m.Reply, "$JS.") {
			return
		}
		if pending.Add(1) > 1 {
			pending.Store(2)
			return
		}
		go func() {
			for {
				cn.refresh(runCtx)
				if pending.CompareAndSwap(1, 0) || runCtx.Err() != nil {
					return
				}
				pending.Store(1)
			}
		}()
	})
	if err == nil {
		defer sub.Unsubscribe()
	}

	// A member that warms up first does so as a standby (spec/protocol.md §6.10): no member
	// key, no partition, until its state is within the lag threshold.
	if cn.opts.WarmUp != nil {
		if cn.co != nil && cn.co.index > 0 {
			// A co-partitioned member warms once, in its lead topic's group (§6.10, step 3).
			select {
			case <-cn.co.warmed:
			case <-runCtx.Done():
				return refusal(nil)
			}
		} else if err := cn.warmUp(runCtx, kv); err != nil {
			if runCtx.Err() != nil {
				return refusal(nil)
			}
			return refusal(err)
		} else if cn.co != nil {
			cn.co.warmOnce.Do(func() { close(cn.co.warmed) })
		}
	}

	var werr error
	var werrMu sync.Mutex
	fail := func(err error) {
		werrMu.Lock()
		if werr == nil {
			werr = err
		}
		werrMu.Unlock()
		cancel(err)
	}
	cn.mu.Lock()
	cn.fail = fail
	cn.mu.Unlock()
	// Commits and lease renewals run on their own clock, so that a slow rebalance (listing
	// members, refreshing the descriptor) never lets a lease lapse.
	commitDone := make(chan struct{})
	go func() {
		defer close(commitDone)
		t := time.NewTicker(cn.opts.CommitInterval)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				cn.commitAll(runCtx, kv, false)
			}
		}
	}()
	ticker := time.NewTicker(cn.opts.Heartbeat)
	defer ticker.Stop()
	for {
		if err := cn.heartbeat(runCtx, kv); err != nil && runCtx.Err() == nil {
			fail(err)
		}
		if runCtx.Err() == nil {
			cn.refresh(runCtx)
			cn.applyReset(runCtx, kv)
			cn.rebalance(runCtx, kv, h, fail)
		}
		select {
		case <-cn.resetKick:
		case <-runCtx.Done():
			<-commitDone
			cn.shutdown(kv)
			werrMu.Lock()
			defer werrMu.Unlock()
			if werr == nil {
				return refusal(nil)
			}
			return werr
		case <-ticker.C:
		}
	}
}

// ownSubject reports whether a subject is one this member uses for its group or its topic's
// partitions (so that a refusal of it concerns this member).
func (cn *Consumer) ownSubject(subject string) bool {
	group := wire.GroupsBucket + "." + wire.GroupPrefix(cn.topicID, cn.opts.Group)
	return strings.Contains(subject, group) ||
		strings.HasPrefix(subject, "$JS.API.CONSUMER.CREATE."+wire.StreamPrefix+cn.topic+"_") ||
		strings.HasPrefix(subject, "$JS.API.STREAM.INFO."+wire.StreamPrefix+cn.topic+"_") ||
		subject == "$JS.API.STREAM.INFO.KV_"+wire.GroupsBucket
}

// watchPositions keeps the group's committed positions (cn.positions) up to date from a KV watch
// on the group's partition keys. The watch is made again after every reconnect and whenever it
// falls behind the member's own commits (a watch is a server-side consumer too, and can be lost
// like a reader); meanwhile a waiting gate also reads the positions it needs directly.
func (cn *Consumer) watchPositions(ctx context.Context, kv jetstream.KeyValue) {
	status := cn.c.nc.StatusChanged(nats.CONNECTED)
	defer cn.c.nc.RemoveStatusListener(status)
	var backoff time.Duration
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			cn.mu.Lock()
			cn.stats.WatchRestarts++
			cn.mu.Unlock()
		}
		// The whole group: partition keys (positions) and g.reset (generations). Member keys come
		// too and are ignored. (One filter: a consumer credential allows exactly this one, §8.2.)
		w, err := kv.Watch(ctx, wire.GroupPrefix(cn.topicID, cn.opts.Group)+">")
		if err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		cn.followWatch(ctx, w, status)
		_ = w.Stop()
	}
}

// followWatch applies the watch's entries until the context ends, the connection reconnects, the
// watch ends or it falls behind.
func (cn *Consumer) followWatch(ctx context.Context, w jetstream.KeyWatcher, reconnected <-chan nats.Status) {
	check := time.NewTicker(readerStall / 2)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reconnected:
			cn.opts.Logf("member %s: reconnected; watching the group's positions again", cn.opts.Member)
			return
		case <-check.C:
			cn.mu.Lock()
			behind := cn.commitRev > cn.seenRev && time.Since(cn.commitAt) > readerStall
			cn.mu.Unlock()
			if behind {
				cn.opts.Logf("member %s: the positions watch missed our own commit; watching again", cn.opts.Member)
				return
			}
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				cn.applyEntry(e)
			}
		}
	}
}

// applyEntry takes a committed position, or a reset, from the group's state.
func (cn *Consumer) applyEntry(e jetstream.KeyValueEntry) {
	prefix := wire.GroupPrefix(cn.topicID, cn.opts.Group)
	name, ok := strings.CutPrefix(e.Key(), prefix)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if e.Revision() > cn.seenRev {
		cn.seenRev = e.Revision()
	}
	if !ok || e.Operation() != jetstream.KeyValuePut {
		return
	}
	if name == "g.reset" {
		var st wire.ResetState
		if json.Unmarshal(e.Value(), &st) == nil {
			cn.noteResetLocked(&st)
		}
		return
	}
	qs, ok := strings.CutPrefix(name, "p.")
	q, err := strconv.Atoi(qs)
	if !ok || err != nil || q < 0 {
		return
	}
	var ps wire.PartitionState
	if json.Unmarshal(e.Value(), &ps) == nil {
		cn.noteStateLocked(q, e.Revision(), ps)
	}
}

// noteStateLocked records partition key q as written at revision rev and updates q's effective
// position. Only a newer revision counts.
func (cn *Consumer) noteStateLocked(q int, rev uint64, ps wire.PartitionState) {
	if cur, ok := cn.states[q]; ok && rev <= cur.rev {
		return
	}
	cn.states[q] = keyState{rev: rev, gen: ps.Generation, pos: ps.Position, owner: ps.Owner, leaseEnd: ps.LeaseEnd}
	if ps.Generation > cn.gen {
		return // a reset we have not applied yet: keep what we knew until we do
	}
	if e := cn.effectiveLocked(q); e != cn.positions[q] {
		cn.positions[q] = e
		cn.cond.Broadcast()
	}
}

// effectiveLocked is partition q's effective position at the member's generation
// (spec/protocol.md §6.6): its key's position when the key was written at this generation, else
// the reset's position for q (0 at generation 0, or for a stream the reset did not know).
func (cn *Consumer) effectiveLocked(q int) uint64 {
	st, ok := cn.states[q]
	if ok && st.gen == cn.gen {
		return st.pos
	}
	if ok && st.gen > cn.gen {
		return cn.positions[q]
	}
	if cn.reset != nil && q < len(cn.reset.Positions) {
		return cn.reset.Positions[q]
	}
	return 0
}

// noteResetLocked takes a reset seen in the group's state: a newer generation stops every
// delivery at once (nothing is delivered while one is pending) and is applied by Run's loop.
func (cn *Consumer) noteResetLocked(st *wire.ResetState) {
	if st.Generation <= cn.gen || (cn.pending != nil && st.Generation <= cn.pending.Generation) {
		return
	}
	cn.pending = st
	cn.cond.Broadcast()
	select {
	case cn.resetKick <- struct{}{}:
	default:
	}
}

// readReset reads the group's reset key (a newer generation becomes pending).
func (cn *Consumer) readReset(ctx context.Context, kv jetstream.KeyValue) error {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	e, err := kv.Get(ctx, wire.ResetKey(cn.topicID, cn.opts.Group))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		if IsPermission(err) {
			return err
		}
		return fmt.Errorf("%w: consumer group %s: read its reset: %v", wire.ErrUnavailable, cn.opts.Group, err)
	}
	var st wire.ResetState
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return fmt.Errorf("%w: consumer group %s: its reset key holds %.80q, not a reset", wire.ErrInternal, cn.opts.Group, e.Value())
	}
	cn.mu.Lock()
	cn.noteResetLocked(&st)
	cn.mu.Unlock()
	return nil
}

// applyReset follows a pending reset (spec/protocol.md §6.6, members): every partition stops
// (a record in hand finishes), the partitions-revoked callback runs, what the member derived
// from older positions (drained epochs, passed boundaries, keys-assigned steps) is forgotten,
// and each partition key it owned is moved to the reset's position without owner. Run's loop
// then rebalances under the new generation.
func (cn *Consumer) applyReset(ctx context.Context, kv jetstream.KeyValue) {
	cn.mu.Lock()
	st := cn.pending
	if st == nil {
		cn.mu.Unlock()
		return
	}
	ws := make([]*worker, 0, len(cn.owned))
	for _, w := range cn.owned {
		ws = append(ws, w)
	}
	cn.mu.Unlock()
	parallel(ws, func(w *worker) { w.stop() })
	var owned []int
	for _, w := range ws {
		if !w.lost() {
			owned = append(owned, w.partition)
		}
	}
	sort.Ints(owned)
	if err := cn.stateFlushAll(ctx, append([]int(nil), owned...)); err != nil {
		cn.failState(err)
	}
	cn.mu.Lock()
	cn.home = map[string]int{} // lost partitions' keys too: every key is loaded again after a reset
	cn.mu.Unlock()
	if len(owned) > 0 && cn.opts.OnRevoked != nil {
		cn.opts.OnRevoked(owned)
	}
	cn.mu.Lock()
	st = cn.pending // the newest one seen meanwhile
	cn.pending = nil
	cn.gen, cn.reset = st.Generation, st
	cn.stats.Resets++
	if !cn.opts.keepDrained {
		cn.drained = 0
	}
	cn.revoked = map[[2]int]bool{}
	cn.assigned = map[[3]int]bool{}
	for q := range cn.positions {
		delete(cn.positions, q)
	}
	for q := range cn.states {
		cn.positions[q] = cn.effectiveLocked(q)
	}
	for q := range st.Positions {
		cn.positions[q] = cn.effectiveLocked(q)
	}
	cn.owned = map[int]*worker{}
	cn.cond.Broadcast()
	cn.mu.Unlock()
	cn.opts.Logf("member %s: group %s: generation %d (reset to %s by %s)", cn.opts.Member, cn.opts.Group, st.Generation, st.To, st.By)
	parallel(ws, func(w *worker) {
		if w.lost() {
			return
		}
		w.mu.Lock()
		rev := w.rev
		w.mu.Unlock()
		var pos uint64
		if w.partition < len(st.Positions) {
			pos = st.Positions[w.partition]
		}
		octx, cancel := cn.op(ctx)
		defer cancel()
		if err := moveKey(octx, kv, wire.PartitionKey(cn.topicID, cn.opts.Group, w.partition), st.Generation, pos, rev); err != nil {
			cn.opts.Logf("member %s: partition %d: move to generation %d: %v (the next owner does it)", cn.opts.Member, w.partition, st.Generation, err)
		}
	})
}

// noteCommit records a revision this member wrote to the group's state.
func (cn *Consumer) noteCommit(rev uint64) {
	cn.mu.Lock()
	if rev > cn.commitRev {
		cn.commitRev, cn.commitAt = rev, time.Now()
	}
	cn.mu.Unlock()
}

// watchdog replaces partition readers that stopped handing records over although their stream
// holds records past the member's position, whatever the cause (a pull request lost with a node,
// a consumer deleted, a connection that froze): a member that owns a partition reads its new
// records within about readerStall plus the time to create a consumer.
//
// A kick names the reader it was meant for, and is taken only while the worker still waits for
// that reader at the position and since the moment the watchdog saw: the check reads the streams
// over the network, and meanwhile the worker may have opened a new reader, or received a record.
// The time a worker spends opening a reader is not the reader's silence (an open that fails is
// logged and retried by the worker itself). Before both rules, under heavy load (a consumer
// create taking longer than readerStall) a kick sent while the worker opened the next reader
// killed that reader at once, and so on for ever at one position (issue 10: "the watchdog's
// restart does not help"). A reader replaced again at the same position gets twice as long
// before the next check (up to readerStallMax): on a server that slow, every new reader needs
// more than readerStall for its first record.
func (cn *Consumer) watchdog(ctx context.Context) {
	t := time.NewTicker(readerStall / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cn.mu.Lock()
		var stalled []*worker
		var seen []readerStallSeen
		for _, w := range cn.owned {
			if s, ok := w.stalled(); ok {
				stalled = append(stalled, w)
				seen = append(seen, s)
			}
		}
		cn.mu.Unlock()
		if len(stalled) == 0 {
			continue
		}
		last := cn.lastSequences(ctx, stalled)
		for i, w := range stalled {
			s := seen[i]
			l, ok := last[w.partition]
			if !ok || l <= s.pos {
				continue
			}
			again, ok := w.kickIf(s)
			if !ok {
				continue // it received something, or has another reader, meanwhile
			}
			if again == 1 {
				cn.opts.Logf("member %s: partition %d: the reader handed nothing over for %v while the stream holds records up to %d past position %d; reading again",
					cn.opts.Member, w.partition, s.waited.Round(time.Millisecond), l, s.pos)
				continue
			}
			cn.opts.Logf("member %s: partition %d: the reader handed nothing over for %v while the stream holds records up to %d past position %d; reading again (the %s reader at this position: %s; the next one gets %v)",
				cn.opts.Member, w.partition, s.waited.Round(time.Millisecond), l, s.pos, ordinal(again), cn.readerReport(ctx, s.cons, s.pos), stallLimit(again+1))
		}
	}
}

// readerStallSeen is what the watchdog saw of a silent reader: which one (n, and its consumer),
// waited for since when and how long, at which position, after how many replacements there.
type readerStallSeen struct {
	n      uint64
	cons   jetstream.Consumer
	since  time.Time
	waited time.Duration
	pos    uint64
}

// readerStallMax caps the silence a reader is allowed after replacements at one position.
const readerStallMax = 32 * time.Second

// stallLimit is how long the reader made after restarts replacements at one position may stay
// silent: readerStall, doubled for each replacement after the first.
func stallLimit(restarts int) time.Duration {
	d := readerStall
	for i := 1; i < restarts && d < readerStallMax; i++ {
		d *= 2
	}
	return min(d, readerStallMax)
}

func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return strconv.Itoa(n) + "th"
	case n%10 == 1:
		return strconv.Itoa(n) + "st"
	case n%10 == 2:
		return strconv.Itoa(n) + "nd"
	case n%10 == 3:
		return strconv.Itoa(n) + "rd"
	}
	return strconv.Itoa(n) + "th"
}

// readerReport says, for the log, what the server says of a silent reader's consumer: where it
// runs, what it delivered, what it has pending and how many pull requests wait, so that a
// position that repeats says why.
func (cn *Consumer) readerReport(ctx context.Context, cons jetstream.Consumer, pos uint64) string {
	if cons == nil {
		return "no consumer to ask"
	}
	ctx, cancel := cn.op(ctx)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Sprintf("its consumer does not answer (%v)", err)
	}
	on := ""
	if info.Cluster != nil && info.Cluster.Leader != "" {
		on = " on " + info.Cluster.Leader
	}
	var why string
	switch {
	case info.NumPending == 0:
		why = "the node it runs on has no record past the position for it (a lagging replica, or records deleted or outside its filter)"
	case info.NumWaiting == 0:
		why = "no pull request waits (lost)"
	default:
		why = "records pending and pull requests waiting: the server does not deliver (too slow, or paused)"
	}
	return fmt.Sprintf("its consumer %s%s starts at %d, delivered up to stream sequence %d, has %d pending and %d pull requests waiting: %s",
		info.Name, on, info.Config.OptStartSeq, info.Delivered.Stream, info.NumPending, info.NumWaiting, why)
}

// lastSequences returns the last stream sequence of the given workers' partitions (those it could
// read): one stream list request for the topic, or one info request per stream if listing fails.
func (cn *Consumer) lastSequences(ctx context.Context, ws []*worker) map[int]uint64 {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	out := map[int]uint64{}
	prefix := wire.StreamPrefix + cn.topic + "_"
	lister := cn.c.js.ListStreams(ctx, jetstream.WithStreamListSubject(wire.DataPrefix+"."+cn.topic+".>"))
	for info := range lister.Info() {
		if q, err := strconv.Atoi(strings.TrimPrefix(info.Config.Name, prefix)); err == nil && strings.HasPrefix(info.Config.Name, prefix) && info.State.Msgs > 0 {
			out[q] = info.State.LastSeq
		}
	}
	if lister.Err() == nil {
		return out
	}
	for _, w := range ws {
		s, err := cn.c.js.Stream(ctx, wire.StreamName(cn.topic, w.partition))
		if err == nil && s.CachedInfo().State.Msgs > 0 {
			out[w.partition] = s.CachedInfo().State.LastSeq
		}
	}
	return out
}

// join opens the group's bucket, creates the group's keys if it is new, reads the descriptor
// and the group's generation: what a member does before its first assignment. Each step is
// idempotent, so a join that failed half-way is simply done again.
func (cn *Consumer) join(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := cn.kv(ctx)
	if err != nil {
		return nil, err
	}
	if err := cn.ensureGroup(ctx, kv); err != nil {
		return nil, err
	}
	cn.refresh(ctx)
	if err := cn.readReset(ctx, kv); err != nil {
		return nil, err
	}
	return kv, nil
}

// ensureGroup creates the group's state on first use: every existing partition's starting
// position (its last sequence, 0 from the beginning, the start of the current epoch), then the
// group marker. Whoever comes first wins each key; a partition created later has no state and is
// read from its first record. It reads the group's g.start (spec/protocol.md §10.5).
func (cn *Consumer) ensureGroup(ctx context.Context, kv jetstream.KeyValue) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	marker := wire.GroupPrefix(cn.topicID, cn.opts.Group) + "g.created"
	if _, err := kv.Get(ctx, marker); err == nil {
		if err := cn.readStart(ctx, kv); err != nil {
			return err
		}
		return cn.joinAssignor(ctx, kv)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		// Not "no such group": the state could not be read (a leader election, a timeout).
		// Creating the group now could start it at the wrong place; the join is retried.
		if IsPermission(err) {
			return err
		}
		return fmt.Errorf("%w: consumer group %s: read its marker: %v", wire.ErrUnavailable, cn.opts.Group, err)
	}
	cn.mu.Lock()
	desc := cn.desc
	cn.mu.Unlock()
	start := cn.opts.Start
	if start == StartDefault {
		switch {
		case cn.opts.FromBeginning:
			start = StartBeginning
		case desc.Compact != nil && desc.Backfilling() == nil:
			start = StartCurrentEpoch
		case desc.Compact != nil:
			start = StartBeginning
		default:
			start = StartNow
		}
	}
	if start == StartCurrentEpoch {
		if bf := desc.Backfilling(); bf != nil {
			cn.opts.Logf("member %s: group %s starts at the current epoch %d while its backfill runs: keys not yet copied arrive as their copies do", cn.opts.Member, cn.opts.Group, bf.Epoch)
		}
		body, _ := json.Marshal(wire.GroupStart{From: "current-epoch", Epoch: desc.Current().Epoch})
		if _, err := kv.Create(ctx, wire.StartKey(cn.topicID, cn.opts.Group), body); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: create group %s: %v", wire.ErrUnavailable, cn.opts.Group, err)
		}
	}
	for q := 0; q < desc.MaxPartitions(); q++ {
		var pos uint64
		switch start {
		case StartNow:
			s, err := cn.c.js.Stream(ctx, wire.StreamName(cn.topic, q))
			if err != nil {
				return fmt.Errorf("%w: partition %d: %v", wire.ErrUnavailable, q, err)
			}
			pos = s.CachedInfo().State.LastSeq
		case StartCurrentEpoch:
			pos = desc.CurrentEpochStart(q)
		}
		body, _ := json.Marshal(wire.PartitionState{Position: pos})
		if _, err := kv.Create(ctx, wire.PartitionKey(cn.topicID, cn.opts.Group, q), body); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: create group %s: %v", wire.ErrUnavailable, cn.opts.Group, err)
		}
	}
	want := cn.opts.Assignor
	if want == "" {
		want = wire.AssignorModulo
	}
	body, _ := json.Marshal(wire.AssignorState{Assignor: want})
	if cn.co != nil {
		body, _ = json.Marshal(coAssignorState{Assignor: AssignorCopartitioned, Topics: cn.co.topics})
	}
	if _, err := kv.Create(ctx, wire.AssignorKey(cn.topicID, cn.opts.Group), body); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%w: create group %s: %v", wire.ErrUnavailable, cn.opts.Group, err)
	}
	if _, err := kv.Create(ctx, marker, []byte(time.Now().UTC().Format(time.RFC3339))); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%w: create group %s: %v", wire.ErrUnavailable, cn.opts.Group, err)
	}
	if err := cn.readStart(ctx, kv); err != nil {
		return err
	}
	return cn.joinAssignor(ctx, kv)
}

// readStart reads the group's g.start key: the epoch it started reading the current epoch at.
func (cn *Consumer) readStart(ctx context.Context, kv jetstream.KeyValue) error {
	e, err := kv.Get(ctx, wire.StartKey(cn.topicID, cn.opts.Group))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		if IsPermission(err) {
			return err
		}
		return fmt.Errorf("%w: consumer group %s: read its start: %v", wire.ErrUnavailable, cn.opts.Group, err)
	}
	var st wire.GroupStart
	if json.Unmarshal(e.Value(), &st) != nil || st.Epoch < 1 {
		return fmt.Errorf("%w: consumer group %s: its start key holds %.80q", wire.ErrInternal, cn.opts.Group, e.Value())
	}
	cn.mu.Lock()
	cn.startEpoch = st.Epoch
	cn.mu.Unlock()
	return nil
}

// joinAssignor reads the group's assignor (spec/protocol.md §6.1) and refuses to join a group
// whose assignor this client does not implement, or that differs from the one asked for.
func (cn *Consumer) joinAssignor(ctx context.Context, kv jetstream.KeyValue) error {
	got := wire.AssignorModulo // a group without the key (older clients, other SDKs, resets)
	e, err := kv.Get(ctx, wire.AssignorKey(cn.topicID, cn.opts.Group))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		if IsPermission(err) {
			return err
		}
		return fmt.Errorf("%w: read the assignor of group %s: %v", wire.ErrUnavailable, cn.opts.Group, err)
	default:
		var st coAssignorState
		if json.Unmarshal(e.Value(), &st) != nil || st.Assignor == "" {
			return fmt.Errorf("%w: group %s of topic %s has an assignor record this client cannot read (%q): use a client that understands it, or another group",
				wire.ErrUnsupported, cn.opts.Group, cn.topic, e.Value())
		}
		got = st.Assignor
		if err := cn.coJoin(st); err != nil {
			return err
		}
	}
	if got != AssignorCopartitioned && cn.co != nil {
		return cn.coJoin(coAssignorState{Assignor: got})
	}
	if !knownAssignor(got) {
		return fmt.Errorf("%w: group %s of topic %s uses the assignor %q, which this client does not implement (it knows %s and %s): use a client that implements it, or another group",
			wire.ErrUnsupported, cn.opts.Group, cn.topic, got, wire.AssignorModulo, wire.AssignorSticky)
	}
	if cn.opts.Assignor != "" && cn.opts.Assignor != got {
		return fmt.Errorf("%w: group %s of topic %s uses the assignor %q, not the %q asked for: a group keeps the assignor it was created with; use another group, or leave Assignor empty to follow the group's",
			wire.ErrConflict, cn.opts.Group, cn.topic, got, cn.opts.Assignor)
	}
	cn.mu.Lock()
	cn.assignor = got
	cn.mu.Unlock()
	return nil
}

func (cn *Consumer) refresh(ctx context.Context) {
	t, _, err := cn.c.Topic(ctx, cn.topic)
	if err != nil {
		return
	}
	cn.mu.Lock()
	if t.ID == cn.topicID && len(t.Epochs) >= len(cn.desc.Epochs) {
		cn.desc = t
	}
	cn.cond.Broadcast()
	cn.mu.Unlock()
}

func (cn *Consumer) heartbeat(ctx context.Context, kv jetstream.KeyValue) error {
	cn.mu.Lock()
	owns := make([]int, 0, len(cn.owned))
	for q := range cn.owned {
		owns = append(owns, q)
	}
	gated, waited := cn.stats.Gated, cn.stats.TotalWait.Milliseconds() // shown by status pages
	cn.mu.Unlock()
	sort.Ints(owns)
	body, _ := json.Marshal(wire.MemberState{ID: cn.opts.Member, Heartbeat: time.Now().UTC(), Owns: owns, Gated: gated, GateWaitMS: waited})
	ctx, cancel := cn.op(ctx)
	defer cancel()
	if _, err := kv.Put(ctx, wire.MemberKey(cn.topicID, cn.opts.Group, cn.opts.Member), body); err != nil {
		if IsPermission(err) {
			return err
		}
		return nil // transient: the next heartbeat retries
	}
	return nil
}

// members returns the live members, sorted, and whether every member key could be read (a
// sticky leader records no assignment from a partial view, assign_group.go).
func (cn *Consumer) members(ctx context.Context, kv jetstream.KeyValue) ([]string, bool) {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	prefix := wire.GroupPrefix(cn.topicID, cn.opts.Group) + "m."
	lister, err := kv.ListKeysFiltered(ctx, prefix+"*")
	if err != nil {
		return []string{cn.opts.Member}, false
	}
	complete := true
	var out []string
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			complete = complete && errors.Is(err, jetstream.ErrKeyNotFound)
			continue
		}
		if time.Since(e.Created()) < cn.opts.SessionTimeout {
			out = append(out, k[len(prefix):])
		}
	}
	found := false
	for _, m := range out {
		found = found || m == cn.opts.Member
	}
	if !found {
		out = append(out, cn.opts.Member)
	}
	sort.Strings(out)
	return out, complete
}

// assignable returns the partitions the group must read: the current epoch's, plus partitions
// shrunk away that the group has not drained to their last boundary.
func (cn *Consumer) assignable() []int {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return proto.Assignable(cn.desc, cn.positionLocked)
}

// position is the group's position of partition q as the member knows it.
func (cn *Consumer) position(q int) uint64 {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.positions[q]
}

// positionLocked is the group's position of partition q as the member knows it (cn.mu held).
func (cn *Consumer) positionLocked(q int) uint64 { return cn.positions[q] }

func (cn *Consumer) rebalance(ctx context.Context, kv jetstream.KeyValue, h Handler, fail func(error)) {
	members, complete := cn.members(ctx, kv)
	want, err := cn.wanted(ctx, kv, members, complete, cn.assignable())
	if err != nil {
		fail(err)
		return
	}
	// Give up what is no longer ours. (Lock order: a worker's mu before cn.mu, never the reverse:
	// so collect the workers first, then ask them.)
	cn.mu.Lock()
	owned := make([]*worker, 0, len(cn.owned))
	for _, w := range cn.owned {
		owned = append(owned, w)
	}
	cn.mu.Unlock()
	var drop []*worker
	for _, w := range owned {
		if !want[w.partition] || w.lost() {
			drop = append(drop, w)
		}
	}
	var revoked []int
	parallel(drop, func(w *worker) {
		w.stop()
		if w.lost() {
			// Another member owns it now and loads its keys itself: what this member holds of
			// them may be stale, and is loaded again if the partition comes back (state.go).
			cn.stateForget(w.partition)
		}
		if !w.lost() {
			// A partition given up at an epoch's boundary owes its keys-revoked step before
			// the release (spec/protocol.md §6.5): a retired partition drained to its final
			// boundary is read by no one after this.
			w.passBoundaries(ctx, w.position())
			if err := cn.statePartition(ctx, w.partition); err != nil {
				if ctx.Err() == nil {
					fail(err) // not released: its lease expires, the next owner loads what is durable
				}
				return
			}
			cn.release(ctx, kv, w)
		}
	})
	for _, w := range drop {
		cn.mu.Lock()
		delete(cn.owned, w.partition)
		cn.mu.Unlock()
		revoked = append(revoked, w.partition)
	}
	if len(revoked) > 0 && cn.opts.OnRevoked != nil {
		sort.Ints(revoked)
		cn.opts.OnRevoked(revoked)
	}
	// Take what is ours and free (not while a reset is pending: the next round applies it),
	// parents first (parentfirst.go): the partitions whose next records are of the oldest epoch,
	// together, then the next epoch's.
	todo := make([]int, 0, len(want))
	for q := range want {
		todo = append(todo, q)
	}
	cn.mu.Lock()
	desc := cn.desc
	cn.mu.Unlock()
	var assigned []int
	var amu sync.Mutex
	for _, class := range parentFirst(desc, todo, cn.position) {
		var wg sync.WaitGroup
		for _, q := range class {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if cn.take(ctx, kv, q, h, fail) {
					amu.Lock()
					assigned = append(assigned, q)
					amu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	if len(assigned) > 0 && cn.opts.OnAssigned != nil {
		sort.Ints(assigned)
		cn.opts.OnAssigned(assigned)
	}
}

// take acquires partition q, when it is free and no reset is pending, and starts its worker.
func (cn *Consumer) take(ctx context.Context, kv jetstream.KeyValue, q int, h Handler, fail func(error)) bool {
	cn.mu.Lock()
	_, have := cn.owned[q]
	pending := cn.pending != nil
	cn.mu.Unlock()
	if have || pending {
		return false
	}
	before := time.Now()
	pos, rev, gen, ok := cn.acquire(ctx, kv, q)
	if !ok {
		return false
	}
	w := newWorker(cn, q, pos, rev)
	w.gen = gen
	w.leaseUntil = before.Add(cn.opts.SessionTimeout)
	cn.mu.Lock()
	if st := cn.pending; cn.gen != gen || st != nil {
		// A reset came meanwhile: move the key we just wrote to it at once (no owner), so
		// that no one waits for this lease.
		cn.mu.Unlock()
		if st != nil {
			var to uint64
			if q < len(st.Positions) {
				to = st.Positions[q]
			}
			octx, cancel := cn.op(ctx)
			_ = moveKey(octx, kv, wire.PartitionKey(cn.topicID, cn.opts.Group, q), st.Generation, to, rev)
			cancel()
		}
		return false
	}
	cn.owned[q] = w
	cn.noteStateLocked(q, rev, wire.PartitionState{Owner: cn.opts.Member, LeaseEnd: w.leaseUntil.UnixMilli(), Position: pos, Generation: gen})
	cn.mu.Unlock()
	go w.run(ctx, h, fail)
	return true
}

func (cn *Consumer) leaseEnd() int64 {
	return time.Now().Add(cn.opts.SessionTimeout).UnixMilli()
}

// acquire takes partition q's lease if it is free, expired or already ours, under the member's
// generation (spec/protocol.md §6.6): a key written under an older one starts at the reset's
// position; a key of a newer one makes the member read the group's reset first. It returns the
// start position, the key's revision and the generation.
func (cn *Consumer) acquire(ctx context.Context, kv jetstream.KeyValue, q int) (uint64, uint64, uint64, bool) {
	// Not cancelled with the member: a write the server applies must not be reported as failed,
	// or the partition would stay leased to a member that stopped (it could not release it).
	ctx, cancel := cn.op(context.WithoutCancel(ctx))
	defer cancel()
	key := wire.PartitionKey(cn.topicID, cn.opts.Group, q)
	cn.mu.Lock()
	gen := cn.gen
	var resetPos uint64
	if cn.reset != nil && q < len(cn.reset.Positions) {
		resetPos = cn.reset.Positions[q]
	}
	cn.mu.Unlock()
	var ps wire.PartitionState
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// A partition created after the group is read from its first record; after a reset that
		// did not get to write this key, from the reset's position (what the gates take as its
		// effective position too).
		body, _ := json.Marshal(wire.PartitionState{Owner: cn.opts.Member, LeaseEnd: cn.leaseEnd(), Position: resetPos, Generation: gen})
		r, err := kv.Create(ctx, key, body)
		if err != nil {
			return 0, 0, 0, false
		}
		cn.opts.Logf("member %s: partition %d: acquired at %d (new key, generation %d)", cn.opts.Member, q, resetPos, gen)
		return resetPos, r, gen, true
	case err != nil:
		return 0, 0, 0, false
	}
	if json.Unmarshal(e.Value(), &ps) != nil {
		return 0, 0, 0, false
	}
	rev := e.Revision()
	if ps.Generation > gen {
		// A reset this member has not seen yet: read it; the next round applies it.
		_ = cn.readReset(ctx, kv)
		return 0, 0, 0, false
	}
	if !proto.MayAcquire(cn.opts.Member, ps.Owner, ps.LeaseEnd, time.Now().UnixMilli(), proto.MaxClockSkew(cn.opts.SessionTimeout)) {
		return 0, 0, 0, false // someone else's, still leased (a lease of an older generation too)
	}
	if ps.Generation < gen {
		ps.Position = resetPos // written before the reset reached it
	}
	prev, prevEnd := ps.Owner, ps.LeaseEnd
	ps.Owner, ps.LeaseEnd, ps.Generation = cn.opts.Member, cn.leaseEnd(), gen
	body, _ := json.Marshal(ps)
	r, err := kv.Update(ctx, key, body, rev)
	if err != nil {
		// Another member's write came first (or the write's fate is unknown: the next round
		// reads the key again and finds the lease ours or not).
		return 0, 0, 0, false
	}
	// Logged once the compare-and-set succeeded: two members that read the same free key both
	// try, and only one of them acquires it.
	if prev != "" && prev != cn.opts.Member {
		cn.opts.Logf("member %s: partition %d: lease of %s expired %v ago; took over at %d", cn.opts.Member, q, prev, time.Since(time.UnixMilli(prevEnd)).Round(time.Millisecond), ps.Position)
	} else {
		cn.opts.Logf("member %s: partition %d: acquired at %d (generation %d)", cn.opts.Member, q, ps.Position, gen)
	}
	cn.hookLease(q, true) // hooks.go
	return ps.Position, r, gen, true
}

// commitAll writes every owned partition's delivered position (renewing its lease when a third
// of it is used up) by compare-and-set, the partitions in parallel; a failed CAS means the
// partition was taken over: its worker stops.
func (cn *Consumer) commitAll(ctx context.Context, kv jetstream.KeyValue, renew bool) {
	cn.mu.Lock()
	ws := make([]*worker, 0, len(cn.owned))
	for _, w := range cn.owned {
		ws = append(ws, w)
	}
	cn.mu.Unlock()
	parallel(ws, func(w *worker) { w.commit(ctx, kv, renew) })
}

// parallel runs f for every worker, at most 32 at a time, and waits for all.
func parallel(ws []*worker, f func(*worker)) {
	if len(ws) == 1 {
		f(ws[0])
		return
	}
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(w)
		}()
	}
	wg.Wait()
}

// release hands a stopped worker's partition back: the final position, no owner.
func (cn *Consumer) release(ctx context.Context, kv jetstream.KeyValue, w *worker) {
	ctx, cancel := cn.op(ctx)
	defer cancel()
	select {
	case w.commitSem <- struct{}{}: // no commit of this partition runs meanwhile
	case <-ctx.Done():
		return
	}
	defer func() { <-w.commitSem }()
	w.mu.Lock()
	if w.isLost {
		w.mu.Unlock()
		return
	}
	pos, rev, gen, unsure := w.delivered, w.rev, w.gen, w.unsure
	w.mu.Unlock()
	if cn.staleGen(gen) {
		return // a reset came: applyReset (or the next owner) moves the key
	}
	body, _ := json.Marshal(wire.PartitionState{Position: pos, Generation: gen})
	key := wire.PartitionKey(cn.topicID, cn.opts.Group, w.partition)
	newRev, err := kv.Update(ctx, key, body, rev)
	if err != nil && (errors.Is(err, jetstream.ErrKeyExists) || isWrongSeq(err)) && unsure != nil {
		// The last commit's answer was lost (the worker was stopped while it ran): if the key
		// holds exactly what it wrote, it was ours, and the release goes on from its revision.
		// Otherwise the partition stayed leased to this member until its lease expired, and the
		// member it went to waited for that (seen when a member that took every partition
		// before the others joined gave half of them back).
		if e, gerr := kv.Get(ctx, key); gerr == nil && bytes.Equal(e.Value(), unsure.body) {
			newRev, err = kv.Update(ctx, key, body, e.Revision())
		}
	}
	if err == nil {
		cn.setPosition(w.partition, newRev, wire.PartitionState{Position: pos, Generation: gen})
		cn.noteCommit(newRev)
		cn.hookLease(w.partition, false) // hooks.go
	}
}

// staleGen reports whether generation gen is no longer the member's (a reset is pending or
// applied): nothing more is committed or delivered under it.
func (cn *Consumer) staleGen(gen uint64) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.pending != nil || cn.gen != gen
}

func (cn *Consumer) shutdown(kv jetstream.KeyValue) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cn.mu.Lock()
	ws := make([]*worker, 0, len(cn.owned))
	for _, w := range cn.owned {
		ws = append(ws, w)
	}
	cn.owned = map[int]*worker{}
	cn.cond.Broadcast()
	cn.mu.Unlock()
	var qs []int
	parallel(ws, func(w *worker) {
		w.stop()
		if !w.lost() {
			if err := cn.statePartition(ctx, w.partition); err != nil {
				cn.opts.Logf("member %s: %v (partition %d not released: its lease expires)", cn.opts.Member, err, w.partition)
				return
			}
			cn.release(ctx, kv, w)
		}
	})
	for _, w := range ws {
		qs = append(qs, w.partition)
	}
	_ = kv.Delete(ctx, wire.MemberKey(cn.topicID, cn.opts.Group, cn.opts.Member))
	if len(qs) > 0 && cn.opts.OnRevoked != nil {
		sort.Ints(qs)
		cn.opts.OnRevoked(qs)
	}
}

func (cn *Consumer) setPosition(q int, rev uint64, ps wire.PartitionState) {
	cn.mu.Lock()
	cn.noteStateLocked(q, rev, ps)
	cn.cond.Broadcast()
	cn.mu.Unlock()
}

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

// unsureWrite is a write of a partition's state whose outcome is unknown: its body, the position
// it commits and the lease end it gives (by our clock, from before the write).
type unsureWrite struct {
	body  []byte
	pos   uint64
	until time.Time
}

func isWrongSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
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

func (w *worker) position() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.delivered
}

// skipPassed marks the boundaries of this partition below pos as passed: an owner runs a
// boundary's keys-revoked step before its position passes the boundary (spec/protocol.md §6.5),
// so the owner that took the position there ran it.
func (w *worker) skipPassed(pos uint64) {
	cn := w.cn
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, e := range proto.Passed(cn.desc, w.partition, pos) {
		cn.revoked[[2]int{w.partition, e}] = true
	}
}

// passBoundaries runs the keys-revoked step for every ended epoch whose boundary in this
// partition the member has handled (pos >= boundary), once per generation, then commits at once:
// the position then goes past the boundary (the fence marker right after it), which lets the
// children's gates and keys-assigned steps go on (spec/protocol.md §6.5).
func (w *worker) passBoundaries(ctx context.Context, pos uint64) {
	cn := w.cn
	cn.mu.Lock()
	t := cn.desc
	stale := cn.pending != nil || cn.gen != w.gen
	cn.mu.Unlock()
	if stale {
		return // a reset came: the new generation passes its boundaries again
	}
	cn.mu.Lock()
	revokes := proto.Revokes(t, w.partition, pos, func(e int) bool { return cn.revoked[[2]int{w.partition, e}] })
	for _, e := range revokes {
		cn.revoked[[2]int{w.partition, e}] = true
	}
	cn.mu.Unlock()
	for _, en := range revokes {
		e, next := t.Epoch(en), t.Epoch(en+1)
		if cn.opts.OnKeysRevoked != nil {
			fOld, err1 := cn.partitionerFor(ctx, e)
			fNew, err2 := cn.partitionerFor(ctx, next)
			if err1 == nil && err2 == nil {
				q := w.partition
				cn.opts.OnKeysRevoked(KeyChange{Topic: cn.topic, FromEpoch: e.Epoch, ToEpoch: next.Epoch, Partition: q, Parent: q,
					Moved: func(k []byte) bool {
						a, _ := fOld.Partition(k, int32(e.Partitions))
						b, _ := fNew.Partition(k, int32(next.Partitions))
						return int(a) == q && int(b) != q
					}})
			}
		}
	}
	if len(revokes) > 0 {
		w.commitNow(ctx)
	}
}

// errStale stops a worker whose generation ended (a reset) or that is stopping: not a failure.
var errStale = errors.New("stale generation")

// ensureEnded waits until the member's descriptor shows epoch e ended (with its boundaries) and
// its successor: a record or marker of a newer epoch exists, so the broker is activating it.
func (w *worker) ensureEnded(ctx context.Context, e int) error {
	cn := w.cn
	for {
		cn.mu.Lock()
		t := cn.desc
		cn.mu.Unlock()
		if proto.Ended(t.Epoch(e)) && t.Epoch(e+1) != nil {
			return nil
		}
		cn.refresh(ctx)
		cn.mu.Lock()
		t = cn.desc
		cn.mu.Unlock()
		if proto.Ended(t.Epoch(e)) && t.Epoch(e+1) != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitGroup waits until ok (called with cn.mu held) holds for the group's positions, reading
// partition q's key directly once a heartbeat in case the watch missed a commit. It returns
// errStale when the worker's generation ends meanwhile.
func (w *worker) waitGroup(ctx context.Context, q int, ok func() bool, slow func() string) (bool, error) {
	cn := w.cn
	start := time.Now()
	waited, logged := false, false
	lastFetch := time.Now()
	poll := cn.opts.Heartbeat
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for !ok() {
		if ctx.Err() != nil {
			return waited, ctx.Err()
		}
		if cn.pending != nil || cn.gen != w.gen {
			return waited, errStale
		}
		waited = true
		if !logged && time.Since(start) > 3*cn.opts.SessionTimeout {
			logged = true
			cn.opts.Logf("member %s: partition %d: %s", cn.opts.Member, w.partition, slow())
		}
		waitCondTimeout(ctx, cn.cond, poll)
		if time.Since(lastFetch) >= poll && !ok() {
			// The watch brings positions as they are committed; in case it missed one (it is
			// re-established after a broker restart), also read the key directly.
			cn.mu.Unlock()
			cn.fetchPosition(ctx, q)
			lastFetch = time.Now()
			cn.mu.Lock()
		}
	}
	return waited, nil
}

// pastBoundaryLocked reports whether the group's position of partition q is past boundary b,
// that is past the fence marker right after it: its owner has run the boundary's keys-revoked
// step (spec/protocol.md §6.5). A retired partition drained to its final boundary that no live
// lease holds counts too: no one reads its marker, and its last owner ran the step before
// releasing it (or crashed).
func (cn *Consumer) pastBoundaryLocked(q int, b uint64) bool {
	st := cn.states[q]
	leased := proto.LeaseLive(st.owner, st.leaseEnd, time.Now().UnixMilli(), proto.MaxClockSkew(cn.opts.SessionTimeout))
	return proto.PastBoundary(cn.desc, q, b, cn.positionLocked, leased)
}

// gate blocks a record of epoch x until, for every earlier epoch e that the group has not fully
// drained yet, the key's partition in e is drained by the group past e's boundary (per-key exact
// ancestry: only this record's partition waits, and only for those parents). The key's own
// partition needs no wait (spec/protocol.md §6.7): its older records are before this one in this
// very stream.
//
// Checking only epoch x-1 is not enough: a key with no records during epoch x-1 has older
// records in epoch x-2 that nothing in x-1's partitions waits for (the randomised scenario tests
// found exactly that). Epochs the group has drained completely are skipped, so in the steady state
// a record checks one epoch or none.
//
// Then, for a key that moved here from partition q of epoch x-1, the keys-assigned step of
// (this partition, q) runs once per generation, after q's owner ran its keys-revoked step: when
// the group's position of q is past q's boundary (KIP-253's order, DESIGN.md §4).
func (w *worker) gate(ctx context.Context, m *Message) error {
	cn := w.cn
	cn.mu.Lock()
	t := cn.desc
	cn.mu.Unlock()
	if m.Epoch <= t.Epochs[0].Epoch {
		return nil
	}
	if err := w.ensureEnded(ctx, m.Epoch-1); err != nil {
		return err
	}
	cn.mu.Lock()
	t = cn.desc
	cn.mu.Unlock()
	partitionIn := func(ep *wire.Epoch) (int, error) {
		f, err := cn.partitionerFor(ctx, ep)
		if err != nil {
			return 0, err
		}
		pq, err := f.Partition(m.Key, int32(ep.Partitions))
		if err != nil {
			return 0, fmt.Errorf("%w: partition of key %x in epoch %d: %v", wire.ErrPluginFailed, m.Key, ep.Epoch, err)
		}
		return int(pq), nil
	}
	drained := m.Epoch - 1 // ungated (testhook): no waits (the keys-assigned step below still runs)
	if !cn.opts.Testing.Ungated() {
		drained = cn.drainedThrough(t)
	}
	if drained >= m.Epoch-1 && cn.opts.OnKeysAssigned == nil {
		// Every older epoch is drained: nothing to wait for, and no keys-assigned step to run
		// (the key's partitions in older epochs are not needed). Once a replay's parents have
		// drained, this check is all a gated record costs.
		return nil
	}
	// Not under cn.mu: partitionIn may fetch a module.
	g, err := proto.GateRecord(t, drained, m.Epoch, w.partition, partitionIn, cn.position)
	if err != nil {
		return err
	}
	start := time.Now()
	waited := false
	for _, c := range g.Waits {
		wt, err := w.waitGroup(ctx, c.Partition, func() bool { return cn.positions[c.Partition] >= c.Boundary }, func() string {
			return fmt.Sprintf("record %d (epoch %d, key %q) still waits for partition %d to reach %d (epoch %d boundary); the group is at %d",
				m.Seq, m.Epoch, m.Key, c.Partition, c.Boundary, c.Epoch, cn.positions[c.Partition])
		})
		waited = waited || wt
		if err != nil {
			return err
		}
	}
	if waited {
		d := time.Since(start)
		cn.mu.Lock()
		cn.stats.Gated++
		cn.stats.TotalWait += d
		if d > cn.stats.MaxWait {
			cn.stats.MaxWait = d
		}
		cn.mu.Unlock()
		cn.hookGateWait(w.partition, m.Epoch, d) // hooks.go
	}
	if cn.opts.OnKeysAssigned == nil {
		return nil
	}
	if g.Assigned == nil {
		return nil // the key was in this partition in epoch x-1
	}
	prev, next := t.Epoch(m.Epoch-1), t.Epoch(m.Epoch)
	q, b := g.Assigned.Partition, g.Assigned.Boundary
	akey := [3]int{w.partition, m.Epoch, q}
	cn.mu.Lock()
	done := cn.assigned[akey]
	cn.mu.Unlock()
	if done {
		return nil
	}
	if _, err := w.waitGroup(ctx, q, func() bool { return cn.pastBoundaryLocked(q, b) }, func() string {
		return fmt.Sprintf("keys-assigned from partition %d (epoch %d) still waits for the group to pass that partition's boundary %d; the group is at %d",
			q, prev.Epoch, b, cn.positions[q])
	}); err != nil {
		return err
	}
	cn.mu.Lock()
	done = cn.assigned[akey]
	cn.assigned[akey] = true
	cn.mu.Unlock()
	if done {
		return nil
	}
	f, err1 := cn.partitionerFor(ctx, prev)
	fNew, err2 := cn.partitionerFor(ctx, next)
	if err1 == nil && err2 == nil {
		child := w.partition
		cn.opts.OnKeysAssigned(KeyChange{Topic: cn.topic, FromEpoch: prev.Epoch, ToEpoch: next.Epoch, Partition: child, Parent: q,
			Moved: func(k []byte) bool {
				a, _ := f.Partition(k, int32(prev.Partitions))
				b, _ := fNew.Partition(k, int32(next.Partitions))
				return int(a) == q && int(b) == child
			}})
	}
	return nil
}

// fetchPosition reads a partition's committed position from the group state.
func (cn *Consumer) fetchPosition(ctx context.Context, q int) {
	kv, err := cn.kv(ctx)
	if err != nil {
		return
	}
	ctx, cancel := cn.op(ctx)
	defer cancel()
	e, err := kv.Get(ctx, wire.PartitionKey(cn.topicID, cn.opts.Group, q))
	if err != nil {
		return
	}
	var ps wire.PartitionState
	if json.Unmarshal(e.Value(), &ps) == nil {
		cn.mu.Lock()
		newer := ps.Generation > cn.gen
		cn.mu.Unlock()
		if newer {
			_ = cn.readReset(ctx, kv)
		}
		cn.setPosition(q, e.Revision(), ps)
	}
}

// waitCondTimeout is waitCond that also wakes after d.
func waitCondTimeout(ctx context.Context, c *sync.Cond, d time.Duration) {
	t := time.AfterFunc(d, func() {
		c.L.Lock()
		c.Broadcast()
		c.L.Unlock()
	})
	waitCond(ctx, c)
	t.Stop()
}

// drainedThrough returns the newest ended epoch e such that the group has drained every
// partition of every epoch up to e past that epoch's boundary (0 if none). Positions only grow,
// so the answer only grows; it is cached.
func (cn *Consumer) drainedThrough(t *wire.Topic) int {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.drained = proto.DrainedThrough(t, cn.drained, cn.positionLocked)
	return cn.drained
}
