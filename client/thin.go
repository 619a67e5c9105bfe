package client

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
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
)

// This file is the thin-client side of the broker's produce service (spec/protocol.md): a
// request on wire.ProduceSubject(topic) whose data is the record's value, with the key in
// wire.HeaderKey ("b64:..."; absent for a keyless record) and the producer's identity in
// wire.HeaderProducer and wire.HeaderSeq; the reply is a JSON wire.ProduceReply, or an error reply
// (wire.HeaderError and a JSON wire.ErrorReply). The broker partitions with the topic's own module,
// so a thin client needs nothing but a NATS connection; these helpers exist for tests, tools and
// `pctl produce --broker-side`.

// ProduceBrokerSide sends one record through the broker's produce service and waits for its
// reply. It is the simplest thin client: one request at a time. For throughput use
// NewThinProducer, which keeps many requests in flight.
func (c *Client) ProduceBrokerSide(ctx context.Context, topic string, rec Record) (wire.ProduceReply, error) {
	var reply wire.ProduceReply
	if err := wire.ValidTopic(topic); err != nil {
		return reply, err
	}
	m, err := thinMessage(wire.ProduceSubject(topic), rec, "", 0)
	if err != nil {
		return reply, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	viol, stop := c.watchViolation(m.Subject)
	defer stop()
	type result struct {
		m   *nats.Msg
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.nc.RequestMsgWithContext(ctx, m)
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
			return reply, fmt.Errorf("%w: the produce service did not answer %s within %v; the record may or may not be stored", wire.ErrUnavailable, m.Subject, c.opts.Timeout)
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
	// MaxInFlight bounds requests awaiting a reply; Send blocks beyond it. Default 4096.
	MaxInFlight int
	// Timeout bounds the wait for one reply; a record without a reply by then fails with
	// wire.ErrUnavailable (it may or may not be stored). Default: the client's Options.Timeout.
	Timeout time.Duration
}

// ThinProducer sends records to the broker's produce service with many requests in flight on
// one connection, the way a thin client in any language would with nothing but NATS: it publishes
// each request with a reply subject of its own and matches replies by that subject.
//
// Order: requests are published in the order Send was called, on one connection, and the
// broker's produce service handles the requests of its subscription in arrival order, so records
// with the same key are stored in Send order, like a client-side Producer's.
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
	prefix  string // reply subjects are prefix + sequence
	tokens  bool   // send a random Pctl-Token with every record
	sub     *nats.Subscription

	mu      sync.Mutex
	cond    *sync.Cond
	seq     uint64
	pending map[uint64]*thinPending
	fatal   error
	closed  bool

	stopViolation func()
	stop          chan struct{}
	wg            sync.WaitGroup
}

type thinPending struct {
	seq      uint64
	deadline time.Time
	done     func(Result)
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
	t := &ThinProducer{c: c, topic: topic, subject: wire.ProduceSubject(topic), id: opts.ID, opts: opts, tokens: tokens,
		prefix: c.nc.NewInbox() + ".", pending: map[uint64]*thinPending{}, stop: make(chan struct{})}
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

// Send publishes one record's request. done, if not nil, is called exactly once with the
// record's fate (Partition, Epoch and Seq from the broker's reply; ProducerSeq is this
// producer's sequence number of the record). Send blocks while MaxInFlight requests await their
// reply. It fails at once, without calling done, for a record that can never be sent (a keyless
// record with a key, a key over 64 KiB, a message over the server's max_payload, a closed or
// failed producer).
func (t *ThinProducer) Send(ctx context.Context, rec Record, done func(Result)) error {
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
		m.Header[wire.HeaderToken] = []string{newToken()}
	}
	t.seq++
	m.Reply = t.prefix + strconv.FormatUint(t.seq, 10)
	pd := &thinPending{seq: t.seq, deadline: time.Now().Add(t.opts.Timeout), done: done}
	t.pending[t.seq] = pd
	// Published under t.mu, so that requests leave in Send order.
	if err := t.c.nc.PublishMsg(m); err != nil {
		delete(t.pending, t.seq)
		t.seq-- // never sent: the sequence stays free, so the next record keeps the numbering
		if errors.Is(err, nats.ErrMaxPayload) {
			return tooLarge(m, t.c.nc.MaxPayload())
		}
		return fmt.Errorf("%w: publish to %s: %v", wire.ErrUnavailable, t.subject, err)
	}
	return nil
}

// Produce sends one record and waits for its result.
func (t *ThinProducer) Produce(ctx context.Context, rec Record) (Result, error) {
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
func (t *ThinProducer) Flush(ctx context.Context) error {
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

func (t *ThinProducer) onReply(m *nats.Msg) {
	seq, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, t.prefix), 10, 64)
	if err != nil {
		return
	}
	t.mu.Lock()
	pd, ok := t.pending[seq]
	t.mu.Unlock()
	if !ok {
		return // timed out already
	}
	var r Result
	if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
		r.Err = noProduceService(t.subject, t.c.opts.URL)
	} else if rep, err := decodeProduceReply(m); err != nil {
		r.Err = err
	} else {
		r = Result{Partition: rep.Partition, Epoch: rep.Epoch, Seq: rep.Seq, Duplicate: rep.Duplicate}
	}
	t.settle(pd, r)
}

// settle completes one request once: a reply and a timeout may race for it.
func (t *ThinProducer) settle(pd *thinPending, r Result) {
	t.mu.Lock()
	if t.pending[pd.seq] != pd {
		t.mu.Unlock()
		return
	}
	delete(t.pending, pd.seq)
	t.cond.Broadcast()
	t.mu.Unlock()
	r.ProducerSeq = pd.seq
	if pd.done != nil {
		pd.done(r)
	}
}

// sweep fails requests whose reply is overdue.
func (t *ThinProducer) sweep() {
	defer t.wg.Done()
	every := t.opts.Timeout / 4
	if every > time.Second {
		every = time.Second
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
			var late []*thinPending
			t.mu.Lock()
			for _, pd := range t.pending {
				if now.After(pd.deadline) {
					late = append(late, pd)
				}
			}
			t.mu.Unlock()
			for _, pd := range late {
				t.settle(pd, Result{Err: fmt.Errorf("%w: the produce service did not answer %s within %v; the record may or may not be stored", wire.ErrUnavailable, t.subject, t.opts.Timeout)})
			}
		}
	}
}

// fail makes the producer unusable and fails every request awaiting a reply.
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
	var all []*thinPending
	for _, pd := range t.pending {
		all = append(all, pd)
	}
	t.mu.Unlock()
	for _, pd := range all {
		t.settle(pd, Result{Err: err})
	}
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
	return &nats.Msg{Subject: subject, Data: rec.Value, Header: h}, nil
}

func tooLarge(m *nats.Msg, max int64) error {
	size := m.Size() - len(m.Subject) - len(m.Reply)
	return fmt.Errorf("%w: record of %d bytes (value and headers) is larger than the server's max_payload of %d bytes", wire.ErrBadRequest, size, max)
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
		return reply, &wire.RemoteError{Code: er.Code, Message: er.Message, Detail: er.Detail}
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return reply, fmt.Errorf("%w: bad reply from the produce service: %v", wire.ErrInternal, err)
	}
	return reply, nil
}
