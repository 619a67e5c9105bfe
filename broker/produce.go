package broker

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
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/produce"
)

// produceService partitions records for thin clients with the topic's own module and publishes
// them with a producer engine (internal/produce) per topic, the one behind client.Producer, so it
// gets the same ordering and fencing behaviour as client-side producers. Requests of one subscription are handled in arrival order, so the
// records of one thin producer keep their order at this broker; spec/protocol.md §5.2 says how a
// pipelining thin client keeps them at one broker (subject pctl.produce.<topic>.<broker id>) and
// how the per-producer sequence check below catches a request that never arrived.
type produceService struct {
	b    *Broker
	once sync.Once
	nc   *nats.Conn    // the service's own connection
	conn *produce.Conn // nc as the producer engine sees it
	err  error
	mu   sync.Mutex
	prod map[string]*produce.Producer
	seqs producerSeqs
}

// Timeouts of the produce service's connection: those of a client.Client by default.
const (
	produceTimeout    = 30 * time.Second // descriptor reads that answered "unavailable" are retried this long
	produceAckTimeout = 5 * time.Second  // a fast batch without a reply for this long is settled
)

// connectProduce opens the produce service's own connection to the broker's server, as the
// broker role, and describes it to the producer engine: descriptors are read by this broker
// (getTopic, as its topic API answers them), partitioners are the broker's own (hooks.go).
func (b *Broker) connectProduce(ctx context.Context) (*nats.Conn, *produce.Conn, error) {
	creds := b.cfg.Creds
	if creds == "" {
		creds = CredsPath(b.cfg.DataDir, roleBroker)
	}
	key, err := nats.NkeyOptionFromSeed(creds)
	if err != nil {
		return nil, nil, fmt.Errorf("credentials %s: %w", creds, err)
	}
	ls := &produce.Listeners{}
	nc, err := nats.Connect(b.ClientURL(), key, nats.Name("pctl-broker-produce"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if subject, ok := produce.ViolationSubject(err); ok {
				ls.Violation(subject)
			}
		}),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { ls.ConnEvent(false) }),
		nats.ReconnectHandler(func(*nats.Conn) { ls.ConnEvent(true) }))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %v", b.ClientURL(), err)
	}
	ackTimeout := b.cfg.Testing.AckTimeout(produceAckTimeout)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16), jetstream.WithPublishAsyncTimeout(ackTimeout))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	conn := &produce.Conn{NC: nc, JS: js, Timeout: produceTimeout, AckTimeout: ackTimeout,
		Topic: func(ctx context.Context, topic string) (*wire.Topic, error) {
			t, _, err := b.getTopic(ctx, topic)
			if err == nil && t.Creating {
				err = &wire.TopicCreatingError{Topic: t.Name}
			}
			if errors.Is(err, wire.ErrUnavailable) {
				// What a client reading it through the topic API gets: the broker's answer, which
				// the producer retries.
				re := &wire.RemoteError{Code: wire.Code(err), Message: err.Error()}
				var creating *wire.TopicCreatingError
				if errors.As(err, &creating) {
					re.Detail, _ = json.Marshal(creating.Detail())
				}
				return nil, re
			}
			return t, err
		},
		Partitioner: b.producePartitioner, // hooks.go: measured when a hook wants plugin calls
		OnViolation: ls.OnViolation, OnConnEvent: ls.OnConnEvent}
	return nc, conn, nil
}

// seqMemory is how long the service remembers a producer's highest accepted sequence after its
// last request.
const seqMemory = 2 * time.Minute

// producerSeqs remembers, per (topic, producer id), the highest Pctl-Seq this broker accepted.
type producerSeqs struct {
	mu    sync.Mutex
	last  map[string]*seqEntry
	swept time.Time
}

type seqEntry struct {
	seq  uint64
	seen time.Time
}

// accept checks a request's place in its producer's sequence and records it (spec/protocol.md
// §5.2). prev is the request's Pctl-Prev (nil without one): the sequence the client sent this
// broker just before; a request whose prev this broker never accepted is refused, because the
// request before it never arrived (NATS dropped it), or because this broker does not know the
// producer (it restarted, or forgot an idle one).
func (ps *producerSeqs) accept(topic, producer string, seq uint64, prev *uint64) error {
	now := time.Now()
	key := topic + "\x00" + producer
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.last == nil {
		ps.last = map[string]*seqEntry{}
	}
	if now.Sub(ps.swept) > seqMemory/4 {
		for k, e := range ps.last {
			if now.Sub(e.seen) > seqMemory {
				delete(ps.last, k)
			}
		}
		ps.swept = now
	}
	e := ps.last[key]
	switch {
	case prev != nil && e == nil:
		return fmt.Errorf("%w: producer %s is unknown at this broker (restarted, or idle for over %v); re-send the records not yet acknowledged, in order, starting with one to %s", wire.ErrOutOfSequence, producer, seqMemory, wire.ProduceSubject(topic))
	case prev != nil && *prev > e.seq:
		return fmt.Errorf("%w: producer %s sequence %d follows %d, which never arrived here; re-send the records not yet acknowledged, in order", wire.ErrOutOfSequence, producer, seq, *prev)
	case e == nil:
		ps.last[key] = &seqEntry{seq: seq, seen: now}
		return nil
	}
	if seq > e.seq {
		e.seq = seq
	}
	e.seen = now
	return nil
}

func (b *Broker) producer(ctx context.Context, topic string) (*produce.Producer, error) {
	ps := &b.ps
	ps.once.Do(func() {
		ps.nc, ps.conn, ps.err = b.connectProduce(ctx)
	})
	if ps.err != nil {
		return nil, fmt.Errorf("%w: produce service: %v", wire.ErrUnavailable, ps.err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.prod == nil {
		ps.prod = map[string]*produce.Producer{}
	}
	if p, ok := ps.prod[topic]; ok {
		return p, nil
	}
	p, err := produce.New(ctx, ps.conn, topic, produce.Options{
		// A fresh id for every producer the service creates: records without an origin of their
		// own are deduplicated by this id, so reusing it after a restart would drop new records
		// as duplicates of old ones.
		ID:    "broker-" + nuid.Next(),
		Hooks: b.cfg.Hooks,
	})
	if err != nil {
		return nil, err
	}
	ps.prod[topic] = p
	return p, nil
}

func (b *Broker) produce(m *nats.Msg) {
	topic, direct := strings.TrimPrefix(m.Subject, wire.ProducePrefix+"."), false
	if t, id, ok := strings.Cut(topic, "."); ok {
		if id != b.id {
			return // not ours (cannot happen: we subscribe to our own id only)
		}
		topic, direct = t, true
	}
	if err := wire.ValidTopic(topic); err != nil {
		b.produceErr(m, err)
		return
	}
	p, err := b.producer(b.ctx, topic)
	if err != nil {
		b.produceErr(m, err)
		return
	}
	if v := m.Header.Get(wire.HeaderBatch); v != "" {
		b.produceBatch(m, p, topic, direct, v)
		return
	}
	rec := produce.Record{Value: m.Data, NoKey: true}
	if id := m.Header.Get(wire.HeaderProducer); id != "" {
		seq, err := strconv.ParseUint(m.Header.Get(wire.HeaderSeq), 10, 64)
		if err != nil || seq == 0 || wire.ValidGroup(id) != nil {
			b.produceErr(m, fmt.Errorf("%w: a request with %s %q needs %s, a positive integer (got %q), and an id of 1 to 64 characters of A-Z a-z 0-9 _ -", wire.ErrBadRequest, wire.HeaderProducer, id, wire.HeaderSeq, m.Header.Get(wire.HeaderSeq)))
			return
		}
		rec.Origin = &produce.Origin{Producer: id, Seq: seq, Token: m.Header.Get(wire.HeaderToken)}
		if tok := rec.Origin.Token; tok != "" && !wire.ValidToken(tok) {
			respondErr(m, fmt.Errorf("%w: %s %q: 16 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §5.2)", wire.ErrBadRequest, wire.HeaderToken, tok))
			return
		}
	}
	if v := m.Header.Get(wire.HeaderKey); v != "" {
		key, err := wire.DecodeKey(v)
		if err != nil {
			b.produceErr(m, fmt.Errorf("%w: %v", wire.ErrBadRequest, err))
			return
		}
		rec.Key, rec.NoKey = key, false
	}
	rec.Tombstone = m.Header.Get(wire.HeaderTombstone) != "" // spec/protocol.md §10.2
	if rec.Origin != nil {
		var prev *uint64
		if v := m.Header.Get(wire.HeaderPrev); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n >= rec.Origin.Seq {
				b.produceErr(m, fmt.Errorf("%w: %s %q must be a sequence number below %s %d", wire.ErrBadRequest, wire.HeaderPrev, v, wire.HeaderSeq, rec.Origin.Seq))
				return
			}
			prev = &n
		} else if direct {
			// Pipelined to this broker without saying what came before: accepted only as the
			// start of a session would be, which needs the shared subject.
			zero := uint64(0)
			prev = &zero
		}
		if err := b.ps.seqs.accept(topic, rec.Origin.Producer, rec.Origin.Seq, prev); err != nil {
			b.produceErr(m, err)
			return
		}
	}
	err = p.Send(b.ctx, rec, func(r produce.Result) {
		if m.Reply == "" {
			return
		}
		r = b.produceResultHook(topic, rec.Origin, r)
		if r.Err != nil {
			b.produceErr(m, withRecordDetail(r))
			return
		}
		out := nats.NewMsg(m.Reply)
		out.Header[wire.HeaderBroker] = []string{b.id}
		out.Data, _ = json.Marshal(wire.ProduceReply{Partition: r.Partition, Epoch: r.Epoch, Seq: r.Seq, Duplicate: r.Duplicate, Broker: b.id})
		_ = m.RespondMsg(out)
	})
	if err != nil {
		b.produceErr(m, err)
		b.dropProducer(topic, err)
	}
}

// dropProducer forgets the topic's producer after Send refused a record because the producer
// is closed or its topic is gone: the next request makes a new one.
func (b *Broker) dropProducer(topic string, err error) {
	if errors.Is(err, produce.ErrProducerClosed) || errors.Is(err, wire.ErrNotFound) {
		b.ps.mu.Lock()
		delete(b.ps.prod, topic)
		b.ps.mu.Unlock()
	}
}

// produceBatch handles a batched request (spec/protocol.md §5.2): checked as a whole (the body,
// the headers, the sequence check), then its records handed to the producer in body order, as
// consecutive single requests would be, and answered once, when every record has its result.
func (b *Broker) produceBatch(m *nats.Msg, p *produce.Producer, topic string, direct bool, count string) {
	n, err := wire.ParseBatchCount(count)
	if err != nil {
		b.produceErr(m, err)
		return
	}
	id := m.Header.Get(wire.HeaderProducer)
	for _, h := range []string{wire.HeaderSeq, wire.HeaderKey, wire.HeaderToken, wire.HeaderTombstone} {
		if _, ok := m.Header[h]; ok {
			b.produceErr(m, fmt.Errorf("%w: a batched request (%s) carries each record's sequence, key and token in its body, not in a %s header, and no tombstones (send a tombstone as a single request; spec/protocol.md §5.2)", wire.ErrBadRequest, wire.HeaderBatch, h))
			return
		}
	}
	if wire.ValidGroup(id) != nil {
		b.produceErr(m, fmt.Errorf("%w: a batched request (%s) needs %s, an id of 1 to 64 characters of A-Z a-z 0-9 _ - (got %q)", wire.ErrBadRequest, wire.HeaderBatch, wire.HeaderProducer, id))
		return
	}
	recs, err := wire.DecodeBatch(m.Data, n)
	if err != nil {
		b.produceErr(m, err)
		return
	}
	first, last := recs[0].Seq, recs[n-1].Seq
	var prev *uint64
	if v := m.Header.Get(wire.HeaderPrev); v != "" {
		pv, err := strconv.ParseUint(v, 10, 64)
		if err != nil || pv >= first {
			b.produceErr(m, fmt.Errorf("%w: %s %q must be a sequence number below the batch's first record's, %d", wire.ErrBadRequest, wire.HeaderPrev, v, first))
			return
		}
		prev = &pv
	} else if direct {
		zero := uint64(0)
		prev = &zero
	}
	if err := b.ps.seqs.accept(topic, id, last, prev); err != nil {
		b.produceErr(m, err)
		return
	}
	// The body is the request's: the producer keeps keys and values until their results, and
	// nats.go does not reuse a delivered message's data.
	results := make([]wire.ProduceResult, n)
	var mu sync.Mutex
	left := n
	finish := func(i int, r produce.Result) {
		r = b.produceResultHook(topic, &produce.Origin{Producer: id, Seq: recs[i].Seq}, r)
		res := wire.ProduceResult{Partition: r.Partition, Epoch: r.Epoch, Seq: r.Seq, Duplicate: r.Duplicate}
		if r.Err != nil {
			res = wire.ProduceResult{Error: &wire.ErrorReply{Code: wire.Code(r.Err), Message: r.Err.Error(), Detail: recordDetail(r)}}
		}
		mu.Lock()
		results[i] = res
		left--
		end := left == 0
		mu.Unlock()
		if !end || m.Reply == "" {
			return
		}
		out := nats.NewMsg(m.Reply)
		out.Header[wire.HeaderBroker] = []string{b.id}
		out.Data, _ = json.Marshal(wire.ProduceBatchReply{Results: results, Broker: b.id})
		_ = m.RespondMsg(out)
	}
	for i, r := range recs {
		rec := produce.Record{Key: r.Key, NoKey: r.NoKey, Value: r.Value,
			Origin: &produce.Origin{Producer: id, Seq: r.Seq, Token: r.Token}}
		if err := p.Send(b.ctx, rec, func(res produce.Result) { finish(i, res) }); err != nil {
			// Send refused this record (it can never be sent, or the producer is closing, when
			// it refuses the later ones too), as it would refuse it in a single request.
			b.dropProducer(topic, err)
			finish(i, produce.Result{Err: err})
		}
	}
}

// recordDetail is the detail of a record's failure (spec/protocol.md §3), else nil: when its
// Nats-Msg-Id is stuck "in process" (§5.1.5) it tells the thin client not to re-send the record
// under the same identity (§5.2), which the failure's code (unavailable) alone would have it do;
// when the record was refused for its size, it says so without the message's words.
func recordDetail(r produce.Result) any {
	if limit, ok := wire.TooLargeLimit(r.Err); ok {
		return wire.TooLargeDetail{TooLarge: true, Limit: limit}
	}
	if !errors.Is(r.Err, wire.ErrMsgIDInProcess) {
		return nil
	}
	d := wire.InProcessDetail{InProcess: true, Partition: r.Partition, Epoch: r.Epoch}
	var ie *produce.InProcessError
	if errors.As(r.Err, &ie) {
		d.MsgID, d.Partition = ie.MsgID, ie.Partition
	}
	return d
}

// withRecordDetail is r's failure, carrying its detail (if any) into the error reply
// (respondErrWith).
func withRecordDetail(r produce.Result) error {
	if d := recordDetail(r); d != nil {
		return &detailed{err: r.Err, detail: d}
	}
	return r.Err
}

// produceResultHook runs the test hook on a thin producer's record's result
// (testhook.Broker.ProduceResult).
func (b *Broker) produceResultHook(topic string, o *produce.Origin, r produce.Result) produce.Result {
	h := b.cfg.Testing.ProduceResultHook()
	if h == nil || o == nil {
		return r
	}
	if err := h(topic, o.Producer, o.Seq, r.Partition, r.Epoch); err != nil {
		return produce.Result{Partition: r.Partition, Epoch: r.Epoch, Err: err}
	}
	return r
}

// produceErr answers a produce request with an error, naming this broker.
func (b *Broker) produceErr(m *nats.Msg, err error) {
	if m.Reply == "" {
		return
	}
	respondErrWith(m, err, nats.Header{wire.HeaderBroker: []string{b.id}})
}

func (ps *produceService) close(ctx context.Context) {
	ps.mu.Lock()
	prods := ps.prod
	ps.prod = nil
	ps.mu.Unlock()
	for _, p := range prods {
		_ = p.Close(ctx)
	}
	if ps.nc != nil {
		_ = ps.nc.Drain()
		for i := 0; i < 200 && !ps.nc.IsClosed(); i++ {
			time.Sleep(5 * time.Millisecond)
		}
		ps.nc.Close()
	}
}
