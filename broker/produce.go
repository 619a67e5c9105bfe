package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/partitioner"
)

// produceService partitions records for thin clients with the topic's own module and publishes
// them with a client.Producer per topic, so it gets the same ordering and fencing behaviour as
// client-side producers. Requests of one subscription are handled in arrival order, so the
// records of one thin producer keep their order at this broker; spec/protocol.md §5.2 says how a
// pipelining thin client keeps them at one broker (subject pctl.produce.<topic>.<broker id>) and
// how the per-producer sequence check below catches a request that never arrived.
type produceService struct {
	b    *Broker
	once sync.Once
	cl   *client.Client
	err  error
	mu   sync.Mutex
	prod map[string]*client.Producer
	seqs producerSeqs
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

// accept checks a request's sequence and records it (spec/protocol.md §5.2): refused when a
// request before it never arrived (seq above last+1), or when the producer is unknown here and
// the request came on this broker's own subject (the client pipelines to us without having
// started at the shared subject: we lost its state, or it never had any here).
func (ps *producerSeqs) accept(topic, producer string, seq uint64, direct bool) error {
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
	case e == nil && direct:
		return fmt.Errorf("%w: producer %s is unknown at this broker (restarted, or idle for over %v); re-send the records not yet acknowledged, in order, starting with one to %s", wire.ErrOutOfSequence, producer, seqMemory, wire.ProduceSubject(topic))
	case e == nil:
		ps.last[key] = &seqEntry{seq: seq, seen: now}
		return nil
	case seq > e.seq+1:
		return fmt.Errorf("%w: producer %s sequence %d arrived after %d: %d to %d never arrived; re-send the records not yet acknowledged, in order", wire.ErrOutOfSequence, producer, seq, e.seq, e.seq+1, seq-1)
	}
	if seq > e.seq {
		e.seq = seq
	}
	e.seen = now
	return nil
}

func (b *Broker) producer(ctx context.Context, topic string) (*client.Producer, error) {
	ps := &b.ps
	ps.once.Do(func() {
		creds := b.cfg.Creds
		if creds == "" {
			creds = CredsPath(b.cfg.DataDir, roleBroker)
		}
		ps.cl, ps.err = client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: creds, Name: "pctl-broker-produce", Runtime: b.rt})
	})
	if ps.err != nil {
		return nil, fmt.Errorf("%w: produce service: %v", wire.ErrUnavailable, ps.err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.prod == nil {
		ps.prod = map[string]*client.Producer{}
	}
	if p, ok := ps.prod[topic]; ok {
		return p, nil
	}
	p, err := ps.cl.NewProducer(ctx, topic, client.ProducerOptions{
		// A fresh id for every producer the service creates: records without an origin of their
		// own are deduplicated by this id, so reusing it after a restart would drop new records
		// as duplicates of old ones.
		ID: "broker-" + nuid.Next(),
		Partitioner: func(ctx context.Context, wp wire.Partitioner) (partitioner.Partitioner, error) {
			return b.partitionerFor(ctx, wp)
		},
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
	rec := client.Record{Value: m.Data, NoKey: true}
	if id := m.Header.Get(wire.HeaderProducer); id != "" {
		seq, err := strconv.ParseUint(m.Header.Get(wire.HeaderSeq), 10, 64)
		if err != nil || seq == 0 || wire.ValidGroup(id) != nil {
			b.produceErr(m, fmt.Errorf("%w: a request with %s %q needs %s, a positive integer (got %q), and an id of 1 to 64 characters of A-Z a-z 0-9 _ -", wire.ErrBadRequest, wire.HeaderProducer, id, wire.HeaderSeq, m.Header.Get(wire.HeaderSeq)))
			return
		}
		rec.Origin = &client.Origin{Producer: id, Seq: seq, Token: m.Header.Get(wire.HeaderToken)}
		if tok := rec.Origin.Token; tok != "" && !client.ValidToken(tok) {
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
	if rec.Origin != nil {
		if err := b.ps.seqs.accept(topic, rec.Origin.Producer, rec.Origin.Seq, direct); err != nil {
			b.produceErr(m, err)
			return
		}
	}
	err = p.Send(b.ctx, rec, func(r client.Result) {
		if m.Reply == "" {
			return
		}
		if r.Err != nil {
			b.produceErr(m, r.Err)
			return
		}
		out := nats.NewMsg(m.Reply)
		out.Header[wire.HeaderBroker] = []string{b.id}
		out.Data, _ = json.Marshal(wire.ProduceReply{Partition: r.Partition, Epoch: r.Epoch, Seq: r.Seq, Duplicate: r.Duplicate, Broker: b.id})
		_ = m.RespondMsg(out)
	})
	if err != nil {
		b.produceErr(m, err)
		if strings.Contains(err.Error(), "closed") || strings.Contains(err.Error(), "not found") {
			b.ps.mu.Lock()
			delete(b.ps.prod, topic)
			b.ps.mu.Unlock()
		}
	}
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
	if ps.cl != nil {
		_ = ps.cl.Close()
	}
}
