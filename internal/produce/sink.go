package produce

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/proto"
)

// A sink sends one partition's records of one epoch as a series of JetStream fast batches
// (spec/protocol.md §5.1.2): one batch open at a time, many records in flight inside it,
// committed when the queue runs empty or the batch is full. After any anomaly it stops sending,
// settles the open batch (learns which prefix of it is stored) and re-sends the rest in a new
// batch; when its epoch was fenced it hands the rest back to the producer instead.
//
// The run goroutine owns everything below the mutex; other goroutines only queue records and
// set the control flags.
type sink struct {
	p         *Producer
	epoch     int
	partition int
	subject   string // where the batch's EOB goes (wire.BatchEndSubject)
	stream    string
	compact   bool // a compacted topic: a record superseded in its batch counts as stored (spec §10.1)
	keys      bool // key subjects (compacted or backfilled): each record goes to its key's subject (spec §10.1)

	mu        sync.Mutex
	queue     []*pending
	fenceDesc *wire.Topic // the producer says this descriptor ended the sink's epoch (set by repartition: the sink settles its open batch and stops, handing back its records)
	aborted   error
	connLost  bool // a disconnect happened since the run loop last looked
	wake      chan struct{}

	replies chan fbReply
	done    chan struct{} // closed when run returns

	// run goroutine only
	fencedSelf *wire.Topic // the sink found its epoch fenced and waits to be stopped
	floor      uint64      // every record this sink stores is above this stream sequence
	floorKnown bool
	// verify: the stream is on a cluster. nats-server 2.15.2 counts, in flow acks and a batch's
	// PubAck, batch messages whose raft proposals a leader's term change dropped (the stored
	// messages are then not a prefix of the batch). So on a cluster records finish only when
	// their batch is confirmed (confirm): the leader did not change since the batch began, or
	// the batch was read back and each record found.
	verify      bool
	leader      string    // the stream leader when last checked (verify)
	leaderSince time.Time // when it was elected, as the server said
	replicas    int       // the stream's replicas when last checked
	holes       int       // records a committed batch claimed that were not stored (re-sent)
	b           *batch
	timer       *time.Timer
	backoff     time.Duration
}

// batch is the open fast batch: recs[i] was sent with batch seq i+1.
type batch struct {
	id        string
	recs      []*pending
	acked     int    // records 1..acked are persisted and finished
	flowed    int    // records 1..flowed are persisted says a flow ack (the window's base)
	commit    uint64 // batch seq of the commit message once sent (n for op 2, n+1 for an EOB)
	anomaly   string // why the batch must be settled; "" while clean
	ended     bool   // the server ended the batch (gap or error): a PubAck is on its way
	unknown   bool   // the server no longer knows the batch (refusal 10208)
	never     bool   // the first message was refused: nothing of the batch is stored
	noResp    bool   // no responders: no stream on the subject (fenced?)
	pubAck    *fbReply
	progress  time.Time // last reply
	checked   time.Time // last stall check
	transient bool      // the anomaly calls for a pause before re-sending
	// keys holds the Pctl-Key of each keyed record in recs while the per-key rule holds.
	keys map[string]struct{}
}

func newSink(p *Producer, epoch, partition int) *sink {
	compact, keys := p.desc.Compact != nil, p.desc.KeySubjects()
	return &sink{p: p, epoch: epoch, partition: partition, compact: compact, keys: keys,
		subject: wire.BatchEndSubject(p.topic, epoch, partition, keys), stream: wire.StreamName(p.topic, partition),
		wake: make(chan struct{}, 1), replies: make(chan fbReply, 2*p.opts.MaxInFlight+256), done: make(chan struct{})}
}

// id is the sink's (epoch, partition), as the sticky machine names it.
func (s *sink) id() proto.SinkID { return proto.SinkID{Epoch: s.epoch, Partition: s.partition} }

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

// abort fails every record of the sink and stops it.
func (s *sink) abort(err error) {
	s.mu.Lock()
	if s.aborted == nil {
		s.aborted = err
	}
	s.mu.Unlock()
	s.signal()
}

func (s *sink) connChanged(connected bool) {
	if !connected {
		s.mu.Lock()
		s.connLost = true
		s.mu.Unlock()
	}
	s.signal()
}

func (s *sink) logf(format string, args ...any) {
	s.p.opts.Logf("producer %s: partition %d of epoch %d: "+format, append([]any{s.p.id, s.partition, s.epoch}, args...)...)
}

func (s *sink) run() {
	defer s.p.wg.Done()
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.p.done:
			cancel()
		case <-s.done:
		}
	}()
	s.timer = time.NewTimer(time.Hour)
	s.timer.Stop()
	for {
		s.mu.Lock()
		aborted, fenceDesc, connLost := s.aborted, s.fenceDesc, s.connLost
		s.connLost = false
		s.mu.Unlock()
		if aborted == nil && ctx.Err() != nil {
			// The producer stopped (Close): nothing more can be sent or learnt.
			aborted = fmt.Errorf("%w: producer closed before the record was acknowledged", wire.ErrUnavailable)
		}
		if aborted != nil {
			s.failAll(aborted)
			s.exit(event{s: s, final: true})
			return
		}
		if s.fencedSelf != nil && fenceDesc == nil {
			// Fenced: wait for the control loop to stop the sink (it asked for that already).
			select {
			case <-s.wake:
			case <-ctx.Done():
			}
			continue
		}
		if b := s.b; b != nil {
			if connLost && b.anomaly == "" && (len(b.recs) > b.acked || b.commit > 0) {
				s.anomalous(b, "the connection was lost with records in flight")
			}
			if fenceDesc != nil && b.anomaly == "" {
				s.anomalous(b, fmt.Sprintf("epoch %d is current", fenceDesc.Current().Epoch))
			}
			if b.anomaly != "" {
				fenced, err := s.settle(ctx, fenceDesc)
				if err != nil {
					if ctx.Err() == nil {
						s.p.fail(err)
					}
					continue // aborted now: the top of the loop fails the records
				}
				if fenced != nil && fenceDesc == nil {
					s.fencedSelf = fenced
					select {
					case s.p.events <- event{s: s, fenced: fenced}:
					case <-s.p.done:
					}
				}
				continue
			}
		} else if fenceDesc != nil {
			left := s.takeQueue()
			s.p.check.HandBack(s.id())
			s.exit(event{s: s, left: left, fenced: fenceDesc, final: true})
			return
		}
		if s.b == nil && !s.floorKnown && s.queued() > 0 {
			if err := s.readFloor(ctx); err != nil {
				if ctx.Err() == nil {
					s.p.fail(err)
				}
				continue
			}
		}
		s.fill()
		s.wait(ctx)
	}
}

// exit hands the sink's last event to the control loop (unless the producer stopped).
func (s *sink) exit(ev event) {
	if s.b != nil {
		s.p.batches.Delete(s.b.id)
	}
	select {
	case s.p.events <- ev:
	case <-s.p.done:
		for _, pd := range ev.left {
			s.p.finish(pd, Result{Err: fmt.Errorf("%w: producer closed before the record was acknowledged", wire.ErrUnavailable)})
		}
	}
}

func (s *sink) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// takeQueue returns every record not acknowledged, the open batch's first, in order.
func (s *sink) takeQueue() []*pending {
	var left []*pending
	if s.b != nil {
		left = append(left, s.b.recs[s.b.acked:]...)
		s.p.batches.Delete(s.b.id)
		s.b = nil
	}
	s.mu.Lock()
	left = append(left, s.queue...)
	s.queue = nil
	s.mu.Unlock()
	return left
}

func (s *sink) failAll(err error) {
	for _, pd := range s.takeQueue() {
		s.p.finish(pd, Result{Err: err})
	}
}

// readFloor reads the stream's last sequence before the sink's first batch, and checks that the
// stream takes fast batches.
func (s *sink) readFloor(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		st, err := s.p.conn.JS.Stream(ctx, s.stream)
		if err == nil {
			info := st.CachedInfo()
			if !info.Config.AllowBatchPublish {
				return fmt.Errorf("%w: partition stream %s does not allow fast batch publishing (allow_batched), which pctl's producer needs (spec/protocol.md §5.1); restart 'pctl serve' with this version: it updates the streams of existing topics", wire.ErrUnavailable, s.stream)
			}
			s.floor, s.floorKnown = info.State.LastSeq, true
			s.verify = info.Cluster != nil && info.Cluster.Name != "" || s.p.opts.TestVerify
			s.noteLeader(info)
			return nil
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if _, ferr := s.p.fetch(ctx); ferr != nil {
				return ferr
			}
			return fmt.Errorf("%w: partition stream %s of topic %s does not exist", wire.ErrNotFound, s.stream, s.p.topic)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt%10 == 9 {
			s.logf("reading stream %s: %v; retrying", s.stream, err)
		}
		if !sleepCtx(ctx, s.pause(attempt)) {
			return ctx.Err()
		}
	}
}

// pause is the back-off before retry number attempt: 50 ms doubling up to 1 s.
func (s *sink) pause(attempt int) time.Duration {
	d := 50 * time.Millisecond
	for i := 0; i < attempt && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fill opens a batch if there is none and records wait, sends records while the window allows,
// and commits when the queue ran empty or the batch is full.
func (s *sink) fill() {
	if s.b == nil {
		if s.queued() == 0 || !s.p.conn.NC.IsConnected() {
			return
		}
		s.b = &batch{id: randomHex(16), progress: time.Now()}
		s.b.checked = s.b.progress
		s.p.batches.Store(s.b.id, s)
	}
	b := s.b
	if b.anomaly != "" || b.commit > 0 {
		return
	}
	window, size := s.p.opts.MaxInFlight, s.p.opts.BatchSize
	flow := max(1, window/4)
	perKey := s.perKey()
	full := false // the next record may not join this batch (the per-key rule)
	none := false // the machine sends nothing more here now
	for len(b.recs)-max(b.acked, b.flowed) < window && len(b.recs) < size {
		s.mu.Lock()
		if s.fenceDesc != nil || s.aborted != nil {
			// Fenced or stopped: nothing more is sent (the run loop settles the batch). Checked
			// under s.mu with each record taken, so that no record goes out once the control
			// loop has fenced the sink (and told the sticky check).
			s.mu.Unlock()
			if len(b.recs) == 0 {
				s.p.batches.Delete(b.id)
				s.b = nil
			}
			return
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			break
		}
		// The sticky machine decides what this sink transmits next (spec/protocol.md §5.1.2:
		// nothing past an ambiguous batch until it settled, then the rest first, in send order).
		i := 0
		if seq, on := s.p.check.Next(s.id()); on {
			if i = queueIndex(s.queue, seq); i < 0 {
				s.mu.Unlock()
				if len(b.recs) == 0 {
					s.p.batches.Delete(b.id)
					s.b = nil
					return // nothing the machine sends here now (wait reads the queue again)
				}
				none = true // commit what went, as with an empty queue
				break
			}
		}
		pd := s.queue[i]
		if !b.admits(pd, perKey) {
			s.mu.Unlock()
			full = true
			break
		}
		if i == 0 {
			s.queue = s.queue[1:]
		} else {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
		}
		// last: no further record can join the batch now (a batch of one record is then sent
		// as one message that is stored and commits it).
		last := len(s.queue) == 0 || len(b.recs)+1 >= size || !b.admitsWith(pd, s.queue[0], perKey)
		s.p.check.Transmit(pd.seq, s.id())
		s.mu.Unlock()
		seq := uint64(len(b.recs) + 1)
		op := fbAppend
		if seq == 1 {
			op = fbStart
			if last {
				op = fbCommit // a batch of one record: stored and committed by one message
			}
		}
		m := &nats.Msg{Subject: wire.RecordSubject(s.p.topic, s.epoch, s.partition, s.keys, pd.rec.Key), Reply: fbReplySubject(s.p.inbox, b.id, flow, seq, op), Header: pd.hdr, Data: pd.rec.Value}
		if err := s.p.conn.NC.PublishMsg(m); err != nil {
			if errors.Is(err, nats.ErrMaxPayload) {
				s.p.check.Drop(pd.seq)
				s.p.finish(pd, Result{Partition: s.partition, Epoch: s.epoch, Err: wire.TooLarge(wire.LimitMaxPayload, fmt.Sprintf("record %d cannot be published: %v; a record (key, value and headers) must fit the server's max_payload", pd.seq, err))})
				continue
			}
			// Not sent (connection closed or its buffer full): put it back and settle.
			s.mu.Lock()
			s.queue = append([]*pending{pd}, s.queue...)
			s.mu.Unlock()
			s.anomalous(b, "publish failed: "+err.Error())
			b.transient = true
			return
		}
		pd.sends++
		if pd.floors == nil {
			pd.floors = map[string]uint64{}
		}
		if _, ok := pd.floors[s.stream]; !ok {
			pd.floors[s.stream] = s.floor
		}
		b.recs = append(b.recs, pd)
		b.addKey(pd, perKey)
		if op == fbCommit {
			b.commit = seq
			return
		}
	}
	if len(b.recs) > 0 && (len(b.recs) >= size || full || none || s.queued() == 0) {
		seq := uint64(len(b.recs) + 1)
		if err := s.p.conn.NC.PublishMsg(&nats.Msg{Subject: s.subject, Reply: fbReplySubject(s.p.inbox, b.id, flow, seq, fbEOB)}); err != nil {
			s.anomalous(b, "publish failed: "+err.Error())
			b.transient = true
			return
		}
		b.commit = seq
	}
}

// queueIndex is the index of record seq in queue, -1 when it is not there (seq 0: no record).
func queueIndex(queue []*pending, seq uint64) int {
	if seq == 0 {
		return -1
	}
	for i, pd := range queue {
		if pd.seq == seq {
			return i
		}
	}
	return -1
}

// perKey reports whether the per-key rule holds for this sink's batches (spec/protocol.md
// §5.1.2): on a cluster a batch never holds two records of the same key. nats-server 2.15.2 may
// count a batch message whose raft proposal a term change dropped as persisted; the rule makes
// such a hole the only record of its key in its batch, and its re-send (which goes first in the
// next batch, started only after this one is confirmed) lands ahead of every later record of
// that key. Every stream on a cluster, R1 included: a live replica change gives an R1 stream a
// raft group, and the producer cannot know that before its batch.
func (s *sink) perKey() bool {
	return s.verify && !s.p.opts.NoKeyRule
}

// recordKey is the key a record's order is promised under: its Pctl-Key header ("b64:..."; the
// empty key is "b64:"), or "" for a keyless record, which has no order promise.
func recordKey(pd *pending) string {
	return pd.hdr.Get(wire.HeaderKey)
}

// admits reports whether pd may join the batch under the per-key rule.
func (b *batch) admits(pd *pending, perKey bool) bool {
	k := recordKey(pd)
	_, dup := b.keys[k]
	return proto.Admits(perKey, k == "", dup)
}

// admitsWith reports whether next may join the batch once pd has joined it.
func (b *batch) admitsWith(pd, next *pending, perKey bool) bool {
	if !perKey {
		return true
	}
	if k := recordKey(next); k != "" && k == recordKey(pd) {
		return false
	}
	return b.admits(next, perKey)
}

func (b *batch) addKey(pd *pending, perKey bool) {
	if !perKey {
		return
	}
	if k := recordKey(pd); k != "" {
		if b.keys == nil {
			b.keys = map[string]struct{}{}
		}
		b.keys[k] = struct{}{}
	}
}

// connRecheck is how often a sink whose records wait for the connection looks at it again.
const connRecheck = 250 * time.Millisecond

// wait blocks until something happens: a reply, a new record or control flag, or a timer.
func (s *sink) wait(ctx context.Context) {
	b := s.b
	if b == nil || b.anomaly != "" {
		if b != nil {
			return // settle next
		}
		if s.queued() > 0 {
			// Records wait for the connection: look again now and then, in case a reconnect
			// is never signalled (a handler replaced by the application).
			s.timer.Reset(connRecheck)
			defer s.timer.Stop()
			select {
			case <-s.wake:
			case <-s.timer.C:
			case <-ctx.Done():
			}
			return
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
		}
		return
	}
	// Something is in flight: wake for the stall check or the acknowledgement timeout.
	now := time.Now()
	next := b.checked.Add(s.p.opts.StallTimeout)
	if t := b.progress.Add(s.p.conn.AckTimeout); t.Before(next) {
		next = t
	}
	s.timer.Reset(max(time.Millisecond, next.Sub(now)))
	defer s.timer.Stop()
	select {
	case r := <-s.replies:
		s.handle(ctx, r)
		// Take every reply already there before sending more.
		for more := true; more && s.b != nil && s.b.anomaly == ""; {
			select {
			case r := <-s.replies:
				s.handle(ctx, r)
			default:
				more = false
			}
		}
	case <-s.wake:
	case <-s.timer.C:
		now := time.Now()
		if now.Sub(b.progress) >= s.p.conn.AckTimeout {
			s.anomalous(b, fmt.Sprintf("no reply within %v", s.p.conn.AckTimeout))
			return
		}
		if now.Sub(b.checked) >= s.p.opts.StallTimeout {
			b.checked = now
			s.p.requestCheck() // a fenced subject on a cluster may answer nothing
		}
	case <-ctx.Done():
	}
}

// handle applies one reply to the open batch (replies to other batches never get here).
func (s *sink) handle(ctx context.Context, r fbReply) {
	b := s.b
	if b == nil || r.batch != b.id {
		return
	}
	b.progress, b.checked = time.Now(), time.Now()
	switch r.kind {
	case replyFlowAck:
		if r.ackSeq > uint64(len(b.recs)) {
			s.anomalous(b, fmt.Sprintf("flow acknowledgement of batch seq %d, only %d sent", r.ackSeq, len(b.recs)))
			return
		}
		b.flowed = max(b.flowed, int(r.ackSeq))
		if !s.verify {
			s.ackUpTo(int(r.ackSeq))
		}
	case replyGap:
		b.ended = true
		if b.anomaly == "" {
			s.anomalous(b, fmt.Sprintf("gap: the server expected batch seq %d, got %d", r.gapExpected, r.gapGot))
		}
	case replyFlowErr:
		b.ended = true
		s.refused(r)
		if b.anomaly == "" {
			s.anomalous(b, fmt.Sprintf("batch seq %d refused: %s (%d)", r.gapGot, r.errText, r.errCode))
		}
	case replyRefusal:
		s.refused(r)
		if b.anomaly == "" {
			s.anomalous(b, fmt.Sprintf("batch seq %d refused: %s (%d)", r.seq, r.errText, r.errCode))
		}
	case replyNoResponders:
		b.noResp = true
		if b.anomaly == "" {
			s.anomalous(b, "no stream answers "+s.subject)
		}
		s.p.requestCheck()
	case replyPubAck:
		rr := r
		b.pubAck = &rr
		if b.anomaly == "" && b.commit > 0 && r.ackBatch == b.id && !r.duplicate && r.count == uint64(len(b.recs)) {
			if h := s.p.opts.TestHoles; h != nil && r.streamSeq >= uint64(len(b.recs)) {
				h(s.stream, r.streamSeq-uint64(len(b.recs))+1, r.streamSeq)
			}
			if s.verify {
				found, trusted, err := s.confirm(ctx, len(b.recs), r.streamSeq)
				if err != nil {
					s.anomalous(b, "cannot confirm the batch on the cluster: "+err.Error())
					return // settle takes it up (the PubAck is kept)
				}
				if !trusted {
					s.endConfirmed(ctx, found, r.streamSeq)
					return
				}
			}
			s.committed(r) // clean
			return
		}
		if b.anomaly == "" {
			s.anomalous(b, fmt.Sprintf("PubAck of %d records (batch %q, duplicate %v), %d sent, commit sent: %v", r.count, r.ackBatch, r.duplicate, len(b.recs), b.commit > 0))
		}
	default:
		if b.anomaly == "" {
			s.anomalous(b, "unexpected reply: "+r.errText)
		}
	}
}

// anomalous marks the open batch b for settling (its first anomaly's why is kept): to the sticky
// machine every record it has in flight is ambiguous from now on, before anything else is sent.
func (s *sink) anomalous(b *batch, why string) {
	if b.anomaly == "" {
		b.anomaly = why
	}
	s.p.check.Anomaly(s.id())
}

// refused records what a refusal says about one message of the batch.
func (s *sink) refused(r fbReply) {
	b := s.b
	seq := r.seq
	if r.kind == replyFlowErr {
		seq = r.gapGot
	}
	if seq >= 1 && seq <= uint64(len(b.recs)) {
		pd := b.recs[seq-1]
		if pd.inProcess.Note(r.errCode) {
			// Stuck (spec/protocol.md §5.1.5): a fast batch has no expected-sequence guard to
			// renew the id under, so settle fails the record unless it finds it stored.
			s.logf("record %d (id %s): JetStream answered 10158 %d times; failing it unless it is found stored", pd.seq, pd.hdr.Get(wire.HeaderMsgID), pd.inProcess.Count())
		}
	}
	switch r.errCode {
	case errCodeTooLarge:
		if seq >= 1 && seq <= uint64(len(b.recs)) {
			pd := b.recs[seq-1]
			pd.failed = wire.TooLarge(wire.LimitMaxMsgSize, fmt.Sprintf("record %d refused by partition %d: %s (JetStream error %d); a record must fit the stream's maximum message size", pd.seq, s.partition, r.errText, r.errCode))
		}
	case errCodeUnknownBatch:
		b.unknown = true
	case errCodeBatchDisabled, errCodeBadPattern, errCodeBadBatchID:
		s.p.fail(fmt.Errorf("%w: partition stream %s refused a fast batch: %s (JetStream error %d); pctl's producer needs nats-server 2.14+ and streams with allow_batched (restart 'pctl serve' to update them)", wire.ErrUnavailable, s.stream, r.errText, r.errCode))
	case errCodeTooManyOpen, errCodeDupConflict:
		b.transient = true
	default:
		b.transient = true
	}
	if seq == 1 && r.kind == replyRefusal && r.errCode != errCodeUnknownBatch {
		b.never = true // the batch was never started: nothing of it is stored
	}
}

// ackUpTo finishes the records of batch seqs acked+1..n: the server persisted them.
func (s *sink) ackUpTo(n int) {
	b := s.b
	for ; b.acked < n; b.acked++ {
		pd := b.recs[b.acked]
		if pd.failed != nil {
			continue // cannot be: a refused message leaves a gap
		}
		s.p.check.Acked(s.id(), pd.seq)
		s.p.finish(pd, Result{Partition: s.partition, Epoch: s.epoch})
	}
}

// committed finishes a batch whose PubAck was clean.
func (s *sink) committed(r fbReply) {
	b := s.b
	n := len(b.recs)
	last := b.recs[n-1]
	if b.acked < n-1 {
		s.ackUpTo(n - 1)
	}
	if b.acked < n {
		res := Result{Partition: s.partition, Epoch: s.epoch}
		if last.sends == 1 && r.streamSeq > 0 {
			res.Seq = r.streamSeq // its first send, stored by this batch: the PubAck names it
		}
		s.p.check.Acked(s.id(), last.seq)
		s.p.finish(last, res)
		b.acked = n
	}
	s.endBatch(r.streamSeq)
	s.backoff = 0
}

func (s *sink) endBatch(streamSeq uint64) {
	if streamSeq > s.floor {
		s.floor = streamSeq
	}
	s.p.batches.Delete(s.b.id)
	s.b = nil
}

// settle learns which prefix of the open batch is stored, finishes it, and queues the rest
// again (in the same epoch) or returns the descriptor that fenced the partition (the rest stays
// for takeQueue). The batch is closed when settle returns: nothing more of it can be stored.
func (s *sink) settle(ctx context.Context, fenceDesc *wire.Topic) (*wire.Topic, error) {
	b := s.b
	s.p.settles.Add(1)
	s.p.check.Anomaly(s.id())
	s.logf("settling batch %s (%d records sent, %d acknowledged): %s", b.id, len(b.recs), b.acked, b.anomaly)
	desc := fenceDesc
	var fenced *wire.Topic
	if fenceDesc != nil && fenceDesc.Current().Epoch > s.epoch {
		fenced = fenceDesc
	}
	n := b.acked // records 1..n are persisted
	exact := map[int]uint64{}
	if !b.never {
		k, err := s.learn(ctx, &desc, &fenced, exact)
		if err != nil {
			return nil, err
		}
		n = max(n, k)
	}
	// Records 1..n are persisted (a prefix); the rest are not, and never will be. On a cluster
	// the server's word is checked first (confirm).
	stored := map[int]uint64{}
	for i := b.acked; i < n; i++ {
		stored[i] = exact[i]
	}
	if s.verify && n > b.acked {
		for attempt := 0; ; attempt++ {
			var upTo uint64
			if b.pubAck != nil {
				upTo = b.pubAck.streamSeq
			}
			found, trusted, err := s.confirm(ctx, n, upTo)
			if err == nil {
				if !trusted {
					stored = found
				}
				break
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			s.logf("confirming batch %s: %v; retrying", b.id, err)
			if !sleepCtx(ctx, s.pause(attempt)) {
				return nil, ctx.Err()
			}
		}
	}
	rest := s.finishStored(stored)
	transient := b.transient
	s.p.batches.Delete(b.id)
	s.b = nil
	s.logf("batch %s: %d of %d records settled (stored, or failed for good); %d to send again", b.id, len(b.recs)-len(rest), len(b.recs), len(rest))
	if fenced != nil {
		s.mu.Lock()
		s.queue = append(rest, s.queue...)
		s.mu.Unlock()
		return fenced, nil
	}
	s.mu.Lock()
	s.queue = append(rest, s.queue...)
	s.mu.Unlock()
	if transient {
		s.backoff = min(max(2*s.backoff, 50*time.Millisecond), time.Second)
		if !sleepCtx(ctx, s.backoff) {
			return nil, ctx.Err()
		}
	}
	return nil, nil
}

// learn finds out how many records of the open batch are persisted (settle's core): from the
// batch's PubAck, by closing the batch with an EOB, or by reading the partition back.
func (s *sink) learn(ctx context.Context, desc, fenced **wire.Topic, exact map[int]uint64) (int, error) {
	b := s.b
	waited, search := false, false
	silent := 0 // EOBs that got no answer
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		s.mu.Lock()
		if fd := s.fenceDesc; fd != nil && (*desc == nil || fd.Current().Epoch > (*desc).Current().Epoch) {
			*desc = fd // the control loop knows a newer descriptor
		}
		aborted := s.aborted
		s.mu.Unlock()
		if aborted != nil {
			return 0, aborted
		}
		if b.pubAck != nil {
			k, at, ok, err := s.checkPubAck(ctx, *b.pubAck)
			if err != nil {
				return 0, err
			}
			if ok {
				if at >= 0 {
					exact[at] = b.pubAck.streamSeq
				}
				if b.pubAck.streamSeq > s.floor && k > b.acked {
					s.floor = b.pubAck.streamSeq
				}
				return k, nil
			}
			b.pubAck, search = nil, true // not provably about these records: read the partition back
		}
		if b.ended && !waited {
			// The server ended the batch (a gap or an error): its PubAck is on its way.
			waited = true
			s.await(ctx, func() bool { return b.pubAck != nil })
			continue
		}
		if search || b.unknown {
			k, at, err := s.search(ctx, *fenced)
			if err != nil {
				return 0, err
			}
			if k > b.acked && at > 0 {
				exact[k-1] = at
				s.floor = max(s.floor, at)
			}
			return k, nil
		}
		// Close the batch ourselves: an EOB above everything sent, on the stream's current
		// subject (after a fence the batch lives on under the stream's new subject).
		if !s.waitConnected(ctx) {
			return 0, fmt.Errorf("%w: the connection is closed", wire.ErrUnavailable)
		}
		if b.noResp || attempt > 0 {
			d, err := s.p.fetchQuick(ctx)
			switch {
			case err == nil:
				*desc = d
			case errors.Is(err, wire.ErrNotFound) || errors.Is(err, wire.ErrPermission) || ctx.Err() != nil:
				return 0, err
			default:
				s.logf("reading the descriptor: %v; closing the batch on %s", err, s.subject)
			}
		}
		subject := s.subject
		if d := *desc; d != nil && d.Current().Epoch > s.epoch {
			*fenced = d
			cur := d.Current()
			subject = wire.BatchEndSubject(s.p.topic, cur.Epoch, s.partition, s.keys)
			if s.partition >= cur.Partitions {
				// Shrunk away: the retired subject takes no publishes (not even an EOB), and
				// nothing more of the batch can be stored: read the partition back.
				search = true
				continue
			}
		} else if d != nil && d.Change != nil && b.noResp {
			// Fenced but the new epoch is not active yet: wait for it before closing.
			if attempt%20 == 0 {
				s.logf("epoch change to %d in progress (%s); waiting for it", d.Change.To, d.Change.State)
			}
			if !sleepCtx(ctx, min(s.pause(attempt), 100*time.Millisecond)) {
				return 0, ctx.Err()
			}
			continue
		}
		b.noResp = false
		seq := uint64(len(b.recs) + 1)
		if err := s.p.conn.NC.PublishMsg(&nats.Msg{Subject: subject, Reply: fbReplySubject(s.p.inbox, b.id, 1, seq, fbEOB)}); err != nil {
			s.logf("closing batch %s: %v", b.id, err)
		}
		// An EOB's answer is awaited for the acknowledgement timeout but at least eobWait: only an
		// EOB nothing answers in that time counts as unanswered below (with a tiny timeout, a
		// late answer is not silence).
		s.awaitFor(ctx, func() bool { return b.pubAck != nil || b.unknown || b.noResp }, max(s.p.conn.AckTimeout, eobWait))
		if b.pubAck == nil && !b.unknown && !b.noResp {
			// No answer at all to the EOB. nats-server 2.15.2 keeps a fast batch whose commit
			// waits for proposals a replica or placement change dropped "committing" for good
			// (its cleanup timer stops at the commit) and skips every later message of it
			// without a reply, while the stream takes new batches: read the partition back
			// (spec/protocol.md §5.1.2, settle 1) instead of closing it forever.
			if silent++; silent >= silentEOBs {
				s.logf("batch %s: %d EOBs on %s had no answer within %v each; reading the partition back", b.id, silent, subject, max(s.p.conn.AckTimeout, eobWait))
				search = true
				continue
			}
		}
		if b.pubAck == nil && !b.unknown && !sleepCtx(ctx, s.pause(attempt)) {
			return 0, ctx.Err()
		}
	}
}

// silentEOBs is how many EOBs of a batch being settled may go unanswered (each for the
// acknowledgement timeout) before the sink reads the partition back (spec/protocol.md §5.1.2).
const silentEOBs = 3

// eobWait is the least time an EOB's answer is awaited while settling (spec/protocol.md §5.1.2):
// with an acknowledgement timeout of a few milliseconds, answers that come a little later are
// not silence, and reading the partition back with such a timeout may never succeed under load
// (TestLostAcknowledgementsNeverStoreTwice under -race, 2 ms: no acknowledgement for 30 s).
const eobWait = time.Second

// finishStored finishes the open batch's records not yet finished as the sticky machine
// classifies them (spec/protocol.md §5.1.2) from what settling learnt: stored (index -> stream
// sequence, 0 if unknown), refused (pd.failed) or stuck in process and not found stored
// (inprocess.go). The machine's acknowledged are acknowledged, its failed fail, and the others are
// returned, in order, to be sent again. While the producer moves to a newer epoch the machine
// decides at the re-send: the facts stand then (checked against the machine at Resend).
func (s *sink) finishStored(stored map[int]uint64) []*pending {
	b := s.b
	var storedSeqs, failedSeqs []uint64
	for i := b.acked; i < len(b.recs); i++ {
		pd := b.recs[i]
		_, ok := stored[i]
		switch {
		case pd.failed != nil:
			failedSeqs = append(failedSeqs, pd.seq)
		case ok:
			storedSeqs = append(storedSeqs, pd.seq)
		case pd.inProcess.Count() >= InProcessLimit:
			// Not found stored, and its id is stuck "in process" (inprocess.go): fail it now
			// rather than re-send it with the same id until the duplicate window ends.
			failedSeqs = append(failedSeqs, pd.seq)
		}
	}
	// Settled before the rest is queued again: the machine sends it before the sink does.
	acked, failed, decided := s.p.check.Settled(s.id(), storedSeqs, failedSeqs)
	if !decided {
		acked, failed = storedSeqs, failedSeqs
	}
	in := make(map[uint64]bool, len(acked))
	for _, seq := range acked {
		in[seq] = true
	}
	out := make(map[uint64]bool, len(failed))
	for _, seq := range failed {
		out[seq] = true
	}
	var rest []*pending
	for i := b.acked; i < len(b.recs); i++ {
		pd := b.recs[i]
		switch {
		case in[pd.seq]:
			s.p.finish(pd, Result{Partition: s.partition, Epoch: s.epoch, Seq: stored[i]})
		case out[pd.seq]:
			err := pd.failed
			if err == nil {
				err = inProcessError(pd.seq, pd.hdr.Get(wire.HeaderMsgID), s.partition, pd.inProcess.Count())
			}
			s.p.finish(pd, Result{Partition: s.partition, Epoch: s.epoch, Err: err})
		default:
			rest = append(rest, pd)
		}
	}
	b.acked = len(b.recs)
	return rest
}

// endConfirmed ends a committed batch that confirm had to read back: records found are
// acknowledged, the others (the server counted them but did not store them) go out again first
// in the next batch. Records of the batch sent after them were stored, but none has their key
// (the per-key rule), so each key's order holds.
func (s *sink) endConfirmed(ctx context.Context, found map[int]uint64, streamSeq uint64) {
	b := s.b
	// The read-back decided the batch's records as settling does: to the sticky machine the
	// leader change was an anomaly (their fate was unknown) and the read its settling.
	s.p.check.Anomaly(s.id())
	rest := s.finishStored(found)
	if len(rest) > 0 {
		s.holes += len(rest)
		s.p.holes.Add(int64(len(rest)))
		s.logf("SERVER FAULT: batch %s was committed with %d records but %d of them are not stored (nats-server counted raft proposals a leader's term change dropped); sending them again first in the next batch (each is the only record of its key in the batch, so key order holds)", b.id, len(b.recs), len(rest))
	}
	s.endBatch(streamSeq)
	s.mu.Lock()
	s.queue = append(rest, s.queue...)
	s.mu.Unlock()
}

// lowFloor is the lowest stream sequence above which a copy of any of the open batch's records
// from index i on can be stored: the sink's floor, or lower for records sent to this stream
// before (a copy from an earlier attempt counts as a duplicate for the server).
func (s *sink) lowFloor(from, to int) uint64 {
	var first []uint64
	for _, pd := range s.b.recs[from:to] {
		if f, ok := pd.floors[s.stream]; ok {
			first = append(first, f)
		}
	}
	return proto.SearchFloor(s.floor, first)
}

// noteLeader records the stream's leader, its election time and its replicas from the stream's
// info, and reports whether any of them changed since the last note. nats-server 2.15.2 drops
// fast-batch proposals around a raft term change (a leader election, or a replica count change
// that creates or removes the stream's raft group) while counting them.
func (s *sink) noteLeader(info *jetstream.StreamInfo) bool {
	if info == nil || info.Cluster == nil {
		return true
	}
	var since time.Time
	if info.Cluster.LeaderSince != nil {
		since = *info.Cluster.LeaderSince
	}
	changed := info.Cluster.Leader != s.leader || !since.Equal(s.leaderSince) || info.Config.Replicas != s.replicas
	s.leader, s.leaderSince, s.replicas = info.Cluster.Leader, since, info.Config.Replicas
	return changed
}

// confirm checks, on a cluster, records acked..k-1 of the open batch that the server counted as
// persisted. When the stream's leader is the one noted before the batch (and not newly elected),
// the count is trusted. Otherwise the stream is read back (readBack) and each record looked for
// (every record of the batch, counted or not): found maps the index of each record found to its
// stream sequence. Records not found get a new deduplication id before they are sent again: the
// server may still hold the ids of its dropped proposals as "being stored" and would skip their
// re-sends as duplicates. That gives up deduplication, which is safe only because readBack reads
// up to the stream leader's end (spec/protocol.md §5.1.2, "the read-back's end").
func (s *sink) confirm(ctx context.Context, k int, upTo uint64) (found map[int]uint64, trusted bool, err error) {
	b := s.b
	st, err := s.p.conn.JS.Stream(ctx, s.stream)
	if err != nil {
		return nil, false, err
	}
	info := st.CachedInfo()
	if changed := s.noteLeader(info); !changed && !s.p.opts.TestVerify {
		return nil, true, nil
	}
	top := max(info.State.LastSeq, upTo)
	found, err = s.readBack(ctx, top)
	if err != nil {
		return nil, false, err
	}
	s.p.readBacks.Add(1)
	for i := b.acked; i < len(b.recs); i++ {
		if _, ok := found[i]; !ok {
			s.p.renew(b.recs[i])
		}
	}
	if len(found) < k-b.acked {
		s.logf("read back from %d after a leader change: %d of %d records of batch %s found (%d counted by the server)", s.lowFloor(b.acked, len(b.recs))+1, len(found), len(b.recs)-b.acked, b.id, k-b.acked)
	}
	return found, false, nil
}

// readBack reads the stream back from the stream leader, from the lowest floor of the open
// batch's records not yet finished to the stream's end as the leader sees it, and returns the
// index of each of those records it found with its stream sequence. top is the highest sequence
// the caller knows of (the stream info's last sequence, the batch's PubAck).
//
// The stream info is no end: while the stream has no leader, every member answers STREAM.INFO
// with its own state, and one that lags names a last sequence below records already stored, so a
// read that stopped there would not find them and confirm would give them new ids: stored twice.
// The end is fenced instead by the leader's last message (STREAM.MSG.GET, which only a stream
// leader answers, and nats-server makes a node the leader only once it applied every entry of
// earlier terms its log holds): every copy of the batch's records proposed before that answer is
// at or below it. When the last message is gone (or the stream is empty), the read goes on
// message by message until the leader says there is none after it.
func (s *sink) readBack(ctx context.Context, top uint64) (map[int]uint64, error) {
	b := s.b
	want := map[string]int{}
	for i := b.acked; i < len(b.recs); i++ {
		want[b.recs[i].hdr.Get(wire.HeaderMsgID)] = i
	}
	found := map[int]uint64{}
	look := func(seq uint64, m *jetstream.RawStreamMsg) {
		if i, ok := want[m.Header.Get(wire.HeaderMsgID)]; ok && sameRecord(m, b.recs[i].hdr, b.recs[i].rec.Value) {
			found[i] = seq
		}
	}
	known := top
	last, err := s.retryLeader(ctx, func() (*jetstream.RawStreamMsg, error) { return leaderLast(ctx, s.p.conn, s.stream) })
	if err != nil {
		return nil, err
	}
	if last != nil {
		top = max(top, last.Sequence)
	}
	low := s.lowFloor(b.acked, len(b.recs))
	if err := s.readRange(ctx, low+1, top, look); err != nil {
		return nil, err
	}
	if last == nil {
		for from := max(top, low) + 1; ; {
			m, err := s.retryLeader(ctx, func() (*jetstream.RawStreamMsg, error) { return leaderNext(ctx, s.p.conn, s.stream, from) })
			if err != nil {
				return nil, err
			}
			if m == nil || m.Sequence < from {
				break
			}
			look(m.Sequence, m)
			top, from = m.Sequence, m.Sequence+1
		}
	}
	// A record whose id another producer instance may have used (a thin client's, or a content
	// token) may be stored further down, as long ago as the deduplication window reaches.
	var foreign bool
	for i := b.acked; i < len(b.recs); i++ {
		if _, ok := found[i]; !ok && (b.recs[i].rec.Origin != nil || s.p.opts.ContentTokens) {
			foreign = true
		}
	}
	if foreign && low > 0 {
		from, err := s.seqAt(ctx, time.Now().Add(-dedupWindow-10*time.Second))
		if err != nil {
			return nil, err
		}
		if from <= low {
			if err := s.readRange(ctx, from, low, look); err != nil {
				return nil, err
			}
		}
	}
	if s.compact {
		keys := make([][]byte, len(b.recs))
		for i := b.acked; i < len(b.recs); i++ {
			keys[i] = b.recs[i].rec.Key
		}
		supersededInBatch(keys, b.acked, found)
	}
	if top > known {
		above := 0
		for _, seq := range found {
			if seq > known {
				above++
			}
		}
		if above > 0 {
			s.p.pastInfo.Add(int64(above))
			s.logf("read back past the stream info's last sequence %d to the leader's end %d: %d records of batch %s are stored above %d (a read that stopped there would have sent them again under new ids)", known, top, above, b.id, known)
		}
	}
	return found, nil
}

// dedupWindow is the partition streams' deduplication window (spec/protocol.md §2).
const dedupWindow = 2 * time.Minute

// seqAt returns the sequence of the stream's first message stored at or after t (the maximum
// uint64 when there is none; a replica that lags may answer, which only makes it lower).
func (s *sink) seqAt(ctx context.Context, t time.Time) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.p.conn.AckTimeout)
	defer cancel()
	body := fmt.Sprintf(`{"start_time":%q}`, t.UTC().Format(time.RFC3339Nano))
	m, err := s.p.conn.NC.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+s.stream, []byte(body))
	if err != nil {
		return 0, err
	}
	if m.Header.Get("Status") != "" {
		return ^uint64(0), nil // nothing that recent
	}
	seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("direct get of %s at %v: no sequence in the answer", s.stream, t)
	}
	return seq, nil
}

// getWindow reads stream messages lo..hi from the stream leader at once (getMsg): msgs[i] is
// message lo+i (nil when it does not exist), errs[i] its read's error.
func (s *sink) getWindow(ctx context.Context, lo, hi uint64) ([]*jetstream.RawStreamMsg, []error) {
	msgs := make([]*jetstream.RawStreamMsg, hi-lo+1)
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			msgs[i], errs[i] = s.getMsg(ctx, lo+uint64(i))
		}(i)
	}
	wg.Wait()
	return msgs, errs
}

// readRange reads stream messages first..last from the stream leader (direct gets may be
// answered by a replica that lags), 64 at a time, and calls f for each one that exists.
func (s *sink) readRange(ctx context.Context, first, last uint64, f func(seq uint64, m *jetstream.RawStreamMsg)) error {
	const window = 64
	for lo := first; lo <= last; lo += window {
		hi := min(last, lo+window-1)
		msgs, errs := s.getWindow(ctx, lo, hi)
		for i, m := range msgs {
			if errs[i] != nil {
				return errs[i]
			}
			if m != nil {
				f(lo+uint64(i), m)
			}
		}
	}
	return nil
}

// await handles replies until cond holds or the acknowledgement timeout passes.
func (s *sink) await(ctx context.Context, cond func() bool) {
	s.awaitFor(ctx, cond, s.p.conn.AckTimeout)
}

// awaitFor is await for d instead of the acknowledgement timeout.
func (s *sink) awaitFor(ctx context.Context, cond func() bool, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for !cond() {
		select {
		case r := <-s.replies:
			s.handleSettling(r)
		case <-s.wake:
			s.mu.Lock()
			aborted := s.aborted
			s.mu.Unlock()
			if aborted != nil {
				s.signal() // the run loop sees it too
				return
			}
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// handleSettling applies a reply while the batch is being settled: flow acks still confirm
// persisted records; a PubAck, refusal or no responders say how the batch ended.
func (s *sink) handleSettling(r fbReply) {
	b := s.b
	if b == nil || r.batch != b.id {
		return
	}
	switch r.kind {
	case replyFlowAck:
		if r.ackSeq <= uint64(len(b.recs)) && !s.verify {
			s.ackUpTo(int(r.ackSeq))
		}
	case replyGap:
		b.ended = true
	case replyFlowErr, replyRefusal:
		s.refused(r)
		if r.kind == replyFlowErr {
			b.ended = true
		}
	case replyNoResponders:
		if r.op == fbEOB {
			b.noResp = true // only our EOB's: the records' own 503s are old news by now
		}
	case replyPubAck:
		rr := r
		b.pubAck = &rr
	}
}

func (s *sink) waitConnected(ctx context.Context) bool {
	for !s.p.conn.NC.IsConnected() {
		if s.p.conn.NC.IsClosed() {
			return false
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return false
		}
	}
	return true
}

// checkPubAck decides what a PubAck of a batch that had an anomaly proves. ok: records 1..k are
// persisted; at is the index of the record found at the PubAck's stream sequence (-1: none).
// Not ok: the PubAck is not provably about this producer's records (read the partition back).
func (s *sink) checkPubAck(ctx context.Context, r fbReply) (k, at int, ok bool, err error) {
	b := s.b
	n := len(b.recs)
	if r.ackBatch != b.id || r.count > uint64(n) || int(r.count) < b.acked {
		return 0, -1, false, nil
	}
	k = int(r.count)
	if r.duplicate {
		// A batch of one record whose id was stored already: it counts only if the stored
		// message is this record.
		if n != 1 || k != 1 {
			return 0, -1, false, nil
		}
		if b.acked == 1 {
			// Its flow ack counted the duplicate as persisted and the record is acknowledged
			// already: the PubAck adds nothing, and must not acknowledge it twice.
			return 1, -1, true, nil
		}
		m, err := s.getMsg(ctx, r.streamSeq)
		if err != nil {
			return 0, -1, false, err
		}
		pd := b.recs[0]
		if m != nil && sameRecord(m, pd.hdr, pd.rec.Value) {
			s.p.check.Acked(s.id(), pd.seq)
			s.p.finish(pd, Result{Partition: s.partition, Epoch: s.epoch, Seq: r.streamSeq, Duplicate: true})
			b.acked = 1
			return 1, -1, true, nil
		}
		pd.failed = fmt.Errorf("%w: record %d (id %s) was acknowledged as a duplicate of stream sequence %d of partition %d, which holds a different record: it is NOT stored; another client published with this record's deduplication id", wire.ErrConflict, pd.seq, pd.hdr.Get(wire.HeaderMsgID), r.streamSeq, s.partition)
		return 1, -1, true, nil
	}
	if k == 0 || k == b.acked {
		return k, -1, true, nil
	}
	if r.streamSeq == 0 {
		return 0, -1, false, nil // stored nothing new: cannot be checked
	}
	m, err := s.getMsg(ctx, r.streamSeq)
	if err != nil {
		return 0, -1, false, err
	}
	for i := k - 1; i >= 0; i-- {
		pd := b.recs[i]
		if m != nil && sameRecord(m, pd.hdr, pd.rec.Value) {
			return k, i, true, nil
		}
		if s.verify {
			break // on a cluster only the last counted record proves the count
		}
	}
	s.logf("the PubAck of batch %s names stream sequence %d, which holds none of its records", b.id, r.streamSeq)
	return 0, -1, false, nil
}

// getMsg reads one stored message from the stream leader (nil when there is none), retrying
// transient failures. Not a direct get: any replica may answer those, one that lags included.
func (s *sink) getMsg(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	return s.retryLeader(ctx, func() (*jetstream.RawStreamMsg, error) { return leaderGet(ctx, s.p.conn, s.stream, seq) })
}

// retryLeader runs one STREAM.MSG.GET request (get) until it is answered: the message, or nil
// when there is none. A stream without a leader answers "cluster not available" and one that is
// electing answers nothing; both are retried with the back-off.
func (s *sink) retryLeader(ctx context.Context, get func() (*jetstream.RawStreamMsg, error)) (*jetstream.RawStreamMsg, error) {
	for attempt := 0; ; attempt++ {
		m, err := get()
		if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
			return m, nil
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%w: partition stream %s is gone", wire.ErrNotFound, s.stream)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !sleepCtx(ctx, s.pause(attempt)) {
			return nil, ctx.Err()
		}
	}
}

// search reads the partition back from its top (the epoch's boundary when fenced) down to the
// sink's floor, and returns how many records of the open batch are stored: the batch stores a
// prefix of what was sent, so the highest of its records found says it (with its sequence).
func (s *sink) search(ctx context.Context, fenced *wire.Topic) (int, uint64, error) {
	b := s.b
	var boundary uint64
	isFenced := false
	if fenced != nil {
		if e := fenced.Epoch(s.epoch); e != nil && s.partition < len(e.Boundaries) {
			boundary, isFenced = e.Boundaries[s.partition], true
		}
	}
	top, readLast := proto.SearchTop(isFenced, boundary)
	if readLast {
		for attempt := 0; ; attempt++ {
			st, err := s.p.conn.JS.Stream(ctx, s.stream)
			if err == nil {
				top = st.CachedInfo().State.LastSeq
				break
			}
			if ctx.Err() != nil {
				return 0, 0, ctx.Err()
			}
			if !sleepCtx(ctx, s.pause(attempt)) {
				return 0, 0, ctx.Err()
			}
		}
	}
	want := map[string]int{}
	for i := b.acked; i < len(b.recs); i++ {
		want[b.recs[i].hdr.Get(wire.HeaderMsgID)] = i
	}
	const window = 64
	low := s.lowFloor(b.acked, len(b.recs))
	for hi := top; hi > low; {
		lo := low + 1
		if hi-low > window {
			lo = hi - window + 1
		}
		msgs, errs := s.getWindow(ctx, lo, hi)
		for i := len(msgs) - 1; i >= 0; i-- {
			if errs[i] != nil {
				return 0, 0, errs[i]
			}
			m := msgs[i]
			if m == nil {
				continue
			}
			if j, ok := want[m.Header.Get(wire.HeaderMsgID)]; ok && sameRecord(m, b.recs[j].hdr, b.recs[j].rec.Value) {
				s.logf("search: record %d of batch %s is stored at %d", j+1, b.id, lo+uint64(i))
				return j + 1, lo + uint64(i), nil
			}
		}
		hi = lo - 1
	}
	return b.acked, 0, nil
}
