package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/produce"
	"pctl.dev/pctl/partitioner"
)

// poisoner is a malicious client holding the producer seed: it reads the newest stored record of
// every partition (direct get is allowed to producers), and publishes look-alikes carrying the
// next deduplication ids it can predict for a victim, into every partition, before the victim
// sends them. Issue 11 item 2: with ids "<producer>-<seq>", the victim's records were then
// acknowledged as duplicates and never stored.
type poisoner struct {
	t     *testing.T
	c     *client.Client
	topic string
}

// lastSeen returns, per partition, the newest stored message of the victim (nil when none).
func (a *poisoner) lastSeen(ctx context.Context, victim string, partitions int) []*jetstream.RawStreamMsg {
	out := make([]*jetstream.RawStreamMsg, partitions)
	for q := 0; q < partitions; q++ {
		s, err := a.c.JetStream().Stream(ctx, wire.StreamName(a.topic, q))
		if err != nil {
			a.t.Fatal(err)
		}
		for seq := s.CachedInfo().State.LastSeq; seq > 0; seq-- {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				a.t.Fatal(err)
			}
			if m.Header.Get(wire.HeaderProducer) == victim {
				out[q] = m
				break
			}
		}
	}
	return out
}

// poison publishes look-alikes for the victim's next n sequence numbers into every partition:
// the id format of old producers ("<producer>-<seq>"), and the current format with the last
// token seen reused (the best an attacker can guess without the victim's random tokens).
func (a *poisoner) poison(ctx context.Context, victim string, epoch, partitions, n int) int {
	seen := a.lastSeen(ctx, victim, partitions)
	var last uint64
	var tokens []string
	for _, m := range seen {
		if m == nil {
			continue
		}
		if s, _ := strconv.ParseUint(m.Header.Get(wire.HeaderSeq), 10, 64); s > last {
			last = s
		}
		id := m.Header.Get(wire.HeaderMsgID)
		if parts := strings.Split(id, "-"); len(parts) >= 3 {
			tokens = append(tokens, parts[len(parts)-1])
		}
	}
	if last == 0 {
		a.t.Fatalf("the attacker found no stored record of %s", victim)
	}
	published := 0
	for i := 1; i <= n; i++ {
		seq := strconv.FormatUint(last+uint64(i), 10)
		ids := []string{victim + "-" + seq}
		for _, tok := range tokens {
			ids = append(ids, victim+"-"+seq+"-"+tok)
		}
		for q := 0; q < partitions; q++ {
			for _, id := range ids {
				m := nats.NewMsg(wire.DataSubject(a.topic, epoch, q))
				m.Header.Set(wire.HeaderProducer, victim)
				m.Header.Set(wire.HeaderSeq, seq)
				m.Header.Set(wire.HeaderMsgID, id)
				m.Header.Set(wire.HeaderKey, wire.EncodeKey([]byte("attacker")))
				m.Data = []byte("poison")
				if _, err := a.c.JetStream().PublishMsg(ctx, m); err != nil {
					a.t.Fatalf("look-alike %s: %v", id, err)
				}
				published++
			}
		}
	}
	return published
}

// storedValues maps (producer, seq) to every value stored under it, over all partitions.
func storedValues(ctx context.Context, t *testing.T, js jetstream.JetStream, topic string, partitions int) map[string][][]byte {
	t.Helper()
	out := map[string][][]byte{}
	for q := 0; q < partitions; q++ {
		s, err := js.Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			k := m.Header.Get(wire.HeaderProducer) + "/" + m.Header.Get(wire.HeaderSeq)
			out[k] = append(out[k], m.Data)
		}
	}
	return out
}

// TestDedupPoisoning: a malicious producer predicts a victim's next deduplication ids from its
// stored records and publishes look-alikes first; every record the victim sends afterwards must
// still be acknowledged and stored with its own value, client-side and through the produce
// service. Fails on producers whose ids are "<producer>-<seq>".
func TestDedupPoisoning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, partitions, first, second = "poison", 3, 60, 60
	b := startBroker(t, "")
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	attacker := &poisoner{t: t, c: connect(t, b, broker.RoleProducer), topic: topic}
	victimConn := connect(t, b, broker.RoleProducer)

	type sent struct {
		producer string
		seq      uint64
		value    []byte
		res      client.Result
	}
	var mu sync.Mutex
	var all []sent
	record := func(producer string, value []byte) func(client.Result) {
		return func(r client.Result) {
			mu.Lock()
			all = append(all, sent{producer, r.ProducerSeq, value, r})
			mu.Unlock()
		}
	}

	tests := []struct {
		name string
		run  func(t *testing.T) string // sends two rounds with the attack in between; returns the victim's id
	}{
		{"client-side producer", func(t *testing.T) string {
			p, err := victimConn.NewProducer(ctx, topic, client.ProducerOptions{ID: "victim"})
			if err != nil {
				t.Fatal(err)
			}
			send := func(from, n int) {
				for i := from; i < from+n; i++ {
					v := []byte(fmt.Sprint("v", i))
					if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i%7)), Value: v}, record(p.ID(), v)); err != nil {
						t.Fatal(err)
					}
				}
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			send(0, first)
			t.Logf("published %d look-alikes", attacker.poison(ctx, p.ID(), 1, partitions, second))
			send(first, second)
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			return p.ID()
		}},
		{"thin producer through the produce service", func(t *testing.T) string {
			tp, err := victimConn.NewThinProducer(topic, client.ThinOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var id string
			send := func(from, n int) {
				for i := from; i < from+n; i++ {
					v := []byte(fmt.Sprint("thin", i))
					if err := tp.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i%7)), Value: v}, func(r client.Result) {
						record(id, v)(r)
					}); err != nil {
						t.Fatal(err)
					}
				}
				if err := tp.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			id = tp.ID()
			send(0, first)
			t.Logf("published %d look-alikes", attacker.poison(ctx, id, 1, partitions, second))
			send(first, second)
			if err := tp.Close(ctx); err != nil {
				t.Fatal(err)
			}
			return id
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			all = nil
			mu.Unlock()
			victim := tc.run(t)
			stored := storedValues(ctx, t, admin.JetStream(), topic, partitions)
			mu.Lock()
			defer mu.Unlock()
			if len(all) != first+second {
				t.Fatalf("%d results for %d records", len(all), first+second)
			}
			lost := 0
			for _, s := range all {
				if s.res.Err != nil {
					t.Errorf("record %d of %s failed: %v", s.seq, victim, s.res.Err)
					continue
				}
				found := false
				for _, v := range stored[victim+"/"+strconv.FormatUint(s.seq, 10)] {
					if bytes.Equal(v, s.value) {
						found = true
					}
				}
				if !found {
					lost++
					if lost <= 5 {
						t.Errorf("record %d of %s (%q) acknowledged (duplicate: %v) but not stored: a look-alike took its id", s.seq, victim, s.value, s.res.Duplicate)
					}
				}
			}
			if lost > 0 {
				t.Fatalf("%d acknowledged records lost to deduplication poisoning", lost)
			}
		})
	}
}

// TestDuplicateOfAnotherRecordIsAConflict: when the server acknowledges a record as a duplicate
// of a stored message that is not this record (a thin client that sent a guessable token, and an
// attacker who used it first), the record fails with wire.ErrConflict instead of counting as
// stored; a duplicate of the very same record counts as stored (Duplicate).
func TestDuplicateOfAnotherRecordIsAConflict(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := startBroker(t, "")
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "dup", Partitions: 1, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	// The produce service's engine, which alone sends records under a thin client's identity.
	pc := connect(t, b, broker.RoleProducer)
	p, err := produce.New(ctx, engineConn(pc), "dup", produce.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	const token = "guessable-token-0001"
	origin := func(seq uint64) *produce.Origin { return &produce.Origin{Producer: "thin", Seq: seq, Token: token} }
	// The attacker stores a look-alike under the id record 1 will have.
	m := nats.NewMsg(wire.DataSubject("dup", 1, 0))
	m.Header.Set(wire.HeaderProducer, "thin")
	m.Header.Set(wire.HeaderSeq, "1")
	m.Header.Set(wire.HeaderMsgID, "thin-1-"+token)
	m.Data = []byte("poison")
	if _, err := connect(t, b, broker.RoleProducer).JetStream().PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	r, err := p.Produce(ctx, produce.Record{Key: []byte("k"), Value: []byte("real"), Origin: origin(1)})
	if err == nil || !strings.Contains(err.Error(), "NOT stored") {
		t.Fatalf("a duplicate of another record counted as stored: %+v, %v", r, err)
	}
	if !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("error %v is not wire.ErrConflict", err)
	}
	// A genuine re-send of the same record is a verified duplicate.
	r1, err := p.Produce(ctx, produce.Record{Key: []byte("k"), Value: []byte("v2"), Origin: origin(2)})
	if err != nil || r1.Duplicate {
		t.Fatalf("first send: %+v, %v", r1, err)
	}
	r2, err := p.Produce(ctx, produce.Record{Key: []byte("k"), Value: []byte("v2"), Origin: origin(2)})
	if err != nil || !r2.Duplicate || r2.Seq != r1.Seq {
		t.Fatalf("re-send of the same record: %+v, %v; want a duplicate of sequence %d", r2, err, r1.Seq)
	}
}

// engineConn describes a client's connection to the producer engine (no violation or
// connection events: the tests that use it need neither).
func engineConn(c *client.Client) *produce.Conn {
	return &produce.Conn{NC: c.Conn(), JS: c.JetStream(), Timeout: 30 * time.Second, AckTimeout: 5 * time.Second,
		Topic: func(ctx context.Context, topic string) (*wire.Topic, error) {
			t, _, err := c.Topic(ctx, topic)
			return t, err
		},
		Partitioner: func(ctx context.Context, p wire.Partitioner) (partitioner.Partitioner, error) {
			return c.Partitioner(ctx, p)
		}}
}
