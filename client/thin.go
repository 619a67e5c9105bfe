package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/produce"
)

// This file is the thin-client side of the broker's produce service (spec/protocol.md): a
// request on wire.ProduceSubject(topic) whose data is the record's value, with the key in
// wire.HeaderKey ("b64:..."; absent for a keyless record) and the producer's identity in
// wire.HeaderProducer and wire.HeaderSeq; the reply is a JSON wire.ProduceReply, or an error reply
// (wire.HeaderError and a JSON wire.ErrorReply). The broker partitions with the topic's own module,
// so a thin client needs nothing but a NATS connection; these helpers exist for tests, tools and
// `pctl produce --broker-side`.

// Retry timing of the thin clients (spec/protocol.md §5.2 and §9).
const (
	// thinAttemptTimeout bounds the wait for one reply before the record is re-sent.
	thinAttemptTimeout = 5 * time.Second
	// thinPauseMin and thinPauseMax bound the pause before re-sending, doubled after each failure.
	thinPauseMin = 100 * time.Millisecond
	thinPauseMax = 2 * time.Second
)

// retryable reports whether a failed produce attempt should be re-sent: the service is not there
// or did not answer (a broker or node failure), or it said so (unavailable, out_of_sequence) —
// except for a record whose id is stuck "in process" (unavailable with detail in_process,
// spec/protocol.md §5.2 step 5): the stream refuses that id for its duplicate window, so a
// re-send under the same identity could only fail again after the whole timeout.
func retryable(err error) bool {
	return (errors.Is(err, wire.ErrUnavailable) || errors.Is(err, wire.ErrOutOfSequence)) && !errors.Is(err, wire.ErrMsgIDInProcess)
}

// produceRefusal is a thin client's error for a produce service's error reply (a single
// request's, or one record's in a batched request): the *wire.RemoteError, and for a record whose
// id is stuck "in process" (spec/protocol.md §5.2 step 5) that error with what to do next, since
// the client does not re-send it. errors.Is(err, wire.ErrMsgIDInProcess) and wire.ErrUnavailable
// hold for it.
func produceRefusal(re *wire.RemoteError) error {
	d, ok := re.InProcess()
	if !ok {
		return re
	}
	return fmt.Errorf("%w (not re-sent under the same identity, spec/protocol.md §5.2: the stream refuses its id %s for its duplicate window, 2 minutes; the record's fate is unknown: read partition %d of epoch %d before producing it again, as a new record)", re, d.MsgID, d.Partition, d.Epoch)
}

// thinIdentity is the producer id and sequence that ProduceBrokerSide gives its records, so that
// its retries are deduplicated: one per Client.
type thinIdentity struct {
	once sync.Once
	id   string
	seq  atomic.Uint64
}

func (ti *thinIdentity) next() (string, uint64) {
	ti.once.Do(func() { ti.id = nuid.Next() })
	return ti.id, ti.seq.Add(1)
}

// ProduceBrokerSide sends one record through the broker's produce service and waits for its
// reply. It is the simplest thin client: one request at a time, to whichever broker answers
// wire.ProduceSubject. The record carries the client's producer id (random, one per Client) and
// the next sequence number, so that a retry is deduplicated: on no responders (no broker, or the
// one it reached is gone), no reply within 5 seconds, or an unavailable or out_of_sequence reply,
// it sends the same request again after a pause (100 ms, doubling up to 2 s), until the client's
// Options.Timeout has passed since the first attempt; but not for a record whose id is stuck "in
// process" (errors.Is(err, wire.ErrMsgIDInProcess), spec/protocol.md §5.2 step 5), which fails at
// once. For throughput use NewThinProducer, which
// keeps many requests in flight.
func (c *Client) ProduceBrokerSide(ctx context.Context, topic string, rec Record) (wire.ProduceReply, error) {
	var reply wire.ProduceReply
	if err := wire.ValidTopic(topic); err != nil {
		return reply, err
	}
	id, seq := c.thin.next()
	m, err := thinMessage(wire.ProduceSubject(topic), rec, id, seq)
	if err != nil {
		return reply, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	viol, stop := c.watchViolation(m.Subject)
	defer stop()
	pause := thinPauseMin
	start := time.Now()
	for {
		reply, err = c.produceOnce(ctx, m, viol)
		if err == nil || !retryable(err) {
			return reply, err
		}
		select {
		case <-ctx.Done():
			return reply, fmt.Errorf("%w (gave up after %v)", err, time.Since(start).Round(time.Millisecond))
		case <-time.After(pause):
		}
		if pause *= 2; pause > thinPauseMax {
			pause = thinPauseMax
		}
	}
}

// produceOnce is one attempt of ProduceBrokerSide.
func (c *Client) produceOnce(ctx context.Context, m *nats.Msg, viol chan struct{}) (wire.ProduceReply, error) {
	var reply wire.ProduceReply
	actx, cancel := context.WithTimeout(ctx, thinAttemptTimeout)
	defer cancel()
	type result struct {
		m   *nats.Msg
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.nc.RequestMsgWithContext(actx, m)
		done <- result{r, err}
	}()
	var res result
	select {
	case <-viol:
		cancel()
		return reply, permissionError(m.Subject)
	case res = <-done:
	}
	if res.err != nil {
		select {
		case <-viol:
			return reply, permissionError(m.Subject)
		case <-time.After(20 * time.Millisecond):
		}
		switch {
		case errors.Is(res.err, nats.ErrMaxPayload):
			return reply, tooLarge(m, c.nc.MaxPayload())
		case errors.Is(res.err, nats.ErrNoResponders):
			return reply, noProduceService(m.Subject, c.opts.URL)
		case errors.Is(res.err, context.DeadlineExceeded) || errors.Is(res.err, nats.ErrTimeout):
			return reply, fmt.Errorf("%w: the produce service did not answer %s; the record may or may not be stored", wire.ErrUnavailable, m.Subject)
		}
		return reply, fmt.Errorf("%w: %s: %v", wire.ErrUnavailable, m.Subject, res.err)
	}
	return decodeProduceReply(res.m)
}

// ThinOptions configures a ThinProducer. Zero values mean defaults.
type ThinOptions struct {
	// ID identifies the producer to the produce service, which stores it in every record
	// (wire.HeaderProducer) with the record's sequence number (1, 2, ...) and deduplicates by the
	// pair: re-sending the same sequence under the same ID within the streams' deduplication
	// window (2 minutes) stores no second copy. Default: random.
	ID string
	// MaxInFlight bounds records sent (or waiting to be re-sent) without a result; Send blocks
	// beyond it. Default 4096.
	MaxInFlight int
	// Timeout bounds the time from a record's first send to its result: a record still without
	// an acknowledgement by then fails with wire.ErrUnavailable (it may or may not be stored).
	// Until then failed attempts are re-sent (see ThinProducer). Default: the client's
	// Options.Timeout.
	Timeout time.Duration
	// AttemptTimeout bounds the wait for a reply before the producer re-sends (the broker or its
	// node may have died): a request is overdue when neither it nor any other request since got
	// a reply for AttemptTimeout. Default 5s, and at most Timeout.
	AttemptTimeout time.Duration
	// MaxBatch bounds the records of one request: records waiting to be sent go out together in
	// a batched request (spec/protocol.md §5.2) of at most MaxBatch records and 256 KiB. 1 sends
	// every record in a request of its own, for a broker that predates batched requests.
	// Default 256.
	MaxBatch int
}

// Batching of the thin producer's requests (spec/protocol.md §5.2).
const (
	// thinMaxBatch is ThinOptions.MaxBatch's default.
	thinMaxBatch = 256
	// thinBatchBytes bounds the body of a batched request (and at most half the server's
	// max_payload).
	thinBatchBytes = 256 << 10
	// thinRequests is how many requests may await their replies before the producer waits for
	// a full batch: with fewer in flight a record goes out at once (alone, when it is the only one
	// waiting), so batches only form while the broker is busy.
	thinRequests = 4
)

// ThinProducer sends records to the broker's produce service with many requests in flight on
// one connection, the way a thin client in any language would with nothing but NATS, following
// spec/protocol.md §5.2: it publishes each request with a reply subject of its own and matches
// replies by that subject; it sends one request to wire.ProduceSubject, and once a reply names the
// broker that answered, pipelines the following ones to that broker's own subject
// (wire.ProduceBrokerSubject), so that one broker stores them in order however many brokers serve
// the topic. Records that wait while the broker is busy go out together, as batched requests.
//
// Failures: when an attempt fails retryably — no responders (the broker is gone), no reply within
// AttemptTimeout, or an unavailable or out_of_sequence reply — the producer stops sending new
// records, pauses (100 ms, doubling up to 2 s), and re-sends every record not yet acknowledged,
// in Send order, with the same producer id and sequence (so copies the old broker stored are
// deduplicated), again starting with one request to the shared subject. A record fails for good
// on any other error reply, or when Timeout passes without an acknowledgement. An unavailable
// reply with the in_process detail (the record's Nats-Msg-Id is stuck, spec/protocol.md §5.2 step
// 5) is a final error too, at once: errors.Is(err, wire.ErrMsgIDInProcess) holds for it (and
// wire.ErrUnavailable: its fate is unknown); read the partition it names before producing the
// record again, as a new record.
//
// Order: records with the same key are stored in Send order, like a client-side Producer's,
// across the failure of a broker with requests in flight (§5.2 says why).
//
// Results are delivered by calling Send's done function once per record, from the goroutine
// that receives replies (replies of different partitions may complete out of Send order). A
// ThinProducer is safe for concurrent use.
type ThinProducer struct {
	c       *Client
	topic   string
	subject string
	id      string
	opts    ThinOptions
	prefix  string // reply subjects are prefix + request id
	tokens  bool   // send a random Pctl-Token with every record (the same for its re-sends)
	sub     *nats.Subscription
	maxBody int // bytes of a batched request's body

	mu   sync.Mutex
	cond *sync.Cond
	seq  uint64 // the sequence of the last record sent
	// q holds the records awaiting their result in sequence order: q[i] has sequence base+i, nil
	// once it has its result (the front is trimmed).
	q     []*thinPending
	base  uint64
	count int // records in q
	// delivering counts results taken out of q whose done has not returned yet: Flush waits for
	// them too, so that every result is delivered when it returns.
	delivering int
	// next is the sequence of the first record not yet sent in this session: records at or
	// after it wait, records before it are in flight.
	next uint64
	// reqs are the requests awaiting a reply, by id (the reply subject's last token).
	reqs   map[uint64]*thinRequest
	reqID  uint64
	buf    []byte // a batched request's body, reused
	broker string // the broker requests go to; "" while none is known
	// session counts retries: a request sent before the last one is superseded (its records are
	// re-sent); its success still counts, its failure says nothing.
	session uint64
	// inFlight counts this session's requests awaiting a reply.
	inFlight int
	// sessionLast is the sequence of the record last published since the probe that found the
	// broker (the next request's Pctl-Prev).
	sessionLast uint64
	// lastReply is when a reply to one of this session's requests last arrived: a broker that
	// answers is alive, so a request is overdue only after AttemptTimeout without any reply.
	lastReply time.Time
	probing   bool // with broker == "": one request is out to the shared subject
	paused    bool // a failure was seen: nothing is sent until the pause ends
	pause     time.Duration
	lastErr   error // the last retryable failure of any record
	fatal     error
	closed    bool

	stopViolation func()
	stop          chan struct{}
	wg            sync.WaitGroup
}

type thinPending struct {
	seq      uint64
	msg      *nats.Msg        // the record as a single request, without its reply subject
	rec      wire.BatchRecord // the record in a batched request
	size     int              // of rec's encoding
	deadline time.Time        // Timeout after the first send
	lastErr  error            // the last retryable failure
	done     func(Result)
}

// thinRequest is a request awaiting its reply.
type thinRequest struct {
	session uint64
	recs    []*thinPending // in body order; one for a single request
	batch   bool           // sent as a batched request (wire.HeaderBatch)
	subject string
	sentAt  time.Time
}

// NewThinProducer returns a producer for the broker's produce service. It does not contact the
// broker: an unknown topic is reported per record (wire.ErrNotFound).
func (c *Client) NewThinProducer(topic string, opts ThinOptions) (*ThinProducer, error) {
	if err := wire.ValidTopic(topic); err != nil {
		return nil, err
	}
	// A random id gets random per-record tokens (spec/protocol.md §5.2); a chosen one is for
	// idempotent re-runs, which need the broker's content tokens.
	tokens := opts.ID == ""
	if opts.ID == "" {
		opts.ID = nuid.Next()
	}
	if wire.ValidGroup(opts.ID) != nil {
		return nil, fmt.Errorf("%w: producer id %q: 1 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §2)", wire.ErrBadRequest, opts.ID)
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4096
	}
	if opts.Timeout <= 0 {
		opts.Timeout = c.opts.Timeout
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = thinAttemptTimeout
	}
	if opts.AttemptTimeout > opts.Timeout {
		opts.AttemptTimeout = opts.Timeout
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = thinMaxBatch
	}
	if opts.MaxBatch > wire.MaxBatchRecords {
		opts.MaxBatch = wire.MaxBatchRecords
	}
	t := &ThinProducer{c: c, topic: topic, subject: wire.ProduceSubject(topic), id: opts.ID, opts: opts, tokens: tokens,
		prefix: c.nc.NewInbox() + ".", reqs: map[uint64]*thinRequest{}, base: 1, next: 1,
		stop: make(chan struct{}), pause: thinPauseMin, maxBody: thinBatchBytes}
	if half := int(c.nc.MaxPayload() / 2); half < t.maxBody {
		t.maxBody = half
	}
	t.cond = sync.NewCond(&t.mu)
	sub, err := c.nc.Subscribe(t.prefix+"*", t.onReply)
	if err != nil {
		return nil, fmt.Errorf("%w: subscribe to replies: %v", wire.ErrUnavailable, err)
	}
	_ = sub.SetPendingLimits(-1, -1) // bounded by MaxInFlight
	t.sub = sub
	viol, stopViol := c.watchViolation(t.subject)
	t.stopViolation = stopViol
	t.wg.Add(2)
	go func() {
		defer t.wg.Done()
		select {
		case <-viol:
			t.fail(permissionError(t.subject))
		case <-t.stop:
		}
	}()
	go t.sweep()
	return t, nil
}

// ID returns the producer's id.
func (t *ThinProducer) ID() string { return t.id }

// Broker returns the id of the broker the producer sends to now ("" while it knows none).
func (t *ThinProducer) Broker() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.broker
}

// Send publishes one record's request. done, if not nil, is called exactly once with the
// record's fate (Partition, Epoch and Seq from the broker's reply; ProducerSeq is this
// producer's sequence number of the record). Send blocks while MaxInFlight records await their
// result. It fails at once, without calling done, for a record that can never be sent (a keyless
// record with a key, a key over 64 KiB, a message over the server's max_payload, a closed or
// failed producer).
func (t *ThinProducer) Send(ctx context.Context, rec Record, done func(Result)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.count >= t.opts.MaxInFlight && t.fatal == nil && !t.closed {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		waitCond(ctx, t.cond)
	}
	switch {
	case t.closed:
		return fmt.Errorf("%w: producer is closed", wire.ErrBadRequest)
	case t.fatal != nil:
		return t.fatal
	}
	m, err := thinMessage(t.subject, rec, t.id, t.seq+1)
	if err != nil {
		return err
	}
	var token string
	if t.tokens {
		token = produce.NewToken()
		m.Header[wire.HeaderToken] = []string{token}
	}
	if max := t.c.nc.MaxPayload(); int64(m.Size()-len(m.Subject)) > max {
		return tooLarge(m, max)
	}
	t.seq++
	pd := &thinPending{seq: t.seq, msg: m, deadline: time.Now().Add(t.opts.Timeout), done: done,
		rec: wire.BatchRecord{Seq: t.seq, Token: token, NoKey: rec.NoKey, Key: rec.Key, Value: rec.Value}}
	pd.size = wire.BatchRecordSize(pd.rec)
	t.q = append(t.q, pd)
	t.count++
	// Through the queue, never around it: a record must not overtake records still waiting.
	t.sendWaitingLocked()
	return nil
}

// at returns the record with sequence seq while it awaits its result, else nil.
func (t *ThinProducer) at(seq uint64) *thinPending {
	if seq < t.base || seq-t.base >= uint64(len(t.q)) {
		return nil
	}
	return t.q[seq-t.base]
}

// sendWaitingLocked sends the records waiting to be sent, in sequence order: all of them to the
// known broker, or the oldest one alone to the shared subject. While thinRequests
// requests await their replies, it sends only full batches (the rest wait for a reply).
func (t *ThinProducer) sendWaitingLocked() {
	for {
		if t.paused || t.closed || t.fatal != nil || (t.broker == "" && t.probing) {
			return
		}
		for t.next <= t.seq && t.at(t.next) == nil {
			t.next++ // it got its result while waiting (its Timeout passed)
		}
		if t.next > t.seq {
			return
		}
		if t.inFlight >= thinRequests && int(t.seq-t.next+1) < t.opts.MaxBatch {
			return
		}
		var recs []*thinPending
		size := 0
		max := t.opts.MaxBatch
		if t.broker == "" {
			// The probe goes alone: its reply names the broker, and a batch's reply would wait
			// for its slowest record (under load, longer than the attempt timeout) while nothing
			// else can be sent.
			max = 1
		}
		for s := t.next; s <= t.seq && len(recs) < max; s++ {
			pd := t.at(s)
			if pd == nil {
				continue
			}
			if len(recs) > 0 && size+pd.size > t.maxBody {
				break
			}
			// A batched request's body has no tombstone flag: a tombstone goes alone, as a
			// single request (its Pctl-Tombstone header), in its place in the sequence.
			tomb := pd.msg.Header[wire.HeaderTombstone] != nil
			if tomb && len(recs) > 0 {
				break
			}
			recs = append(recs, pd)
			size += pd.size
			if tomb {
				break
			}
		}
		t.next = recs[len(recs)-1].seq + 1
		t.publishLocked(recs)
	}
}

// publishLocked sends one request with recs (in sequence order): to the known broker, or (as the
// one probe) to the shared subject. A lone record goes as a single request, several as a batched
// one. A publish that fails (the connection is closed) makes the records wait for a re-send.
func (t *ThinProducer) publishLocked(recs []*thinPending) {
	subject := t.subject
	if t.broker != "" {
		subject = wire.ProduceBrokerSubject(t.topic, t.broker)
	} else {
		t.probing = true
	}
	m := &nats.Msg{Subject: subject}
	batch := len(recs) > 1
	if batch {
		t.buf = t.buf[:0]
		for _, pd := range recs {
			t.buf = wire.AppendBatchRecord(t.buf, pd.rec)
		}
		m.Data = t.buf
		m.Header = nats.Header{wire.HeaderProducer: {t.id}, wire.HeaderBatch: {strconv.Itoa(len(recs))}}
	} else {
		m.Data = recs[0].msg.Data
		m.Header = recs[0].msg.Header
		if t.broker != "" {
			m.Header = make(nats.Header, len(recs[0].msg.Header)+1)
			for k, v := range recs[0].msg.Header {
				m.Header[k] = v
			}
		}
	}
	if t.broker != "" {
		// Pipelined to one broker: say which request came before, so that the broker can tell
		// when one never arrived.
		m.Header[wire.HeaderPrev] = []string{strconv.FormatUint(t.sessionLast, 10)}
	}
	t.sessionLast = recs[len(recs)-1].seq
	t.reqID++
	id := t.reqID
	t.reqs[id] = &thinRequest{session: t.session, recs: recs, batch: batch, subject: subject, sentAt: time.Now()}
	t.inFlight++
	m.Reply = t.prefix + strconv.FormatUint(id, 10)
	// Published under t.mu, so that requests leave in sequence order.
	if err := t.c.nc.PublishMsg(m); err != nil {
		err = fmt.Errorf("%w: publish to %s: %v", wire.ErrUnavailable, subject, err)
		for _, pd := range recs {
			pd.lastErr = err
		}
		t.retryLocked(err)
	}
}

// retryLocked reacts to a retryable failure: forget the broker, pause, then re-send every record
// not yet acknowledged, in order (resume).
func (t *ThinProducer) retryLocked(cause error) {
	if cause != nil {
		t.lastErr = cause
	}
	if t.paused || t.closed {
		return
	}
	t.paused, t.broker, t.probing = true, "", false
	t.session++
	t.inFlight = 0
	t.next = t.base
	pause := t.pause
	if t.pause *= 2; t.pause > thinPauseMax {
		t.pause = thinPauseMax
	}
	time.AfterFunc(pause, t.resume)
}

// resume ends a pause: the oldest unacknowledged record goes out alone to the shared subject;
// its reply names the broker the rest go to (onReply).
func (t *ThinProducer) resume() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.paused = false
	t.sendWaitingLocked()
}

// Produce sends one record and waits for its result.
func (t *ThinProducer) Produce(ctx context.Context, rec Record) (Result, error) {
	return produce.Await(ctx, func(done func(Result)) error { return t.Send(ctx, rec, done) })
}

// Flush waits until every record sent so far has its result, delivered (its done function has
// returned; so done must not call Flush or Close). It returns the error that made the
// producer unusable (a permission refusal), if any; per-record failures are in the results.
func (t *ThinProducer) Flush(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.count > 0 || t.delivering > 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("flush: %d records not yet acknowledged: %w", t.count, ctx.Err())
		}
		waitCond(ctx, t.cond)
	}
	return t.fatal
}

// Close flushes and stops the producer.
func (t *ThinProducer) Close(ctx context.Context) error {
	err := t.Flush(ctx)
	t.mu.Lock()
	already := t.closed
	t.closed = true
	t.cond.Broadcast()
	t.mu.Unlock()
	if already {
		return err
	}
	close(t.stop)
	t.wg.Wait()
	t.stopViolation()
	_ = t.sub.Unsubscribe()
	// Requests still unanswered (Flush gave up): they get no reply now.
	t.failPending(fmt.Errorf("%w: producer closed before the broker answered; the record may or may not be stored", wire.ErrUnavailable))
	return err
}

// thinResult is a record's result with the callback to give it to, called outside t.mu.
type thinResult struct {
	pd *thinPending
	r  Result
}

func (t *ThinProducer) onReply(m *nats.Msg) {
	id, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, t.prefix), 10, 64)
	if err != nil {
		return
	}
	t.mu.Lock()
	req := t.reqs[id]
	if req == nil {
		t.mu.Unlock()
		return
	}
	delete(t.reqs, id)
	current := req.session == t.session
	if current {
		t.inFlight--
		t.lastReply = time.Now()
	}
	t.mu.Unlock()

	results, from := t.decodeReply(m, req)

	t.mu.Lock()
	var retry error
	var out []thinResult
	for i, pd := range req.recs {
		r := results[i]
		switch {
		case t.at(pd.seq) != pd:
			// It has its result already.
		case r.Err == nil:
			out = append(out, t.settleLocked(pd, r))
		case !current:
			// A superseded attempt's failure says nothing about the record now.
		case retryable(r.Err):
			pd.lastErr = r.Err
			retry = r.Err
		default:
			out = append(out, t.settleLocked(pd, r))
		}
	}
	if current && t.broker == "" && t.probing && retry == nil {
		// The probe's answer names the broker to pipeline to.
		t.probing = false
		if wire.ValidBrokerID(from) {
			t.broker = from
		}
	}
	if len(out) > 0 && retry == nil {
		t.pause = thinPauseMin
	}
	if retry != nil {
		t.retryLocked(retry)
	}
	t.sendWaitingLocked()
	t.mu.Unlock()
	t.deliver(out)
}

// decodeReply turns a reply into one result per record of req, and names the broker that sent
// it.
func (t *ThinProducer) decodeReply(m *nats.Msg, req *thinRequest) ([]Result, string) {
	results := make([]Result, len(req.recs))
	all := func(err error) []Result {
		for i := range results {
			results[i].Err = err
		}
		return results
	}
	from := m.Header.Get(wire.HeaderBroker)
	if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
		return all(noProduceService(req.subject, t.c.opts.URL)), from // the broker the request went to is gone
	}
	if !req.batch {
		rep, err := decodeProduceReply(m)
		if err != nil {
			return all(err), from
		}
		if from == "" {
			from = rep.Broker
		}
		results[0] = Result{Partition: rep.Partition, Epoch: rep.Epoch, Seq: rep.Seq, Duplicate: rep.Duplicate}
		return results, from
	}
	if m.Header.Get(wire.HeaderError) != "" {
		_, err := decodeProduceReply(m)
		return all(err), from
	}
	var rep wire.ProduceBatchReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || len(rep.Results) != len(req.recs) {
		return all(fmt.Errorf("%w: bad reply from the produce service to a batch of %d records (%d results): %v", wire.ErrInternal, len(req.recs), len(rep.Results), err)), from
	}
	if from == "" {
		from = rep.Broker
	}
	for i, pr := range rep.Results {
		if e := pr.Error; e != nil {
			results[i].Err = produceRefusal(e.Remote())
			continue
		}
		results[i] = Result{Partition: pr.Partition, Epoch: pr.Epoch, Seq: pr.Seq, Duplicate: pr.Duplicate}
	}
	return results, from
}

// settleLocked takes pd out of the queue with its result; the caller delivers it after
// unlocking t.mu.
func (t *ThinProducer) settleLocked(pd *thinPending, r Result) thinResult {
	t.q[pd.seq-t.base] = nil
	t.count--
	t.delivering++
	for len(t.q) > 0 && t.q[0] == nil {
		t.q = t.q[1:]
		t.base++
	}
	if len(t.q) == 0 {
		t.q = t.q[:0:0] // let the old array go
	}
	t.cond.Broadcast()
	r.ProducerSeq = pd.seq
	return thinResult{pd, r}
}

// deliver calls the done functions of results settleLocked took out of the queue, outside
// t.mu, in their order.
func (t *ThinProducer) deliver(out []thinResult) {
	if len(out) == 0 {
		return
	}
	for _, o := range out {
		if o.pd.done != nil {
			o.pd.done(o.r)
		}
	}
	t.mu.Lock()
	t.delivering -= len(out)
	t.cond.Broadcast()
	t.mu.Unlock()
}

// sweep re-sends records whose attempt is overdue and fails records past their Timeout.
func (t *ThinProducer) sweep() {
	defer t.wg.Done()
	every := t.opts.AttemptTimeout / 4
	if every > 250*time.Millisecond {
		every = 250 * time.Millisecond
	}
	if every < time.Millisecond {
		every = time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case now := <-tick.C:
			t.mu.Lock()
			overdue := false
			for id, req := range t.reqs {
				switch {
				case req.session == t.session && now.Sub(later(req.sentAt, t.lastReply)) > t.opts.AttemptTimeout:
					// Neither this request nor any other of the session got a reply for
					// AttemptTimeout. (A batch's reply waits for its slowest record: while other
					// replies come the broker is alive, and re-sending everything to another
					// would only add to its queue.)
					err := fmt.Errorf("%w: the produce service did not answer %s within %v; the record may or may not be stored", wire.ErrUnavailable, req.subject, t.opts.AttemptTimeout)
					for _, pd := range req.recs {
						pd.lastErr = err
					}
					overdue = true
				case req.session != t.session && now.Sub(req.sentAt) > t.opts.Timeout:
					delete(t.reqs, id) // superseded long ago: its records are settled or re-sent
				}
			}
			if overdue {
				t.retryLocked(nil)
			}
			var out []thinResult
			for _, pd := range t.q {
				if pd == nil || !now.After(pd.deadline) {
					continue
				}
				err := pd.lastErr
				if err == nil {
					err = t.lastErr
				}
				if err == nil {
					err = fmt.Errorf("%w: the produce service did not answer %s", wire.ErrUnavailable, t.subject)
				}
				out = append(out, t.settleLocked(pd, Result{Err: fmt.Errorf("%w (gave up after %v: the record may or may not be stored)", err, t.opts.Timeout)}))
			}
			if len(out) > 0 {
				t.sendWaitingLocked()
			}
			t.mu.Unlock()
			t.deliver(out)
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fail makes the producer unusable and fails every record awaiting a result.
func (t *ThinProducer) fail(err error) {
	t.mu.Lock()
	if t.fatal == nil {
		t.fatal = err
	}
	t.cond.Broadcast()
	t.mu.Unlock()
	t.failPending(err)
}

func (t *ThinProducer) failPending(err error) {
	t.mu.Lock()
	var out []thinResult
	for _, pd := range t.q {
		if pd != nil {
			out = append(out, t.settleLocked(pd, Result{Err: err}))
		}
	}
	t.mu.Unlock()
	t.deliver(out)
}

// thinMessage builds a produce request to subject (wire.ProduceSubject of a topic the caller
// checked). id and seq (when id != "") identify the record for deduplication.
func thinMessage(subject string, rec Record, id string, seq uint64) (*nats.Msg, error) {
	if rec.NoKey && len(rec.Key) > 0 {
		return nil, fmt.Errorf("%w: a keyless record (NoKey) has no Key", wire.ErrBadRequest)
	}
	if len(rec.Key) > 65536 {
		return nil, fmt.Errorf("%w: key of %d bytes; keys are at most 65536 bytes", wire.ErrBadRequest, len(rec.Key))
	}
	// The header names are canonical already: set them without Header.Set's canonicalisation.
	h := make(nats.Header, 3)
	if !rec.NoKey {
		h[wire.HeaderKey] = []string{wire.EncodeKey(rec.Key)}
	}
	if id != "" {
		h[wire.HeaderProducer] = []string{id}
		h[wire.HeaderSeq] = []string{strconv.FormatUint(seq, 10)}
	}
	if rec.Tombstone {
		if err := checkCompaction("", false, false, rec); err != nil {
			return nil, err
		}
		h[wire.HeaderTombstone] = []string{"true"}
	}
	return &nats.Msg{Subject: subject, Data: rec.Value, Header: h}, nil
}

func tooLarge(m *nats.Msg, max int64) error {
	size := m.Size() - len(m.Subject) - len(m.Reply)
	return wire.TooLarge(wire.LimitMaxPayload, fmt.Sprintf("record of %d bytes (value and headers) is larger than the server's max_payload of %d bytes", size, max))
}

func noProduceService(subject, url string) error {
	return fmt.Errorf("%w: no produce service answers %s; is 'pctl serve' running and connected to %s?", wire.ErrUnavailable, subject, url)
}

// decodeProduceReply turns a produce reply into a wire.ProduceReply or a *wire.RemoteError.
func decodeProduceReply(m *nats.Msg) (wire.ProduceReply, error) {
	var reply wire.ProduceReply
	if code := m.Header.Get(wire.HeaderError); code != "" {
		var er struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Detail  json.RawMessage `json:"detail"`
		}
		_ = json.Unmarshal(m.Data, &er)
		if er.Code == "" {
			er.Code = code
		}
		if er.Message == "" {
			er.Message = "the produce service refused the record (" + er.Code + ")"
		}
		return reply, produceRefusal(&wire.RemoteError{Code: er.Code, Message: er.Message, Detail: er.Detail})
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return reply, fmt.Errorf("%w: bad reply from the produce service: %v", wire.ErrInternal, err)
	}
	return reply, nil
}
