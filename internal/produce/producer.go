// Package produce is pctl's producer engine (spec/protocol.md §5.1): the ordering, fencing,
// in-order re-send, ambiguous search and fast batching behind client.Producer and the broker's
// produce service. It runs over a Conn (a NATS connection, its JetStream context, a way to read
// a topic's descriptor and to load a partitioner) and imports neither package: client.Producer
// is a thin public wrapper over Producer, and the broker's produce service uses Producer directly,
// with the thin clients' identities (Record.Origin) that only the service may set.
//
// The sticky-ambiguity decisions (spec/protocol.md §5.1.2) are not the producer's own: it runs on
// the I/O-free machine of internal/proto (proto.Sticky, through proto.StickyCheck, in production
// as in tests). A sink transmits the record the machine sends it next (nothing past an ambiguous
// batch until it settled), a settling finishes the records as the machine classifies what the
// sink learnt, and after a fence the machine's plan says which records are re-sent, in what
// order, placed by the producer's partitioner when the machine asks. The machine's calls are
// computation (its own lock, taken under the producer's or a sink's lock): no network call is
// made while any of these locks is held. Acknowledgements from the server's replies, and
// settlings while the producer moves to a newer epoch, are still decided here and checked
// against the machine.
package produce

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
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

// Record is one record to produce.
type Record struct {
	Key   []byte
	Value []byte
	// NoKey marks a keyless record: the producer spreads keyless records over the partitions and
	// promises no order for them. An empty Key without NoKey is the empty key, which is a key.
	NoKey bool
	// Tombstone marks a record that deletes its key (spec/protocol.md §10.2): it has no Value.
	Tombstone bool
	// Origin, when set, is the identity the record carries instead of this producer's: the
	// broker's produce service passes on its thin clients' producer id and sequence, so that
	// their retries are deduplicated and their order can be checked.
	Origin *Origin
}

// Origin identifies a record by its original producer and that producer's sequence number.
type Origin struct {
	Producer string
	Seq      uint64
	// Token is the record's deduplication token (spec/protocol.md §5.2: a thin client's
	// Pctl-Token). Empty: RecordToken of the record's key and value.
	Token string
}

// Result reports the fate of one record. Err == nil means the broker acknowledged it: it is
// stored and will be delivered to every consumer group.
type Result struct {
	Partition int // partition (stream) the record is stored in
	Epoch     int // epoch it was produced under
	// Seq is the record's stream sequence when the producer learned it, else 0 ("stored, sequence
	// not reported"). A fast batch's PubAck names the stream sequence of its last record only, so
	// Seq is set for the last record of a batch (always for a record sent alone) and for a record
	// found by a verification after a failure (spec/protocol.md §5.1.2).
	Seq         uint64
	ProducerSeq uint64 // this producer's sequence number of the record (1, 2, ...)
	// Duplicate: the server reported the record as already stored, and the stored message was
	// checked to be this very record (no second copy was written).
	Duplicate bool
	Err       error
}

// Conn is what a producer needs of its connection: the small transport over JetStream that
// client.Client and the broker's produce service each provide.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream
	// Timeout bounds the retries of a descriptor read that the broker answered "unavailable".
	Timeout time.Duration
	// AckTimeout: a batch without a reply for this long is settled (spec/protocol.md §5.1.2).
	AckTimeout time.Duration
	// Topic reads a topic's descriptor. An error the broker answered (a *wire.RemoteError with
	// code unavailable: a topic being created) is retried for Timeout; any other is final.
	Topic func(ctx context.Context, topic string) (*wire.Topic, error)
	// Partitioner returns the partitioner of an epoch.
	Partitioner func(ctx context.Context, p wire.Partitioner) (partitioner.Partitioner, error)
	// OnViolation and OnConnEvent register listeners for the connection's permission
	// violations (the subject refused) and its disconnects and reconnects; each returns its
	// removal. Either may be nil (no such events).
	OnViolation func(f func(subject string)) (remove func())
	OnConnEvent func(f func(connected bool)) (remove func())
}

// Options configures a producer. Zero values mean defaults (the fields mean what
// client.ProducerOptions says).
type Options struct {
	ID            string
	ContentTokens bool
	MaxInFlight   int
	MaxBuffered   int
	BatchSize     int
	StallTimeout  time.Duration
	Logf          func(format string, args ...any)
	// Hooks observe the producer: values implementing HookRecord or HookRepartitioned.
	Hooks     []any
	CloseIdle time.Duration

	// NoKeyRule (test hook): batches on a cluster may hold several records of one key (the
	// per-key rule of spec/protocol.md §5.1.2 off), for the control that shows the failover
	// test catches what the rule prevents.
	NoKeyRule bool
	// TestVerify (test hook) makes every stream count as clustered: batches are confirmed by
	// reading them back (a stream without cluster info is never trusted) and the per-key rule holds.
	TestVerify bool
	// TestHoles (test hook) runs after the clean PubAck of a batch that stored stream sequences
	// first..last, before the batch is confirmed: it may delete stored records of it, as
	// nats-server 2.15.2 loses records it counted around a raft term change.
	TestHoles func(stream string, first, last uint64)
}

// Producer produces keyed records to one topic, partitioning them on the client with the
// topic's WebAssembly module, and publishes them in JetStream fast batches (spec/protocol.md
// §5.1): one sink per partition sends its records in order, one batch open at a time, many
// records in flight inside it.
//
// Order: records with the same key are stored in the order Send was called, and a consumer group
// delivers them in that order, across epoch changes, connection losses and stream-leader
// changes: the server stores a contiguous prefix of each batch, and after any failure the sink
// learns that prefix (from the batch's PubAck, by closing the batch, or by reading the partition
// back) before it re-sends the rest, in order, in a new batch. When the topic's epoch changed,
// every unacknowledged record is re-partitioned and re-sent in the original order under the new
// epoch. A re-send carries the record's original deduplication id (with a random token, so no
// other client can claim it first), so a record is never stored twice within JetStream's
// deduplication window, and a duplicate acknowledgement counts only once the stored message was
// checked to be this record.
//
// A Producer is safe for concurrent use; records sent from different goroutines are ordered by
// the order their Send calls took effect.
type Producer struct {
	conn  *Conn
	topic string
	id    string
	opts  Options
	inbox string // replies to fast batches arrive under inbox.>

	mu          sync.Mutex
	cond        *sync.Cond
	desc        *wire.Topic
	part        partitioner.Partitioner
	sinks       map[int]*sink
	recordHooks []HookRecord // opts.Hooks that want records
	held        []*pending   // records sent while the producer repartitions
	switching   bool
	seq         uint64
	buffered    int
	rr          uint64
	fatal       error
	closing     bool   // Close was called
	closed      bool   // Close stopped taking records
	finished    uint64 // records finished (acknowledged or failed) so far
	// check runs the sticky-ambiguity machine (spec/protocol.md §5.1.2): it decides the re-send
	// after a fence (Resend) and what each sink transmits next (Next), and checks the producer's
	// other decisions against the machine.
	check *proto.StickyCheck

	batches  sync.Map // open batch id -> *sink
	subs     []*nats.Subscription
	unlisten func()
	events   chan event
	checks   chan struct{} // "re-read the descriptor" (coalesced)
	done     chan struct{}
	wg       sync.WaitGroup

	resent  atomic.Int64 // records re-sent under a new epoch after a fence
	settles atomic.Int64 // batches settled after an anomaly
	holes   atomic.Int64 // records a committed batch claimed but the server did not store (re-sent)
	// readBacks counts batches read back after a leader change (confirm); pastInfo the records
	// such a read found above the last sequence the stream info named (a lagging member's
	// answer): a read that stopped there would have re-sent them under new ids.
	readBacks, pastInfo atomic.Int64
}

type pending struct {
	seq       uint64
	rec       Record
	done      func(Result)
	epoch     int
	partition int
	hdr       nats.Header // the record's identity: the same for every send
	sends     int         // publishes so far, in any partition
	// floors maps each stream the record was sent to to its sink's floor at the first send
	// there: a copy of it stored in that stream is above this sequence.
	floors map[string]uint64
	failed error // set when the server refused the record for good
	// inProcess counts the 10158 answers for the record's id (inprocess.go).
	inProcess InProcess
}

// event is a sink's word to the control loop. A final event says the sink stopped and hands
// back its records not acknowledged (in send order). A sink that finds its epoch fenced by
// itself sends a non-final event with the descriptor and waits, sending nothing, until the
// control loop stops it (records queued meanwhile stay with it and come back in its final event).
type event struct {
	s      *sink
	left   []*pending
	fenced *wire.Topic // the descriptor that showed the sink's epoch ended
	final  bool
}

// New fetches the topic's descriptor and partitioner and returns a producer. It fails when the
// server is older than nats-server 2.14 (fast batches, spec/protocol.md §5.1).
func New(ctx context.Context, conn *Conn, topic string, opts Options) (*Producer, error) {
	if opts.ID == "" {
		opts.ID = nuid.Next()
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 1024
	}
	if opts.MaxBuffered <= 0 {
		opts.MaxBuffered = 65536
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 4096
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = 250 * time.Millisecond
	}
	if opts.CloseIdle <= 0 {
		opts.CloseIdle = 30 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if err := wire.ValidGroup(opts.ID); err != nil {
		return nil, fmt.Errorf("%w: producer id %q: 1 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §2)", wire.ErrBadRequest, opts.ID)
	}
	if err := RequireFastBatches(conn.NC); err != nil {
		return nil, err
	}
	nc := conn.NC
	p := &Producer{conn: conn, topic: topic, id: opts.ID, opts: opts, sinks: map[int]*sink{}, inbox: nc.NewInbox(),
		events: make(chan event, 64), checks: make(chan struct{}, 1), done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.recordHooks = Hooks[HookRecord](opts.Hooks)
	desc, err := p.fetch(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.install(ctx, desc); err != nil {
		return nil, err
	}
	// The sticky machine decides (the re-send after a fence, what a sink transmits next) in
	// production too; the rest of the producer's decisions are checked against it. A decision
	// the machine does not make panics in tests (testhook.CheckSticky) and fails the producer
	// otherwise (asynchronously: the check runs under the producer's locks).
	violation := testhook.StickyViolation
	if !testhook.CheckSticky() {
		violation = func(msg string) {
			go p.fail(fmt.Errorf("%w: producer %s: %s", wire.ErrInternal, p.id, msg))
		}
	}
	p.check = proto.NewStickyCheck(desc.Current().Epoch, violation)
	replies, err := nc.Subscribe(p.inbox+".>", p.onReply)
	if err != nil {
		return nil, fmt.Errorf("%w: subscribe to the producer's replies: %v", wire.ErrUnavailable, err)
	}
	_ = replies.SetPendingLimits(1<<20, 256<<20)
	// Topic events are hints: a refresh of the descriptor (read from the broker), coalesced; none
	// for what JetStream relays (spec/protocol.md §8.4).
	events, err := nc.Subscribe(wire.TopicEventSubject(topic), func(m *nats.Msg) {
		if !strings.HasPrefix(m.Reply, "$JS.") {
			p.requestCheck()
		}
	})
	if err != nil {
		_ = replies.Unsubscribe()
		return nil, fmt.Errorf("%w: subscribe to %s: %v", wire.ErrUnavailable, wire.TopicEventSubject(topic), err)
	}
	p.subs = []*nats.Subscription{replies, events}
	var unlisten []func()
	if conn.OnViolation != nil {
		unlisten = append(unlisten, conn.OnViolation(func(subject string) {
			if strings.HasPrefix(subject, wire.DataPrefix+"."+topic+".") {
				p.fail(PermissionError(subject))
			}
		}))
	}
	if conn.OnConnEvent != nil {
		unlisten = append(unlisten, conn.OnConnEvent(func(connected bool) {
			p.mu.Lock()
			sinks := make([]*sink, 0, len(p.sinks))
			for _, s := range p.sinks {
				sinks = append(sinks, s)
			}
			p.mu.Unlock()
			for _, s := range sinks {
				s.connChanged(connected)
			}
		}))
	}
	p.unlisten = func() {
		for _, f := range unlisten {
			f()
		}
	}
	p.wg.Add(1)
	go p.control()
	return p, nil
}

// PermissionError is the error of a publish the server refused to these credentials.
func PermissionError(subject string) error {
	return fmt.Errorf("%w: these credentials may not publish to %s: %s", wire.ErrPermission, subject, wire.RoleHint(subject))
}

// MinServerVersion is the oldest nats-server the producer runs on: fast batch publishing
// (spec/protocol.md §5.1).
const MinServerVersion = "2.14.0"

// RequireFastBatches refuses a connection to a server older than MinServerVersion.
func RequireFastBatches(nc *nats.Conn) error {
	v := nc.ConnectedServerVersion()
	if !versionAtLeast(v, 2, 14) {
		return fmt.Errorf("%w: the server at %s runs nats-server %q; pctl's producer needs %s or later on every node (fast batch publishing, spec/protocol.md §5.1): upgrade the NATS servers", wire.ErrUnavailable, nc.ConnectedUrlRedacted(), v, MinServerVersion)
	}
	return nil
}

// versionAtLeast reports whether a "major.minor.patch[-suffix]" version is at least major.minor.
func versionAtLeast(v string, major, minor int) bool {
	v = strings.TrimPrefix(v, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.SplitN(parts[1], "-", 2)[0])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// ID returns the producer's id.
func (p *Producer) ID() string { return p.id }

// Resent returns how many records were re-sent under a new epoch after a fence.
func (p *Producer) Resent() int64 { return p.resent.Load() }

// Settled returns how many fast batches the producer had to settle after an anomaly (a gap, a
// refusal, a lost connection, a timeout, a fence).
func (p *Producer) Settled() int64 { return p.settles.Load() }

// Holes returns how many records the server acknowledged in a committed fast batch without
// storing them (a nats-server 2.15 fault after a stream leader's term change), found by the
// producer's check on clusters and sent again. Their keys stay in order: such a record is the
// only one of its key in its batch, and its re-send goes ahead of that key's later records
// (spec/protocol.md §5.1.2).
func (p *Producer) Holes() int64 { return p.holes.Load() }

// ReadBacks returns how many batches the producer read back after a stream leader change, and
// how many records those reads found stored above the last sequence the stream's info named
// (spec/protocol.md §5.1.2, "the read-back's end").
func (p *Producer) ReadBacks() (batches, pastInfo int64) {
	return p.readBacks.Load(), p.pastInfo.Load()
}

// Epoch returns the epoch the producer currently produces to.
func (p *Producer) Epoch() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.desc.Current().Epoch
}

// ErrProducerClosed is what Send returns after Close: a bad request (errors.Is works with both).
var ErrProducerClosed = fmt.Errorf("%w: producer is closed", wire.ErrBadRequest)

func (p *Producer) fetch(ctx context.Context) (*wire.Topic, error) {
	retryUntil := time.Now().Add(p.conn.Timeout)
	for {
		t, err := p.conn.Topic(ctx, p.topic)
		if err != nil {
			// The broker answered "unavailable" (a topic being created, a descriptor not yet
			// readable): a state that passes, retried while ctx lasts, for at most the client's
			// request timeout. A broker that does not answer at all is reported at once (the
			// error is not a RemoteError then).
			var remote *wire.RemoteError
			if errors.Is(err, wire.ErrUnavailable) && errors.As(err, &remote) && ctx.Err() == nil && time.Now().Before(retryUntil) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return nil, err
		}
		p.mu.Lock()
		old := p.desc
		p.mu.Unlock()
		if old != nil && old.ID != "" && t.ID != old.ID {
			return nil, fmt.Errorf("%w: topic %s was deleted and created again while producing (id %s, now %s); records not yet acknowledged are not sent to the new topic", wire.ErrNotFound, p.topic, old.ID, t.ID)
		}
		return t, nil
	}
}

// fetchQuick reads the descriptor within the acknowledgement timeout, at least 1 s (a request lost with a
// connection would otherwise wait out the client's whole request timeout).
func (p *Producer) fetchQuick(ctx context.Context) (*wire.Topic, error) {
	// The acknowledgement timeout, but at least a second: with one of a few milliseconds the
	// broker's answer never came in time under load, and a sink settling a fenced batch closed it
	// on the old subject (no responders) for good, never learning the new one
	// (TestLostAcknowledgementsNeverStoreTwice under -race -cpu 1, 2 ms: nothing acknowledged
	// for 30 s).
	ctx, cancel := context.WithTimeout(ctx, max(p.conn.AckTimeout, time.Second))
	defer cancel()
	return p.fetch(ctx)
}

// install makes desc the current layout (p.mu not held; called before the control loop starts
// or from it).
func (p *Producer) install(ctx context.Context, desc *wire.Topic) error {
	cur := desc.Current()
	part, err := p.conn.Partitioner(ctx, cur.Partitioner)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.desc = desc
	p.part = part
	p.sinks = map[int]*sink{}
	return nil
}

// Send queues a record. done, if not nil, is called exactly once with the record's fate, from a
// producer goroutine (records of one partition in order). Send blocks while MaxBuffered records
// are unacknowledged. It fails at once for a record the producer can never send (a key over 64
// KiB, a closed producer).
func (p *Producer) Send(ctx context.Context, rec Record, done func(Result)) error {
	done = p.hookProduced(rec, done) // hooks.go
	if rec.NoKey && len(rec.Key) > 0 {
		return fmt.Errorf("%w: a keyless record (NoKey) has no Key", wire.ErrBadRequest)
	}
	if err := p.checkCompaction(rec); err != nil {
		return err
	}
	if len(rec.Key) > 65536 {
		return fmt.Errorf("%w: key of %d bytes; keys are at most 65536 bytes", wire.ErrBadRequest, len(rec.Key))
	}
	if max := p.conn.NC.MaxPayload(); int64(len(rec.Value)+len(rec.Key)) > max {
		return fmt.Errorf("%w: record of %d bytes (key and value); the server takes messages of at most %d bytes", wire.ErrBadRequest, len(rec.Value)+len(rec.Key), max)
	}
	if o := rec.Origin; o != nil && o.Token != "" && !wire.ValidToken(o.Token) {
		return fmt.Errorf("%w: record token %q: 16 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §5.2)", wire.ErrBadRequest, o.Token)
	}
	p.mu.Lock()
	for p.buffered >= p.opts.MaxBuffered && p.fatal == nil && !p.closed {
		if ctx.Err() != nil {
			p.mu.Unlock()
			return ctx.Err()
		}
		WaitCond(ctx, p.cond)
	}
	if p.closed {
		p.mu.Unlock()
		return ErrProducerClosed
	}
	if p.fatal != nil {
		err := p.fatal
		p.mu.Unlock()
		return err
	}
	p.seq++
	pd := &pending{seq: p.seq, rec: rec, done: done}
	pd.hdr = p.identity(pd)
	p.buffered++
	if p.switching {
		p.held = append(p.held, pd)
		p.check.Produce(pd.seq, 0, -1)
		p.mu.Unlock()
		return nil
	}
	err := p.placeLocked(pd)
	if err == nil {
		p.check.Produce(pd.seq, pd.epoch, pd.partition)
		p.queueLocked(pd)
	}
	p.mu.Unlock()
	if err != nil {
		p.finish(pd, Result{Err: err})
	}
	return nil
}

// Produce sends one record and waits for its result.
func (p *Producer) Produce(ctx context.Context, rec Record) (Result, error) {
	return Await(ctx, func(done func(Result)) error { return p.Send(ctx, rec, done) })
}

// placeLocked partitions a record under the current epoch (queueLocked then queues it on its
// sink).
func (p *Producer) placeLocked(pd *pending) error {
	cur := p.desc.Current()
	var part int
	if pd.rec.NoKey && pd.rec.Origin != nil {
		part = keylessPartition(pd.rec, cur.Partitions)
	} else if pd.rec.NoKey {
		part = int(p.rr % uint64(cur.Partitions))
		p.rr++
	} else {
		r, err := p.part.Partition(pd.rec.Key, int32(cur.Partitions))
		if err != nil {
			return fmt.Errorf("%w: %v", wire.ErrPluginFailed, err)
		}
		part = int(r)
	}
	pd.epoch, pd.partition = cur.Epoch, part
	p.refreshTTL(pd)
	return nil
}

// queueLocked queues a placed record on its sink.
func (p *Producer) queueLocked(pd *pending) {
	s := p.sinks[pd.partition]
	if s == nil {
		s = newSink(p, pd.epoch, pd.partition)
		p.sinks[pd.partition] = s
		p.wg.Add(1)
		go s.run()
	}
	s.push(pd)
}

// keylessPartition places a keyless record that carries a thin client's identity where every
// retry of it will go, at any broker (spec/protocol.md §5.2, "Keyless records of the produce
// service"): spread round-robin, a retry of a record stored after all would be stored again in
// another partition, out of reach of JetStream's deduplication.
func keylessPartition(rec Record, partitions int) int {
	o := rec.Origin
	token := o.Token
	if token == "" {
		token = RecordToken(rec.Key, rec.NoKey, rec.Value)
	}
	h := sha256.New()
	h.Write([]byte("pctl-keyless-v1\x00"))
	h.Write([]byte(o.Producer + "-" + strconv.FormatUint(o.Seq, 10) + "-" + token))
	return int(binary.BigEndian.Uint64(h.Sum(nil)[:8]) % uint64(partitions))
}

// identity is a record's headers, fixed for all its sends (spec/protocol.md §5.1 step 3).
func (p *Producer) identity(pd *pending) nats.Header {
	h := nats.Header{}
	setTombstone(h, pd.rec.Tombstone, p.desc.Compact)
	id, n, token := p.id, pd.seq, ""
	if o := pd.rec.Origin; o != nil {
		id, n, token = o.Producer, o.Seq, o.Token
		if token == "" {
			token = RecordToken(pd.rec.Key, pd.rec.NoKey, pd.rec.Value)
		}
	} else if p.opts.ContentTokens {
		token = RecordToken(pd.rec.Key, pd.rec.NoKey, pd.rec.Value)
	} else {
		token = NewToken()
	}
	SetIdentity(h, pd.rec.Key, pd.rec.NoKey, id, n, token)
	return h
}

// SetIdentity sets a record's protocol headers (spec/protocol.md §5.1 step 3): its key (none for
// a keyless record), its producer id and sequence, and its deduplication id
// "<producer>-<seq>-<token>". The producer and 'pctl bench produce' (its raw baselines) build
// their headers with it, so that the benchmark publishes what the product does.
func SetIdentity(h nats.Header, key []byte, noKey bool, producer string, seq uint64, token string) {
	if !noKey {
		h.Set(wire.HeaderKey, wire.EncodeKey(key))
	}
	n := strconv.FormatUint(seq, 10)
	h.Set(wire.HeaderProducer, producer)
	h.Set(wire.HeaderSeq, n)
	h.Set(wire.HeaderMsgID, producer+"-"+n+"-"+token)
}

// renew gives a record that is provably not stored a new deduplication id (a fresh token; the
// producer id and sequence stay): the server may still count its old id as being stored. The
// 10158 count is per id, so the new id counts from zero: a hole is re-sent at once under its new
// token, stuck old id or not (spec/protocol.md §5.1.5), and a later stuck error names the id
// that got the answers.
func (p *Producer) renew(pd *pending) {
	h := nats.Header{}
	for k, v := range pd.hdr {
		h[k] = v
	}
	id := h.Get(wire.HeaderMsgID)
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		id = id[:i]
	}
	h.Set(wire.HeaderMsgID, id+"-"+NewToken())
	pd.hdr, pd.floors = h, nil
	pd.inProcess.Renewed()
}

func (p *Producer) finish(pd *pending, r Result) {
	r.ProducerSeq = pd.seq
	if pd.done != nil {
		pd.done(r)
	}
	p.mu.Lock()
	p.buffered--
	p.finished++
	p.cond.Broadcast()
	p.mu.Unlock()
}

// fail makes the producer unusable and fails every record not yet acknowledged.
func (p *Producer) fail(err error) {
	p.mu.Lock()
	if p.fatal == nil {
		p.fatal = err
		p.opts.Logf("producer %s: %v", p.id, err)
	}
	p.check.Close() // every record not acknowledged fails
	held := p.held
	p.held = nil
	sinks := p.sinks
	p.mu.Unlock()
	for _, pd := range held {
		p.finish(pd, Result{Err: err})
	}
	for _, s := range sinks {
		s.abort(err)
	}
}

// Flush waits until every record sent so far is acknowledged or failed.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.buffered > 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("flush: %d records not yet acknowledged: %w", p.buffered, ctx.Err())
		}
		WaitCond(ctx, p.cond)
	}
	return p.fatal
}

// Close flushes and stops the producer. It waits for the records sent so far until ctx ends, or
// until no record was acknowledged or failed for ProducerOptions.CloseIdle (the broker or the
// cluster is gone: a producer retries for ever otherwise); the records still unacknowledged then
// fail (their callbacks run before Close returns). Close never blocks for longer than that plus
// closeStopLimit. A second Close, or one concurrent with the first, is a no-op.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return nil
	}
	p.closing = true
	p.mu.Unlock()
	err := p.flushUntilIdle(ctx, p.opts.CloseIdle)
	p.mu.Lock()
	p.closed = true
	p.check.Close()
	sinks := p.sinks
	p.cond.Broadcast()
	p.mu.Unlock()
	close(p.done)
	closedErr := fmt.Errorf("%w: producer closed before the record was acknowledged", wire.ErrUnavailable)
	for _, s := range sinks {
		s.abort(closedErr)
	}
	stopped := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(stopped)
	}()
	t := time.NewTimer(closeStopLimit)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		// Not expected: every goroutine of the producer watches p.done. Say so rather than hang.
		err = errors.Join(err, fmt.Errorf("%w: producer %s: its goroutines did not stop within %v of Close", wire.ErrInternal, p.id, closeStopLimit))
	}
	for _, sub := range p.subs {
		_ = sub.Unsubscribe()
	}
	if p.unlisten != nil {
		p.unlisten()
	}
	// Records no goroutine holds any more: handed back by sinks the control loop did not take,
	// or held while it repartitioned.
	for more := true; more; {
		select {
		case ev := <-p.events:
			for _, pd := range ev.left {
				p.finish(pd, Result{Err: closedErr})
			}
		default:
			more = false
		}
	}
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, pd := range held {
		p.finish(pd, Result{Err: closedErr})
	}
	return err
}

// closeStopLimit bounds Close's wait for the producer's goroutines once it stopped them.
const closeStopLimit = 10 * time.Second

// flushUntilIdle is Flush that also gives up when no record finished for idle.
func (p *Producer) flushUntilIdle(ctx context.Context, idle time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, since := p.finished, time.Now()
	for p.buffered > 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("close: %d records not yet acknowledged: %w", p.buffered, ctx.Err())
		}
		if p.finished != last {
			last, since = p.finished, time.Now()
		}
		left := idle - time.Since(since)
		if left <= 0 {
			return fmt.Errorf("%w: close: no record acknowledged for %v with %d outstanding (the broker or cluster is unreachable?); they fail", wire.ErrUnavailable, idle, p.buffered)
		}
		wctx, cancel := context.WithTimeout(ctx, left)
		WaitCond(wctx, p.cond)
		cancel()
	}
	return p.fatal
}

// WaitCond waits on c (whose lock is held) until signalled or ctx is done.
func WaitCond(ctx context.Context, c *sync.Cond) {
	stop := context.AfterFunc(ctx, func() {
		c.L.Lock()
		c.Broadcast()
		c.L.Unlock()
	})
	c.Wait()
	stop()
}

// requestCheck asks the control loop to re-read the descriptor (coalesced).
func (p *Producer) requestCheck() {
	select {
	case p.checks <- struct{}{}:
	default:
	}
}

// onReply routes a fast-batch reply to the sink whose batch it names. Replies to batches no
// longer open are dropped (the sink settled them already).
func (p *Producer) onReply(m *nats.Msg) {
	batch, seq, op, ok := parseFBSubject(p.inbox, m.Subject)
	if !ok {
		return
	}
	v, ok := p.batches.Load(batch)
	if !ok {
		return
	}
	s := v.(*sink)
	r := parseFBReply(m, batch, seq, op)
	select {
	case s.replies <- r:
	case <-s.done:
	}
}

// control re-reads the descriptor when asked (a topic event, a stall, no responders) and starts
// a repartition when the epoch moved on (or a sink found it fenced). It runs alone, so
// coordination needs no further locking.
func (p *Producer) control() {
	defer p.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-p.done
		cancel()
	}()
	for {
		select {
		case ev := <-p.events:
			if !ev.final && ev.fenced != nil && ev.fenced.Current().Epoch > p.Epoch() {
				p.repartition(ctx, ev.fenced)
			}
		case <-p.checks:
			desc, err := p.fetchQuick(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, wire.ErrNotFound) || errors.Is(err, wire.ErrPermission) {
					p.fail(err)
				}
				continue // broker unreachable: the sinks' own timeouts settle their batches
			}
			if desc.Current().Epoch > p.Epoch() {
				p.opts.Logf("producer %s: epoch %d of topic %s is current: settling partitions of epoch %d", p.id, desc.Current().Epoch, p.topic, p.Epoch())
				p.repartition(ctx, desc)
			}
		case <-p.done:
			return
		}
	}
}

// repartition moves every unacknowledged record to the new epoch, in the original order. Every
// old sink settles its open batch first (so nothing it sent can still be stored), then hands
// back its records.
func (p *Producer) repartition(ctx context.Context, desc *wire.Topic) {
	p.mu.Lock()
	p.switching = true
	old := p.sinks
	var left []*pending
	waiting := map[*sink]bool{}
	// Every old sink is fenced (it transmits nothing more) and the machine learns of the newer
	// epoch in one step for each sink, under the sinks' own locks: a sink takes each record it
	// transmits, and reads its fence before it hands its records back, under its lock, so it
	// neither transmits after the machine's newer epoch nor hands back before it. (Fencing a sink
	// and then telling the machine let a sink with nothing in flight hand back in between: chaos
	// seed 99 stopped on "handed its records back with no newer epoch to move to".) No network
	// call is made under these locks.
	for _, s := range old {
		waiting[s] = true
		s.mu.Lock()
		s.fenceDesc = desc
	}
	p.check.NewEpoch(desc.Current().Epoch)
	for _, s := range old {
		s.mu.Unlock()
		s.signal()
	}
	p.mu.Unlock()
	for len(waiting) > 0 {
		select {
		case ev := <-p.events:
			if ev.final && waiting[ev.s] {
				left = append(left, ev.left...)
				delete(waiting, ev.s)
				if ev.fenced != nil && ev.fenced.Current().Epoch > desc.Current().Epoch {
					desc = ev.fenced
				}
			}
		case <-p.done:
			for _, pd := range left {
				p.finish(pd, Result{Err: fmt.Errorf("%w: producer closed before the record was acknowledged", wire.ErrUnavailable)})
			}
			return
		}
	}
	if err := p.install(ctx, desc); err != nil {
		p.fail(err)
		for _, pd := range left {
			p.finish(pd, Result{Err: err})
		}
		p.mu.Lock()
		p.switching = false
		p.mu.Unlock()
		return
	}
	p.mu.Lock()
	left = append(left, p.held...)
	p.held = nil
	// The sticky machine decides what is re-sent and in what order (spec/protocol.md §5.1.2 step
	// 4: their original send order, whatever sink they came from); the producer places each
	// record when the machine asks (its partitioner: pure computation under p.mu) and queues
	// them as the machine's plan says.
	pool := make(map[uint64]*pending, len(left))
	for _, pd := range left {
		pool[pd.seq] = pd
	}
	errs := map[uint64]error{}
	plan, lost, ok := p.check.Resend(desc.Current().Epoch, func(seq uint64) (int, error) {
		pd := pool[seq]
		if pd == nil {
			return 0, fmt.Errorf("%w: the sticky machine re-sends record %d, which the producer does not hold", wire.ErrInternal, seq)
		}
		if err := p.placeLocked(pd); err != nil {
			errs[seq] = err
			return 0, err
		}
		return pd.partition, nil
	})
	var failed []*pending
	var failErrs []error
	for _, seq := range lost {
		if pd := pool[seq]; pd != nil {
			delete(pool, seq)
			failed, failErrs = append(failed, pd), append(failErrs, errs[seq])
		}
	}
	queued := 0
	for _, pl := range plan {
		pd := pool[pl.Seq]
		if pd == nil {
			continue // the machine's bookkeeping, not a record of ours: nothing to send
		}
		delete(pool, pl.Seq)
		p.queueLocked(pd)
		queued++
	}
	if len(pool) > 0 {
		// Records the machine did not re-send (it is off: closed, failed, or stopped at a
		// violation): they fail rather than wait for ever.
		var err error
		switch {
		case p.fatal != nil:
			err = p.fatal
		case p.closing:
			err = fmt.Errorf("%w: producer closed before the record was acknowledged", wire.ErrUnavailable)
		default:
			err = fmt.Errorf("%w: producer %s: the sticky machine (spec/protocol.md §5.1.2) did not re-send this record under epoch %d (decided: %v); report this as a bug", wire.ErrInternal, p.id, desc.Current().Epoch, ok)
		}
		for _, pd := range left {
			if pool[pd.seq] != nil {
				failed, failErrs = append(failed, pd), append(failErrs, err)
			}
		}
	}
	p.switching = false
	p.mu.Unlock()
	p.resent.Add(int64(queued))
	p.hookRepartitioned(desc.Current().Epoch, queued) // hooks.go
	for i, pd := range failed {
		p.finish(pd, Result{Err: failErrs[i]})
	}
}

func descEpoch(t *wire.Topic) string {
	if t == nil {
		return "unreachable"
	}
	s := fmt.Sprintf("epoch %d", t.Current().Epoch)
	if t.Change != nil {
		s += fmt.Sprintf(", changing to %d (%s)", t.Change.To, t.Change.State)
	}
	return s
}

// checkCompaction refuses what a tombstone or a compacted topic cannot carry (spec/protocol.md
// §10): a keyless record on a compacted topic, a keyless tombstone, a tombstone with a value.
func (p *Producer) checkCompaction(rec Record) error {
	p.mu.Lock()
	compact, backfill := p.desc.Compact != nil, p.desc.Backfill
	p.mu.Unlock()
	return CheckCompaction(p.topic, compact, backfill, rec)
}

// CheckCompaction is checkCompaction for a topic whose compaction and backfill are given.
func CheckCompaction(topic string, compact, backfill bool, rec Record) error {
	switch {
	case compact && rec.NoKey:
		return fmt.Errorf("%w: topic %s is compacted: every record needs a key (a keyless record cannot be compacted)", wire.ErrBadRequest, topic)
	case backfill && rec.NoKey:
		return fmt.Errorf("%w: topic %s backfills at epoch changes: a keyless record cannot be backfilled: give it a key, or create the topic without --backfill", wire.ErrBadRequest, topic)
	case rec.Tombstone && rec.NoKey:
		return fmt.Errorf("%w: a tombstone deletes a key: it needs one", wire.ErrBadRequest)
	case rec.Tombstone && len(rec.Value) > 0:
		return fmt.Errorf("%w: a tombstone has no value (%d bytes given)", wire.ErrBadRequest, len(rec.Value))
	}
	return nil
}

// refreshTTL gives a tombstone of a compacted topic the Nats-TTL of the descriptor it is (re-)sent
// under (spec/protocol.md §10.2): a tombstone created under an earlier descriptor and re-sent into
// a later epoch gets the hold of a backfill that runs there, not the first send's delete
// retention, which could expire before the backfill reaches its key. The TTL is the only header
// that changes: the duplicate check (sameRecord) does not compare it. p.mu is held; the header is
// copied, not changed, as a reader of the old one may still hold it; no sink has pd now (a new
// record, or one an old sink handed back), so pd.hdr itself is not read meanwhile.
func (p *Producer) refreshTTL(pd *pending) {
	if !pd.rec.Tombstone || p.desc.Compact == nil {
		return
	}
	ttl := tombstoneTTL(p.desc.Compact)
	if pd.hdr.Get(wire.HeaderTTL) == ttl {
		return
	}
	h := make(nats.Header, len(pd.hdr))
	for k, v := range pd.hdr {
		h[k] = v
	}
	h.Set(wire.HeaderTTL, ttl)
	pd.hdr = h
}

// tombstoneTTL is a compacted topic's tombstone Nats-TTL: its delete retention in whole seconds,
// at least 1.
func tombstoneTTL(compact *wire.Compaction) string {
	return strconv.FormatInt(max(compact.DeleteRetentionMS/1000, 1), 10)
}

// setTombstone marks a tombstone's message: on a compacted topic with its delete retention as
// JetStream's message TTL.
func setTombstone(h nats.Header, tombstone bool, compact *wire.Compaction) {
	if !tombstone {
		return
	}
	h.Set(wire.HeaderTombstone, "true")
	if compact != nil {
		h.Set(wire.HeaderTTL, tombstoneTTL(compact))
	}
}
