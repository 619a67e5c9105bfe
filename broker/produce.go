package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/partitioner"
)

// produceService partitions records for thin clients with the topic's own module and publishes
// them with a client.Producer per topic, so it gets the same ordering and fencing behaviour as
// client-side producers. Requests of one subscription are handled in arrival order, so the
// records of one thin producer keep their order.
type produceService struct {
	b    *Broker
	once sync.Once
	cl   *client.Client
	err  error
	mu   sync.Mutex
	prod map[string]*client.Producer
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
	topic := strings.TrimPrefix(m.Subject, wire.ProducePrefix+".")
	if err := wire.ValidTopic(topic); err != nil {
		respondErr(m, err)
		return
	}
	p, err := b.producer(b.ctx, topic)
	if err != nil {
		respondErr(m, err)
		return
	}
	rec := client.Record{Value: m.Data, NoKey: true}
	if id := m.Header.Get(wire.HeaderProducer); id != "" {
		seq, err := strconv.ParseUint(m.Header.Get(wire.HeaderSeq), 10, 64)
		if err != nil || seq == 0 || wire.ValidGroup(id) != nil {
			respondErr(m, fmt.Errorf("%w: a request with %s %q needs %s, a positive integer (got %q), and an id of 1 to 64 characters of A-Z a-z 0-9 _ -", wire.ErrBadRequest, wire.HeaderProducer, id, wire.HeaderSeq, m.Header.Get(wire.HeaderSeq)))
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
			respondErr(m, fmt.Errorf("%w: %v", wire.ErrBadRequest, err))
			return
		}
		rec.Key, rec.NoKey = key, false
	}
	err = p.Send(b.ctx, rec, func(r client.Result) {
		if m.Reply == "" {
			return
		}
		if r.Err != nil {
			respondErr(m, r.Err)
			return
		}
		body, _ := json.Marshal(wire.ProduceReply{Partition: r.Partition, Epoch: r.Epoch, Seq: r.Seq, Duplicate: r.Duplicate})
		_ = m.Respond(body)
	})
	if err != nil {
		respondErr(m, err)
		if strings.Contains(err.Error(), "closed") || strings.Contains(err.Error(), "not found") {
			b.ps.mu.Lock()
			delete(b.ps.prod, topic)
			b.ps.mu.Unlock()
		}
	}
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
