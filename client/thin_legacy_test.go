package client

// The thin producer as it was before batched requests (main at f5e30dd, client/thin.go), kept
// only as the baseline of BenchmarkThinProducerVsLegacy: its sendWaitingLocked walked and sorted
// every pending record on every reply (42% of its CPU at 4096 in flight), and it sent one request
// per record. Renamed, otherwise unchanged.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/produce"
)

// legacyThin sends records to the broker's produce service with many requests in flight on
// one connection, the way a thin client in any language would with nothing but NATS, following
// spec/protocol.md §5.2: it publishes each request with a reply subject of its own and matches
// replies by that subject; it sends one request to wire.ProduceSubject, and once a reply names the
// broker that answered, pipelines the following ones to that broker's own subject
// (wire.ProduceBrokerSubject), so that one broker stores them in order however many brokers serve
// the topic.
//
// Failures: when an attempt fails retryably — no responders (the broker is gone), no reply within
// AttemptTimeout, or an unavailable or out_of_sequence reply — the producer stops sending new
// records, pauses (100 ms, doubling up to 2 s), and re-sends every record not yet acknowledged,
// in Send order, with the same producer id and sequence (so copies the old broker stored are
// deduplicated), again starting with one request to the shared subject. A record fails for good
// on any other error reply, or when Timeout passes without an acknowledgement.
//
// Order: records with the same key are stored in Send order, like a client-side Producer's,
// across the failure of a broker with requests in flight (§5.2 says why).
//
// Results are delivered by calling Send's done function once per record, from the goroutine
// that receives replies (replies of different partitions may complete out of Send order). A
// legacyThin is safe for concurrent use.
type legacyThin struct {
	c       *Client
	topic   string
	subject string
	id      string
	opts    ThinOptions
	prefix  string // reply subjects are prefix + sequence + "." + attempt
	tokens  bool   // send a random Pctl-Token with every record (the same for its re-sends)
	sub     *nats.Subscription

	mu      sync.Mutex
	cond    *sync.Cond
	seq     uint64
	pending map[uint64]*legacyThinPending
	broker  string // the broker requests go to; "" while none is known
	// sessionLast is the sequence of the request last published since the probe that found the
	// broker (the next request's Pctl-Prev).
	sessionLast uint64
	probing     bool // with broker == "": one request is out to the shared subject
	paused      bool // a failure was seen: nothing is sent until the pause ends
	pause       time.Duration
	lastErr     error // the last retryable failure of any record
	fatal       error
	closed      bool

	stopViolation func()
	stop          chan struct{}
	wg            sync.WaitGroup
}

type legacyThinPending struct {
	seq      uint64
	msg      *nats.Msg // the request, without its reply subject
	deadline time.Time // Timeout after the first send
	attempt  int       // of the attempt in flight (or last sent)
	sentAt   time.Time // of the attempt in flight; zero: waiting to be sent
	lastErr  error     // the last retryable failure
	done     func(Result)
}

// NewlegacyThin returns a producer for the broker's produce service. It does not contact the
// broker: an unknown topic is reported per record (wire.ErrNotFound).
func (c *Client) newLegacyThin(topic string, opts ThinOptions) (*legacyThin, error) {
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
	t := &legacyThin{c: c, topic: topic, subject: wire.ProduceSubject(topic), id: opts.ID, opts: opts, tokens: tokens,
		prefix: c.nc.NewInbox() + ".", pending: map[uint64]*legacyThinPending{}, stop: make(chan struct{}), pause: thinPauseMin}
	t.cond = sync.NewCond(&t.mu)
	sub, err := c.nc.Subscribe(t.prefix+"*.*", t.onReply)
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
func (t *legacyThin) ID() string { return t.id }

// Broker returns the id of the broker the producer sends to now ("" while it knows none).
func (t *legacyThin) Broker() string {
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
func (t *legacyThin) Send(ctx context.Context, rec Record, done func(Result)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.pending) >= t.opts.MaxInFlight && t.fatal == nil && !t.closed {
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
	if t.tokens {
		m.Header[wire.HeaderToken] = []string{produce.NewToken()}
	}
	if max := t.c.nc.MaxPayload(); int64(m.Size()-len(m.Subject)) > max {
		return tooLarge(m, max)
	}
	t.seq++
	pd := &legacyThinPending{seq: t.seq, msg: m, deadline: time.Now().Add(t.opts.Timeout), done: done}
	t.pending[t.seq] = pd
	if !t.paused && (t.broker != "" || !t.probing) {
		t.publishLocked(pd)
	}
	return nil
}

// publishLocked sends an attempt of pd: to the known broker, or (as the one probe) to the shared
// subject. A publish that fails (the connection is closed) makes the record wait for a re-send.
func (t *legacyThin) publishLocked(pd *legacyThinPending) {
	subject, header := t.subject, pd.msg.Header
	if t.broker != "" {
		// Pipelined to one broker: say which request came before, so that the broker can tell
		// when one never arrived.
		subject = wire.ProduceBrokerSubject(t.topic, t.broker)
		header = make(nats.Header, len(pd.msg.Header)+1)
		for k, v := range pd.msg.Header {
			header[k] = v
		}
		header[wire.HeaderPrev] = []string{strconv.FormatUint(t.sessionLast, 10)}
	} else {
		t.probing = true
	}
	t.sessionLast = pd.seq
	pd.attempt++
	pd.sentAt = time.Now()
	m := &nats.Msg{Subject: subject, Data: pd.msg.Data, Header: header,
		Reply: t.prefix + strconv.FormatUint(pd.seq, 10) + "." + strconv.Itoa(pd.attempt)}
	// Published under t.mu, so that requests leave in sequence order.
	if err := t.c.nc.PublishMsg(m); err != nil {
		pd.lastErr = fmt.Errorf("%w: publish to %s: %v", wire.ErrUnavailable, subject, err)
		t.retryLocked(pd.lastErr)
	}
}

// retryLocked reacts to a retryable failure: forget the broker, pause, then re-send every record
// not yet acknowledged, in order (resume).
func (t *legacyThin) retryLocked(cause error) {
	if cause != nil {
		t.lastErr = cause
	}
	if t.paused || t.closed {
		return
	}
	t.paused, t.broker, t.probing = true, "", false
	for _, pd := range t.pending {
		pd.sentAt = time.Time{}
	}
	pause := t.pause
	if t.pause *= 2; t.pause > thinPauseMax {
		t.pause = thinPauseMax
	}
	time.AfterFunc(pause, t.resume)
}

// resume ends a pause: the oldest unacknowledged record goes out alone to the shared subject; its
// reply names the broker the rest go to (onReply).
func (t *legacyThin) resume() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.paused = false
	t.sendWaitingLocked()
}

// sendWaitingLocked sends the records waiting to be sent, in sequence order: all of them to the
// known broker, or the oldest one alone to the shared subject.
func (t *legacyThin) sendWaitingLocked() {
	if t.paused || t.closed || t.fatal != nil || (t.broker == "" && t.probing) {
		return
	}
	var waiting []*legacyThinPending
	for _, pd := range t.pending {
		if pd.sentAt.IsZero() {
			waiting = append(waiting, pd)
		}
	}
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].seq < waiting[j].seq })
	for _, pd := range waiting {
		t.publishLocked(pd)
		if t.paused || t.broker == "" {
			return // the probe is out (or the publish failed)
		}
	}
}

// Produce sends one record and waits for its result.
func (t *legacyThin) Produce(ctx context.Context, rec Record) (Result, error) {
	ch := make(chan Result, 1)
	if err := t.Send(ctx, rec, func(r Result) { ch <- r }); err != nil {
		return Result{}, err
	}
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// Flush waits until every record sent so far has its result. It returns the error that made the
// producer unusable (a permission refusal), if any; per-record failures are in the results.
func (t *legacyThin) Flush(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.pending) > 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("flush: %d records not yet acknowledged: %w", len(t.pending), ctx.Err())
		}
		waitCond(ctx, t.cond)
	}
	return t.fatal
}

// Close flushes and stops the producer.
func (t *legacyThin) Close(ctx context.Context) error {
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

func (t *legacyThin) onReply(m *nats.Msg) {
	seqText, attemptText, ok := strings.Cut(strings.TrimPrefix(m.Subject, t.prefix), ".")
	if !ok {
		return
	}
	seq, err1 := strconv.ParseUint(seqText, 10, 64)
	attempt, err2 := strconv.Atoi(attemptText)
	if err1 != nil || err2 != nil {
		return
	}
	var r Result
	from := m.Header.Get(wire.HeaderBroker)
	if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
		r.Err = noProduceService(t.subject, t.c.opts.URL) // the broker the request went to is gone
	} else if rep, err := decodeProduceReply(m); err != nil {
		r.Err = err
	} else {
		r = Result{Partition: rep.Partition, Epoch: rep.Epoch, Seq: rep.Seq, Duplicate: rep.Duplicate}
		if from == "" {
			from = rep.Broker
		}
	}
	t.mu.Lock()
	pd, ok := t.pending[seq]
	if !ok {
		t.mu.Unlock()
		return // settled already
	}
	current := attempt == pd.attempt && !pd.sentAt.IsZero()
	probe := current && t.broker == "" && t.probing
	if probe && r.Err == nil || probe && !retryable(r.Err) {
		// The probe's answer names the broker to pipeline to.
		t.probing = false
		if wire.ValidBrokerID(from) {
			t.broker = from
		}
	}
	switch {
	case r.Err == nil:
		t.pause = thinPauseMin
	case !current:
		t.mu.Unlock()
		return // a superseded attempt's failure says nothing about the record now
	case retryable(r.Err):
		pd.lastErr = r.Err
		t.retryLocked(r.Err)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.settle(pd, r)
	t.mu.Lock()
	t.sendWaitingLocked()
	t.mu.Unlock()
}

// settle completes one record once.
func (t *legacyThin) settle(pd *legacyThinPending, r Result) {
	t.mu.Lock()
	if t.pending[pd.seq] != pd {
		t.mu.Unlock()
		return
	}
	delete(t.pending, pd.seq)
	if t.broker == "" && t.probing && !pd.sentAt.IsZero() {
		t.probing = false // the probe itself gave up
	}
	t.cond.Broadcast()
	t.mu.Unlock()
	r.ProducerSeq = pd.seq
	if pd.done != nil {
		pd.done(r)
	}
}

// sweep re-sends records whose attempt is overdue and fails records past their Timeout.
func (t *legacyThin) sweep() {
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
			var late []*legacyThinPending
			t.mu.Lock()
			overdue := false
			for _, pd := range t.pending {
				switch {
				case now.After(pd.deadline):
					late = append(late, pd)
				case !pd.sentAt.IsZero() && now.Sub(pd.sentAt) > t.opts.AttemptTimeout:
					pd.lastErr = fmt.Errorf("%w: the produce service did not answer %s within %v; the record may or may not be stored", wire.ErrUnavailable, t.subject, t.opts.AttemptTimeout)
					overdue = true
				}
			}
			if overdue {
				t.retryLocked(nil)
			}
			lastErr := t.lastErr
			t.mu.Unlock()
			for _, pd := range late {
				err := pd.lastErr
				if err == nil {
					err = lastErr
				}
				if err == nil {
					err = fmt.Errorf("%w: the produce service did not answer %s", wire.ErrUnavailable, t.subject)
				}
				t.settle(pd, Result{Err: fmt.Errorf("%w (gave up after %v: the record may or may not be stored)", err, t.opts.Timeout)})
			}
			if len(late) > 0 {
				t.mu.Lock()
				t.sendWaitingLocked()
				t.mu.Unlock()
			}
		}
	}
}

// fail makes the producer unusable and fails every record awaiting a result.
func (t *legacyThin) fail(err error) {
	t.mu.Lock()
	if t.fatal == nil {
		t.fatal = err
	}
	t.cond.Broadcast()
	t.mu.Unlock()
	t.failPending(err)
}

func (t *legacyThin) failPending(err error) {
	t.mu.Lock()
	var all []*legacyThinPending
	for _, pd := range t.pending {
		all = append(all, pd)
	}
	t.mu.Unlock()
	for _, pd := range all {
		t.settle(pd, Result{Err: err})
	}
}

// LegacyThin and NewLegacyThin give the baseline to package client_test's benchmark.
type LegacyThin = legacyThin

func NewLegacyThin(c *Client, topic string, opts ThinOptions) (*LegacyThin, error) {
	return c.newLegacyThin(topic, opts)
}
