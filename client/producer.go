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
	// On a compacted topic it removes the key's value at once and is itself removed after the
	// topic's delete retention.
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
}

// Result reports the fate of one record. Err == nil means the broker acknowledged it: it is
// stored and will be delivered to every consumer group.
type Result struct {
	Partition   int    // partition (stream) the record is stored in
	Epoch       int    // epoch it was produced under
	Seq         uint64 // stream sequence
	ProducerSeq uint64 // this producer's sequence number of the record (1, 2, ...)
	Duplicate   bool   // a retry found the record already stored (no second copy was written)
	Err         error
}

// ProducerOptions configures a producer. Zero values mean defaults.
type ProducerOptions struct {
	// ID identifies the producer in record headers and deduplication ids. Default: random.
	ID string
	// MaxInFlight bounds unacknowledged publishes per partition. Default 1024.
	MaxInFlight int
	// MaxBuffered bounds records sent but not yet acknowledged; Send blocks beyond it.
	// Default 65536.
	MaxBuffered int
	// Logf receives the producer's decisions after failures (retry in place, repartition).
	Logf func(format string, args ...any)
	// Partitioner overrides how the producer obtains a partitioner for an epoch (the broker's
	// produce service passes its own, already loaded). Default: Client.Partitioner.
	Partitioner func(ctx context.Context, p wire.Partitioner) (partitioner.Partitioner, error)
	// Hooks observe the producer (hooks.go). Default: none.
	Hooks []Hook
}

// Producer produces keyed records to one topic, partitioning them on the client with the
// topic's WebAssembly module, and publishes asynchronously with acknowledgements.
//
// Order: records with the same key are stored in the order Send was called, and a consumer group
// delivers them in that order, across epoch changes. When a publish is refused because its epoch
// was fenced, the producer refreshes the topic, waits for every record in flight, and re-sends that
// record and every later unacknowledged one, in the original order, under the new epoch. A
// publish whose acknowledgement was lost is retried with the same deduplication id, so a retry
// never stores a second copy.
//
// A Producer is safe for concurrent use; records sent from different goroutines are ordered by
// the order their Send calls took effect.
type Producer struct {
	c     *Client
	topic string
	id    string
	opts  ProducerOptions

	mu        sync.Mutex
	cond      *sync.Cond
	desc      *wire.Topic
	part      partitioner.Partitioner
	sinks     map[int]*sink
	held      []*pending // records sent while the producer repartitions
	switching bool
	seq       uint64
	buffered  int
	rr        uint64
	fatal     error
	closed    bool

	events chan event
	done   chan struct{}
	wg     sync.WaitGroup

	resent atomic.Int64 // records re-sent after a fence
}

type pending struct {
	seq       uint64
	rec       Record
	done      func(Result)
	epoch     int
	partition int
	msg       *nats.Msg
	// ambiguous: some attempt's acknowledgement was lost, so the record may be stored; it stays
	// set until a search proves otherwise (a later "no responders" says nothing about it).
	ambiguous bool
	// floor is the sink's last acknowledged sequence before the record's first publish in its
	// current partition: if stored, the record is above it (a later record's acknowledgement
	// may be above the record itself).
	floor    uint64
	floorSet bool
	tries    int
}

type event struct {
	s     *sink
	left  []*pending // unacknowledged records, in order
	cause error      // why the sink paused (nil for a final event)
	final bool       // the sink stopped for good (asked to): nothing more comes from it
}

// NewProducer fetches the topic's descriptor and partitioner and returns a producer.
func (c *Client) NewProducer(ctx context.Context, topic string, opts ProducerOptions) (*Producer, error) {
	if opts.ID == "" {
		opts.ID = nuid.Next()
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 1024
	}
	if opts.MaxBuffered <= 0 {
		opts.MaxBuffered = 65536
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Partitioner == nil {
		opts.Partitioner = func(ctx context.Context, p wire.Partitioner) (partitioner.Partitioner, error) {
			return c.Partitioner(ctx, p)
		}
	}
	if err := wire.ValidGroup(opts.ID); err != nil {
		return nil, fmt.Errorf("%w: producer id %q: 1 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §2)", wire.ErrBadRequest, opts.ID)
	}
	p := &Producer{c: c, topic: topic, id: opts.ID, opts: opts, sinks: map[int]*sink{}, events: make(chan event, 64), done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	desc, err := p.fetch(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.install(ctx, desc); err != nil {
		return nil, err
	}
	c.onViolation(func(subject string) {
		if strings.HasPrefix(subject, wire.DataPrefix+"."+topic+".") {
			p.fail(permissionError(subject))
		}
	})
	p.wg.Add(1)
	go p.control()
	return p, nil
}

// ID returns the producer's id.
func (p *Producer) ID() string { return p.id }

// Resent returns how many records were re-sent under a new epoch after a fence.
func (p *Producer) Resent() int64 { return p.resent.Load() }

// Epoch returns the epoch the producer currently produces to.
func (p *Producer) Epoch() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.desc.Current().Epoch
}

func (p *Producer) fetch(ctx context.Context) (*wire.Topic, error) {
	for {
		t, _, err := p.c.Topic(ctx, p.topic)
		if err != nil {
			if errors.Is(err, wire.ErrUnavailable) && ctx.Err() == nil && strings.Contains(err.Error(), "being created") {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return nil, err
		}
		return t, nil
	}
}

// install makes desc the current layout (p.mu not held; called before the control loop starts
// or from it).
func (p *Producer) install(ctx context.Context, desc *wire.Topic) error {
	cur := desc.Current()
	part, err := p.opts.Partitioner(ctx, cur.Partitioner)
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
	done = p.hookProduced(&rec, done) // hooks.go
	if rec.NoKey && len(rec.Key) > 0 {
		return fmt.Errorf("%w: a keyless record (NoKey) has no Key", wire.ErrBadRequest)
	}
	if err := p.checkCompaction(rec); err != nil {
		return err
	}
	if len(rec.Key) > 65536 {
		return fmt.Errorf("%w: key of %d bytes; keys are at most 65536 bytes", wire.ErrBadRequest, len(rec.Key))
	}
	if max := p.c.nc.MaxPayload(); int64(len(rec.Value)+len(rec.Key)) > max {
		return fmt.Errorf("%w: record of %d bytes (key and value); the server takes messages of at most %d bytes", wire.ErrBadRequest, len(rec.Value)+len(rec.Key), max)
	}
	p.mu.Lock()
	for p.buffered >= p.opts.MaxBuffered && p.fatal == nil && !p.closed {
		if ctx.Err() != nil {
			p.mu.Unlock()
			return ctx.Err()
		}
		waitCond(ctx, p.cond)
	}
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("%w: producer is closed", wire.ErrBadRequest)
	}
	if p.fatal != nil {
		err := p.fatal
		p.mu.Unlock()
		return err
	}
	p.seq++
	pd := &pending{seq: p.seq, rec: rec, done: done}
	p.buffered++
	if p.switching {
		p.held = append(p.held, pd)
		p.mu.Unlock()
		return nil
	}
	err := p.assignLocked(pd)
	p.mu.Unlock()
	if err != nil {
		p.finish(pd, Result{Err: err})
	}
	return nil
}

// Produce sends one record and waits for its result.
func (p *Producer) Produce(ctx context.Context, rec Record) (Result, error) {
	ch := make(chan Result, 1)
	if err := p.Send(ctx, rec, func(r Result) { ch <- r }); err != nil {
		return Result{}, err
	}
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// assignLocked partitions a record under the current epoch and queues it on its sink.
func (p *Producer) assignLocked(pd *pending) error {
	cur := p.desc.Current()
	var part int
	if pd.rec.NoKey {
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
	pd.floorSet = false // its floor is taken at its first publish in this partition
	pd.msg = p.message(pd)
	s := p.sinks[part]
	if s == nil {
		s = newSink(p, cur.Epoch, part)
		p.sinks[part] = s
		p.wg.Add(1)
		go s.run()
	}
	s.push(pd)
	return nil
}

func (p *Producer) message(pd *pending) *nats.Msg {
	compact := p.desc.Compact
	m := nats.NewMsg(wire.RecordSubject(p.topic, pd.epoch, pd.partition, compact != nil, pd.rec.Key))
	m.Data = pd.rec.Value
	if !pd.rec.NoKey {
		m.Header.Set(wire.HeaderKey, wire.EncodeKey(pd.rec.Key))
	}
	setTombstone(m.Header, pd.rec.Tombstone, compact)
	id, n := p.id, pd.seq
	if o := pd.rec.Origin; o != nil {
		id, n = o.Producer, o.Seq
	}
	seq := strconv.FormatUint(n, 10)
	m.Header.Set(wire.HeaderProducer, id)
	m.Header.Set(wire.HeaderSeq, seq)
	m.Header.Set(wire.HeaderMsgID, id+"-"+seq)
	return m
}

func (p *Producer) finish(pd *pending, r Result) {
	r.ProducerSeq = pd.seq
	if pd.done != nil {
		pd.done(r)
	}
	p.mu.Lock()
	p.buffered--
	p.cond.Broadcast()
	p.mu.Unlock()
}

// fail makes the producer unusable and fails every record not yet acknowledged.
func (p *Producer) fail(err error) {
	p.mu.Lock()
	if p.fatal == nil {
		p.fatal = err
	}
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
		waitCond(ctx, p.cond)
	}
	return p.fatal
}

// Close flushes and stops the producer.
func (p *Producer) Close(ctx context.Context) error {
	err := p.Flush(ctx)
	p.mu.Lock()
	p.closed = true
	sinks := p.sinks
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, s := range sinks {
		s.close()
	}
	close(p.done)
	p.wg.Wait()
	return err
}

// waitCond waits on c (whose lock is held) until signalled or ctx is done.
func waitCond(ctx context.Context, c *sync.Cond) {
	stop := context.AfterFunc(ctx, func() {
		c.L.Lock()
		c.Broadcast()
		c.L.Unlock()
	})
	c.Wait()
	stop()
}

// control handles sink failures: transient ones are retried in place; a fence starts a
// repartition. It runs alone, so coordination needs no further locking.
func (p *Producer) control() {
	defer p.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-p.done
		cancel()
	}()
	backoff := 50 * time.Millisecond
	for {
		var ev event
		select {
		case ev = <-p.events:
		case <-p.done:
			return
		}
		if ev.final || ev.cause == nil {
			continue // a stop acknowledged outside a repartition (close)
		}
		desc, err := p.fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, wire.ErrNotFound) || errors.Is(err, wire.ErrPermission) {
				p.fail(err)
				ev.s.abort(err)
				continue
			}
			desc = nil // broker unreachable: retry in place
		}
		if desc != nil && desc.Current().Epoch > ev.s.epoch {
			p.opts.Logf("producer %s: partition %d of epoch %d: %v; epoch %d is current: re-sending %d+ records in order", p.id, ev.s.partition, ev.s.epoch, ev.cause, desc.Current().Epoch, len(ev.left))
			p.repartition(ctx, ev, desc)
			backoff = 50 * time.Millisecond
			continue
		}
		// Same epoch: the stream is unavailable for a moment (or an epoch change is fencing it
		// and not yet active). Retry the same records, in order, on the same subject.
		p.opts.Logf("producer %s: partition %d of epoch %d: %v (descriptor: %v); retrying %d records in %v", p.id, ev.s.partition, ev.s.epoch, ev.cause, descEpoch(desc), len(ev.left), backoff)
		time.Sleep(backoff)
		if backoff < time.Second {
			backoff *= 2
		}
		ev.s.resume(ev.left)
	}
}

// repartition moves every unacknowledged record to the new epoch, in the original order.
func (p *Producer) repartition(ctx context.Context, first event, desc *wire.Topic) {
	p.mu.Lock()
	p.switching = true
	old := p.sinks
	p.mu.Unlock()
	// Every old sink, the one that failed included (records may have reached its queue after its
	// failure event), stops and hands back everything unacknowledged. A sink may send failure
	// events before its final one: all their records count.
	left := append([]*pending(nil), first.left...)
	waiting := map[*sink]bool{}
	for _, s := range old {
		waiting[s] = true
		s.requestStop()
	}
	for len(waiting) > 0 {
		select {
		case ev := <-p.events:
			if waiting[ev.s] {
				left = append(left, ev.left...)
				if ev.final {
					delete(waiting, ev.s)
				}
			}
		case <-p.done:
			return
		}
	}
	for _, s := range old {
		s.close() // paused or stopped: let their goroutines end
	}
	// Records whose acknowledgement was lost may be stored in the fenced partition: look for
	// them between the last acknowledged sequence and the partition's boundary.
	left = p.resolveAmbiguous(ctx, desc, left, old)
	if err := p.install(ctx, desc); err != nil {
		p.fail(err)
		for _, pd := range left {
			p.finish(pd, Result{Err: err})
		}
		return
	}
	p.mu.Lock()
	left = append(left, p.held...)
	p.held = nil
	sort.Slice(left, func(i, j int) bool { return left[i].seq < left[j].seq })
	var failed []*pending
	var errs []error
	for _, pd := range left {
		if err := p.assignLocked(pd); err != nil {
			failed = append(failed, pd)
			errs = append(errs, err)
		}
	}
	p.switching = false
	p.mu.Unlock()
	p.resent.Add(int64(len(left) - len(failed)))
	p.hookRepartitioned(desc.Current().Epoch, len(left)-len(failed)) // hooks.go
	for i, pd := range failed {
		p.finish(pd, Result{Err: errs[i]})
	}
}

func (p *Producer) resolveAmbiguous(ctx context.Context, desc *wire.Topic, left []*pending, sinks map[int]*sink) []*pending {
	var out []*pending
	for _, pd := range left {
		if !pd.ambiguous {
			out = append(out, pd)
			continue
		}
		seq, found := p.findStored(ctx, desc, pd, sinks[pd.partition])
		if found {
			p.finish(pd, Result{Partition: pd.partition, Epoch: pd.epoch, Seq: seq, Duplicate: true})
			continue
		}
		pd.ambiguous = false
		out = append(out, pd)
	}
	return out
}

func (p *Producer) findStored(ctx context.Context, desc *wire.Topic, pd *pending, s *sink) (uint64, bool) {
	e := desc.Epoch(pd.epoch)
	if e == nil || pd.partition >= len(e.Boundaries) {
		return 0, false
	}
	from := uint64(1)
	if pd.floorSet {
		from = pd.floor + 1
	}
	stream, err := p.c.js.Stream(ctx, wire.StreamName(p.topic, pd.partition))
	if err != nil {
		return 0, false
	}
	id := pd.msg.Header.Get(wire.HeaderMsgID)
	for seq := from; seq <= e.Boundaries[pd.partition]; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		if m.Header.Get(wire.HeaderMsgID) == id {
			return seq, true
		}
	}
	return 0, false
}

// sink publishes one partition's records of one epoch, in order, with up to MaxInFlight
// unacknowledged.
type sink struct {
	p         *Producer
	epoch     int
	partition int

	mu       sync.Mutex
	queue    []*pending
	stopping bool
	closing  bool
	paused   bool // after a failure, until the control loop resumes or stops it
	aborted  error
	wake     chan struct{}

	lastAcked atomic.Uint64
}

func newSink(p *Producer, epoch, partition int) *sink {
	return &sink{p: p, epoch: epoch, partition: partition, wake: make(chan struct{}, 1)}
}

func (s *sink) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sink) push(pd *pending) {
	s.mu.Lock()
	s.queue = append(s.queue, pd)
	s.mu.Unlock()
	s.signal()
}

func (s *sink) requestStop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.signal()
}

func (s *sink) close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.signal()
}

func (s *sink) abort(err error) {
	s.mu.Lock()
	if s.aborted == nil {
		s.aborted = err
	}
	s.mu.Unlock()
	s.signal()
}

// resume re-queues records (in order, ahead of newer ones) after a transient failure.
func (s *sink) resume(left []*pending) {
	s.mu.Lock()
	s.queue = append(append([]*pending(nil), left...), s.queue...)
	s.paused = false
	s.mu.Unlock()
	s.signal()
}

type flight struct {
	pd  *pending
	fut jetstream.PubAckFuture
}

func (s *sink) run() {
	defer s.p.wg.Done()
	var inflight []flight
	var failed []*pending
	var cause error
	for {
		s.mu.Lock()
		aborted, stopping, closing := s.aborted, s.stopping, s.closing
		var batch []*pending
		if aborted == nil && cause == nil && !stopping && !s.paused {
			n := s.p.opts.MaxInFlight - len(inflight)
			if n > len(s.queue) {
				n = len(s.queue)
			}
			if n > 0 {
				batch = append(batch, s.queue[:n]...)
				s.queue = s.queue[n:]
			}
		}
		s.mu.Unlock()
		if aborted != nil {
			s.drainAborted(inflight, failed, aborted)
			return
		}
		for _, pd := range batch {
			pd.tries++
			if !pd.floorSet {
				pd.floor, pd.floorSet = s.lastAcked.Load(), true
			}
			fut, err := s.p.c.js.PublishMsgAsync(pd.msg, jetstream.WithRetryAttempts(0))
			if err != nil {
				if permanent(err) {
					s.p.finish(pd, Result{Partition: s.partition, Epoch: s.epoch, Err: fmt.Errorf("%w: record %d cannot be published: %v", wire.ErrBadRequest, pd.seq, err)})
					continue
				}
				// Could not even enqueue (connection closed, ...): treat as a failure of this
				// record and everything after it.
				if cause == nil {
					cause = err
				}
				failed = append(failed, pd)
				continue
			}
			inflight = append(inflight, flight{pd, fut})
		}
		if len(inflight) == 0 {
			if cause != nil || (stopping && len(failed) == 0) {
				// Settled: hand everything unacknowledged to the control loop.
				s.mu.Lock()
				left := append(failed, s.queue...)
				s.queue = nil
				if cause != nil && !stopping {
					s.paused = true
				}
				s.mu.Unlock()
				if stopping {
					s.p.events <- event{s: s, left: left, final: true}
					return
				}
				s.p.events <- event{s: s, left: left, cause: cause}
				failed, cause = nil, nil
				continue
			}
			if closing {
				return
			}
			<-s.wake
			continue
		}
		head := inflight[0]
		select {
		case ack := <-head.fut.Ok():
			inflight = inflight[1:]
			// After a failure, a later record that still got stored is acknowledged normally;
			// for a fence this does not happen (every later publish is refused too).
			s.lastAcked.Store(ack.Sequence)
			s.p.finish(head.pd, Result{Partition: s.partition, Epoch: s.epoch, Seq: ack.Sequence, Duplicate: ack.Duplicate})
		case err := <-head.fut.Err():
			inflight = inflight[1:]
			switch {
			case permanent(err):
				s.p.finish(head.pd, Result{Partition: s.partition, Epoch: s.epoch, Err: fmt.Errorf("%w: record %d refused by partition %d: %v", wire.ErrBadRequest, head.pd.seq, s.partition, err)})
			default:
				if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
					head.pd.ambiguous = true
				}
				failed = append(failed, head.pd)
				if cause == nil {
					cause = err
				}
			}
		case <-s.wake:
		}
	}
}

func (s *sink) drainAborted(inflight []flight, failed []*pending, err error) {
	for _, f := range inflight {
		s.p.finish(f.pd, Result{Err: err})
	}
	for _, pd := range failed {
		s.p.finish(pd, Result{Err: err})
	}
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, pd := range q {
		s.p.finish(pd, Result{Err: err})
	}
}

// permanent reports whether a publish error can never succeed for this record (retrying would
// not help): the stream refused the message itself.
func permanent(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10054: // message size exceeds maximum
			return true
		}
		return strings.Contains(strings.ToLower(apiErr.Description), "maximum message size") || strings.Contains(apiErr.Description, "exceeds")
	}
	return errors.Is(err, nats.ErrMaxPayload)
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
	compact := p.desc.Compact != nil
	p.mu.Unlock()
	return checkCompaction(p.topic, compact, rec)
}

func checkCompaction(topic string, compact bool, rec Record) error {
	switch {
	case compact && rec.NoKey:
		return fmt.Errorf("%w: topic %s is compacted: every record needs a key (a keyless record cannot be compacted)", wire.ErrBadRequest, topic)
	case rec.Tombstone && rec.NoKey:
		return fmt.Errorf("%w: a tombstone deletes a key: it needs one", wire.ErrBadRequest)
	case rec.Tombstone && len(rec.Value) > 0:
		return fmt.Errorf("%w: a tombstone has no value (%d bytes given)", wire.ErrBadRequest, len(rec.Value))
	}
	return nil
}

// setTombstone marks a tombstone's message: on a compacted topic with its delete retention as
// JetStream's message TTL.
func setTombstone(h nats.Header, tombstone bool, compact *wire.Compaction) {
	if !tombstone {
		return
	}
	h.Set(wire.HeaderTombstone, "true")
	if compact != nil {
		h.Set(wire.HeaderTTL, strconv.FormatInt(max(compact.DeleteRetentionMS/1000, 1), 10))
	}
}
