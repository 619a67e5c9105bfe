package client_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// rawConnect connects a plain NATS client (no pctl logic) with a role's credentials: what a
// hostile program holding that seed can do.
func rawConnect(t testing.TB, url, seedFile string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opt, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// groupRun runs one member of a group until it has delivered want records or Run returns.
type groupRun struct {
	mu        sync.Mutex
	got       []*client.Message
	misplaced []*client.Message // seen by OnMisplaced
	err       error
	stats     client.ConsumerStats
}

func runGroup(t *testing.T, ctx context.Context, c *client.Client, group string, policy client.MisplacedPolicy, want int) *groupRun {
	t.Helper()
	gr := &groupRun{}
	cn, err := c.NewConsumer(ctx, "t", client.ConsumerOptions{Group: group, FromBeginning: true, Heartbeat: 200 * time.Millisecond, Misplaced: policy,
		OnMisplaced: func(m *client.Message) {
			gr.mu.Lock()
			gr.misplaced = append(gr.misplaced, m)
			gr.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	gr.err = cn.Run(rctx, func(ctx context.Context, m *client.Message) error {
		gr.mu.Lock()
		gr.got = append(gr.got, m)
		n := len(gr.got)
		gr.mu.Unlock()
		if n == want {
			cancel()
		}
		return nil
	})
	gr.stats = cn.Stats()
	return gr
}

// TestMisplacedRecords: a hostile client holding the producer credential publishes key "a"
// straight to every partition, and a record with a key header that is not base64. Exactly one of
// the four "a" records is where the partitioner puts it (whatever the partitioner says, only one
// partition can be right), so three are misplaced, plus the malformed one. Each policy is
// checked: deliver flags them, skip goes past them, stop (the default) stops the member with a
// MisplacedError before the record.
func TestMisplacedRecords(t *testing.T) {
	b := thinBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := thinConnect(t, b, broker.RoleAdmin)
	desc, _, err := admin.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	e := desc.Current().Epoch
	_, js := rawConnect(t, b.ClientURL(), b.CredsPath(broker.RoleProducer))
	publish := func(q int, key string, seq int) {
		m := nats.NewMsg(wire.DataSubject("t", e, q))
		m.Header.Set(wire.HeaderKey, key)
		m.Header.Set(wire.HeaderProducer, "evil")
		m.Header.Set(wire.HeaderSeq, strconv.Itoa(seq))
		m.Data = []byte("hostile")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish to partition %d: %v", q, err)
		}
	}
	for q := 0; q < 4; q++ {
		publish(q, wire.EncodeKey([]byte("a")), q+1)
	}
	publish(2, "not base64", 5)
	// Then ordinary records in every partition.
	prod := thinConnect(t, b, broker.RoleProducer)
	p, err := prod.NewProducer(ctx, "t", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("ok")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cons := thinConnect(t, b, broker.RoleConsumer)

	// deliver: all 45 delivered, 4 flagged; the three "a" records name one same partition: the
	// one where the fourth "a" record is, unflagged.
	gr := runGroup(t, ctx, cons, "deliver", client.MisplacedDeliver, 45)
	if gr.err != nil {
		t.Fatal(gr.err)
	}
	home := -1
	var flagged []*client.Message
	for _, m := range gr.got {
		if m.Producer != "evil" {
			if m.Misplaced != nil {
				t.Errorf("an ordinary record is flagged: partition %d seq %d key %q: %+v", m.Partition, m.Seq, m.Key, m.Misplaced)
			}
			continue
		}
		if m.Misplaced != nil {
			flagged = append(flagged, m)
		} else if string(m.Key) == "a" {
			if home >= 0 {
				t.Errorf("key a is unflagged in partitions %d and %d", home, m.Partition)
			}
			home = m.Partition
		} else {
			t.Errorf("the record with a malformed key header is not flagged: %+v", m)
		}
	}
	if len(flagged) != 4 || home < 0 {
		t.Fatalf("flagged %d hostile records (want 4: three misplaced, one malformed), key a unflagged in partition %d", len(flagged), home)
	}
	for _, m := range flagged {
		switch {
		case m.ProducerSeq == 5:
			if m.Misplaced.Expected != -1 || m.Partition != 2 {
				t.Errorf("malformed record: %+v in partition %d, want Expected -1 in partition 2", m.Misplaced, m.Partition)
			}
		case string(m.Key) != "a" || m.Misplaced.Expected != home || m.Partition == home:
			t.Errorf("flagged record in partition %d key %q: %+v; want key a, Expected %d", m.Partition, m.Key, m.Misplaced, home)
		}
	}
	if gr.stats.Misplaced != 4 || len(gr.misplaced) != 4 {
		t.Errorf("Stats.Misplaced = %d, OnMisplaced ran %d times; want 4 and 4", gr.stats.Misplaced, len(gr.misplaced))
	}

	// skip: 41 delivered (the 40 ordinary ones and the one "a" in its place), none flagged.
	gr = runGroup(t, ctx, cons, "skip", client.MisplacedSkip, 41)
	if gr.err != nil {
		t.Fatal(gr.err)
	}
	if len(gr.got) != 41 || gr.stats.Misplaced != 4 || len(gr.misplaced) != 4 {
		t.Errorf("skip: delivered %d (want 41), Stats.Misplaced %d and OnMisplaced %d (want 4)", len(gr.got), gr.stats.Misplaced, len(gr.misplaced))
	}
	for _, m := range gr.got {
		if m.Misplaced != nil || (m.Producer == "evil" && m.Partition != home) {
			t.Errorf("skip delivered a misplaced record: partition %d seq %d key %q", m.Partition, m.Seq, m.Key)
		}
	}

	// stop (the default): Run fails with a MisplacedError naming the record, and nothing after
	// it in its partition was delivered.
	gr = runGroup(t, ctx, cons, "stop", client.MisplacedStop, 1000)
	var me *client.MisplacedError
	if !errors.As(gr.err, &me) || !errors.Is(gr.err, client.ErrMisplaced) {
		t.Fatalf("stop: Run returned %v, want a *client.MisplacedError", gr.err)
	}
	if me.Partition == home || (string(me.Key) == "a" && me.Expected != home) || (string(me.Key) != "a" && me.Expected != -1) {
		t.Errorf("stop: %+v; key a's partition is %d", me, home)
	}
	for _, m := range gr.got {
		if m.Partition == me.Partition && m.Seq > me.Seq {
			t.Errorf("stop: partition %d delivered seq %d after the misplaced record at %d", m.Partition, m.Seq, me.Seq)
		}
		if m.Misplaced != nil {
			t.Errorf("stop delivered a misplaced record: %+v", m)
		}
	}
	t.Logf("stop: %v", gr.err)
}
