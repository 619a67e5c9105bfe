package client

import (
	"context"
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
	"pctl.dev/pctl/internal/testhook"
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
	// testFailReadBack is a test hook: called after each read-back of a partition's key that
	// follows a refused commit; true makes the read fail (no answer).
	testFailReadBack func() bool
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

	// memberKeys: the group's m. keys live at the member's earlier listings (members).
	memberKeys seenKeys

	mu        sync.Mutex
	cond      *sync.Cond
	desc      *wire.Topic
	positions map[int]uint64 // committed positions of the whole group (from the KV watch)
	owned     map[int]*worker
	// meant: the partitions the member's last rebalance found the group's assignment gives it (Behind).
	meant    map[int]bool
	revoked  map[[2]int]bool // (partition, epoch) whose keys-revoked step ran here
	drained  int             // cache of drainedThrough
	kvh      jetstream.KeyValue
	assigned map[[3]int]bool // (partition, epoch, parent) whose keys-assigned step ran here
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
	// Before any group key is written: a server older than 2.11 ignores the condition that
	// proves a group absent (spec/protocol.md §6.1), so the minimum is checked here, not learnt.
	if err := requireConsumerServer(c.nc); err != nil {
		return nil, err
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

// Behind returns the partitions this member is meant to read that hold records it has not
// handled yet, in order: those the group's assignment gave it at its last rebalance that it does
// not own yet (still taking them), and those it owns whose stream's last sequence is past its
// position (its reader still opening, catching up, or waiting at a gate). Empty: the member has
// handled everything stored in its partitions so far, which is what "idle" means to a caller
// such as `pctl consume --idle-exit`. It asks the server once (one stream list of the topic); an
// error means it could not tell.
func (cn *Consumer) Behind(ctx context.Context) ([]int, error) {
	cn.mu.Lock()
	var out []int
	for q := range cn.meant {
		if _, ok := cn.owned[q]; !ok {
			out = append(out, q)
		}
	}
	owned := make([]*worker, 0, len(cn.owned))
	for _, w := range cn.owned {
		owned = append(owned, w)
	}
	cn.mu.Unlock()
	if len(owned) > 0 {
		ctx, cancel := cn.op(ctx)
		defer cancel()
		ends, err := cn.streamEnds(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: listing the streams of topic %s: %v", wire.ErrUnavailable, cn.topic, err)
		}
		for _, w := range owned {
			if ends[w.partition] > w.position() {
				out = append(out, w.partition)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

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

// readerStallMax caps the silence a reader is allowed after replacements at one position.
const readerStallMax = 32 * time.Second

// errStale stops a worker whose generation ended (a reset) or that is stopping: not a failure.
var errStale = errors.New("stale generation")
