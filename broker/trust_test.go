package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// hostile is a plain NATS client (no pctl logic) holding one credential: what a program with
// that seed can do on its own.
type hostile struct {
	t  *testing.T
	nc *nats.Conn
	js jetstream.JetStream
	// violations counts the server's permission refusals on this connection.
	violations chan string
}

func connectHostile(t *testing.T, url, seedFile string) *hostile {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	h := &hostile{t: t, violations: make(chan string, 100)}
	h.nc, err = nats.Connect(url, opt, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case h.violations <- err.Error():
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.nc.Close)
	h.js, _ = jetstream.New(h.nc)
	return h
}

// TestJetStreamCannotRelayToTheBroker: a consumer may ask JetStream to send stored messages to a
// reply subject of its choice (a pull request, a direct get) or to a push consumer's deliver
// subject, and JetStream sends them as itself, whatever the consumer may publish. Aimed at
// pctl.admin.topic.delete (the broker's queue group), a value the consumer wrote to its own
// group key became an admin request: the broker deleted another topic. The broker must refuse
// anything JetStream relays.
func TestJetStreamCannotRelayToTheBroker(t *testing.T) {
	b := startBroker(t, "")
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := connect(t, b, broker.RoleAdmin)
	for _, name := range []string{"mine", "victim"} {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: name, Partitions: 1, Partitioner: "kafka-murmur2"}); err != nil {
			t.Fatal(err)
		}
	}
	mine, _, err := admin.Topic(ctx, "mine")
	if err != nil {
		t.Fatal(err)
	}
	h := connectHostile(t, b.ClientURL(), b.CredsPath(broker.RoleConsumer))
	// The payload: an admin request body, stored as the value of a key of the attacker's group.
	key := wire.MemberKey(mine.ID, "evil", "x")
	if _, err := h.js.Publish(ctx, "$KV."+wire.GroupsBucket+"."+key, []byte(`{"topic":"victim"}`)); err != nil {
		t.Fatal(err)
	}
	stream := "KV_" + wire.GroupsBucket
	subject := "$KV." + wire.GroupsBucket + "." + key
	attacks := []struct {
		name string
		run  func() error
	}{
		{"direct get replying to the admin subject", func() error {
			return h.nc.PublishRequest("$JS.API.DIRECT.GET."+stream+"."+subject, wire.AdminTopicDel, nil)
		}},
		{"pull request replying to the admin subject", func() error {
			if _, err := h.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Name: "evilpull", FilterSubject: subject, AckPolicy: jetstream.AckNonePolicy}); err != nil {
				return err
			}
			return h.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream+".evilpull", wire.AdminTopicDel, []byte(`{"batch":1}`))
		}},
		{"push consumer delivering to the broker's queue group", func() error {
			req, _ := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
				"name": "evilpush", "filter_subject": subject, "deliver_subject": wire.AdminTopicDel, "deliver_group": "pctl-broker",
				"deliver_policy": "all", "ack_policy": "none"}})
			m, err := h.nc.Request("$JS.API.CONSUMER.CREATE."+stream+".evilpush."+subject, req, 5*time.Second)
			if err != nil {
				return err
			}
			if e := m.Header.Get("Nats-Status"); e != "" || json.Valid(m.Data) && string(m.Data[:min(len(m.Data), 9)]) == `{"error":` {
				return fmt.Errorf("refused: %s", m.Data)
			}
			return nil
		}},
	}
	for _, a := range attacks {
		if err := a.run(); err != nil {
			t.Logf("%s: refused by the server: %v", a.name, err)
			continue
		}
		time.Sleep(500 * time.Millisecond)
		if _, _, err := admin.Topic(ctx, "victim"); err != nil {
			t.Fatalf("%s: the victim topic is gone: %v", a.name, err)
		}
	}
}

// issue makes a scoped credential through the admin API and writes its seed to a file.
func issue(t *testing.T, admin *client.Client, req wire.CredsRequest) (seedFile, pub string) {
	t.Helper()
	seed, pub, err := client.NewCredential()
	if err != nil {
		t.Fatal(err)
	}
	req.NKey = pub
	r, err := admin.AddCredential(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Applied {
		t.Fatalf("the embedded server did not take the credential: %+v", r)
	}
	seedFile = filepath.Join(t.TempDir(), "scoped.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return seedFile, pub
}

// connectScoped is connectHostile with the user's private inbox.
func connectScoped(t *testing.T, url, seedFile, pub string) *hostile {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	h := &hostile{t: t, violations: make(chan string, 100)}
	h.nc, err = nats.Connect(url, opt, nats.CustomInboxPrefix(wire.InboxPrefix(pub)), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case h.violations <- err.Error():
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.nc.Close)
	h.js, _ = jetstream.New(h.nc)
	return h
}

// refused runs an attack and checks that the server refused it: a permission violation naming
// subject, or (when subject is "") an error from the attack itself.
func (h *hostile) refused(name, subject string, attack func(ctx context.Context) error) {
	h.t.Helper()
	for len(h.violations) > 0 {
		<-h.violations
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := attack(ctx)
	if subject == "" {
		if err == nil {
			h.t.Errorf("%s: accepted", name)
		} else {
			h.t.Logf("%s: refused: %v", name, err)
		}
		return
	}
	deadline := time.After(3 * time.Second)
	for {
		select {
		case v := <-h.violations:
			if strings.Contains(v, `"`+subject+`"`) {
				h.t.Logf("%s: refused: %s", name, v)
				return
			}
		case <-deadline:
			h.t.Errorf("%s: no permission violation for %s (attack returned %v)", name, subject, err)
			return
		}
	}
}

// groupState is every key of the group bucket outside one prefix: value and revision.
func groupState(t *testing.T, js jetstream.JetStream, skipPrefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	l, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range l.Keys() {
		if strings.HasPrefix(k, skipPrefix) {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = fmt.Sprintf("rev %d %s", e.Revision(), e.Value())
	}
	return out
}

func streamStates(t *testing.T, js jetstream.JetStream, topic string, n int) string {
	t.Helper()
	var b strings.Builder
	for q := 0; q < n; q++ {
		s, err := js.Stream(context.Background(), wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		st := s.CachedInfo().State
		fmt.Fprintf(&b, "%d:%d-%d/%d ", q, st.FirstSeq, st.LastSeq, st.Msgs)
	}
	return b.String()
}

// consumeAll runs a group member until it has delivered n records.
func consumeAll(t *testing.T, c *client.Client, topic, group string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cn, err := c.NewConsumer(ctx, topic, client.ConsumerOptions{Group: group, FromBeginning: true, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64 // partitions are delivered from a goroutine each
	err = cn.Run(ctx, func(context.Context, *client.Message) error {
		if got.Add(1) == int64(n) {
			cancel()
		}
		return nil
	})
	if err != nil || got.Load() < int64(n) {
		t.Fatalf("group %s of %s: delivered %d of %d: %v", group, topic, got.Load(), n, err)
	}
}

// TestScopedCredentialsIsolateTopicsAndGroups: malicious clients holding a consumer credential
// for (orders, evil) and a producer credential for orders try what issue 11 found (a rollup that
// wiped every group, a put that moved another group's position) and more: deletes, purges,
// publishing records, reading or writing another topic, watching other clients' replies. Each is
// refused, and nothing of another group or topic changes. The same credentials still do their
// job: the consumer consumes orders in its group, the producer produces to orders.
func TestScopedCredentialsIsolateTopicsAndGroups(t *testing.T) {
	b := startBroker(t, "")
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := connect(t, b, broker.RoleAdmin)
	ids := map[string]string{}
	for _, name := range []string{"orders", "other"} {
		tp, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: name, Partitions: 4, Partitioner: "kafka-murmur2"})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = tp.ID
	}
	// Records in both topics, and groups with committed positions: the victims.
	prod := connect(t, b, broker.RoleProducer)
	for _, topic := range []string{"orders", "other"} {
		p, err := prod.NewProducer(ctx, topic, client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 40; i++ {
			if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cons := connect(t, b, broker.RoleConsumer)
	consumeAll(t, cons, "orders", "billing", 40)
	consumeAll(t, cons, "other", "billing", 40)

	cseed, cpub := issue(t, admin, wire.CredsRequest{Role: broker.ScopeConsumer, Topic: "orders", Group: "evil"})
	pseed, ppub := issue(t, admin, wire.CredsRequest{Role: broker.ScopeProducer, Topic: "orders"})

	// The credentials work for what they are for.
	scopedCons, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: cseed})
	if err != nil {
		t.Fatal(err)
	}
	defer scopedCons.Close()
	consumeAll(t, scopedCons, "orders", "evil", 40)
	scopedProd, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: pseed})
	if err != nil {
		t.Fatal(err)
	}
	defer scopedProd.Close()
	sp, err := scopedProd.NewProducer(ctx, "orders", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Produce(ctx, client.Record{Key: []byte("x"), Value: []byte("scoped")}); err != nil {
		t.Fatalf("scoped producer: %v", err)
	}
	if _, err := scopedProd.NewThinProducer("orders", client.ThinOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := scopedProd.NewProducer(ctx, "other", client.ProducerOptions{}); err != nil {
		t.Logf("scoped producer of orders on other: %v", err)
	}

	ajs := admin.JetStream()
	evil := ids["orders"] + ".evil."
	before := groupState(t, ajs, evil)
	beforeOrders, beforeOther := streamStates(t, ajs, "orders", 4), streamStates(t, ajs, "other", 4)
	groups := "$KV." + wire.GroupsBucket + "."
	own := groups + ids["orders"] + ".evil.m.x"
	foreign := groups + ids["orders"] + ".billing.p.0"
	otherTopic := groups + ids["other"] + ".evil.p.0"
	kvStream := "KV_" + wire.GroupsBucket

	c := connectScoped(t, b.ClientURL(), cseed, cpub)
	pub := func(subject string, hdr map[string]string, data string) func(context.Context) error {
		return func(ctx context.Context) error {
			m := nats.NewMsg(subject)
			for k, v := range hdr {
				m.Header.Set(k, v)
			}
			m.Data = []byte(data)
			_, err := c.js.PublishMsg(ctx, m)
			return err
		}
	}
	c.refused("rollup all through the consumer's own key", "", pub(own, map[string]string{"Nats-Rollup": "all"}, "{}"))
	c.refused("rollup of one subject through the consumer's own key", "", pub(own, map[string]string{"Nats-Rollup": "sub"}, "{}"))
	c.refused("put another group's position", foreign, pub(foreign, nil, `{"position": 999999}`))
	c.refused("delete marker on another group's key", foreign, pub(foreign, map[string]string{"KV-Operation": "DEL"}, ""))
	c.refused("put its own group's position in another topic", otherTopic, pub(otherTopic, nil, `{"position": 999999}`))
	c.refused("purge the group bucket", "$JS.API.STREAM.PURGE."+kvStream, func(ctx context.Context) error {
		return c.nc.PublishRequest("$JS.API.STREAM.PURGE."+kvStream, c.nc.NewInbox(), []byte(`{}`))
	})
	c.refused("delete a message of the group bucket", "$JS.API.STREAM.MSG.DELETE."+kvStream, func(ctx context.Context) error {
		return c.nc.PublishRequest("$JS.API.STREAM.MSG.DELETE."+kvStream, c.nc.NewInbox(), []byte(`{"seq":1}`))
	})
	c.refused("update the group bucket's stream", "$JS.API.STREAM.UPDATE."+kvStream, func(ctx context.Context) error {
		return c.nc.PublishRequest("$JS.API.STREAM.UPDATE."+kvStream, c.nc.NewInbox(), []byte(`{"name":"`+kvStream+`","allow_rollup_hdrs":true}`))
	})
	c.refused("publish a record to its topic", wire.DataSubject("orders", 1, 0), pub(wire.DataSubject("orders", 1, 0), nil, "x"))
	c.refused("publish a record to another topic", wire.DataSubject("other", 1, 0), pub(wire.DataSubject("other", 1, 0), nil, "x"))
	c.refused("produce through the service", wire.ProduceSubject("orders"), func(ctx context.Context) error {
		return c.nc.PublishRequest(wire.ProduceSubject("orders"), c.nc.NewInbox(), []byte("x"))
	})
	c.refused("read another topic (consumer without filter)", "$JS.API.CONSUMER.CREATE."+wire.StreamName("other", 0)+".spy", func(ctx context.Context) error {
		_, err := c.js.CreateOrUpdateConsumer(ctx, wire.StreamName("other", 0), jetstream.ConsumerConfig{Name: "spy", AckPolicy: jetstream.AckNonePolicy})
		return err
	})
	c.refused("read another topic (filtered on it)", "$JS.API.CONSUMER.CREATE."+wire.StreamName("other", 0)+".spy.pctl.data.other.>", func(ctx context.Context) error {
		_, err := c.js.CreateOrUpdateConsumer(ctx, wire.StreamName("other", 0), jetstream.ConsumerConfig{Name: "spy", FilterSubject: "pctl.data.other.>", AckPolicy: jetstream.AckNonePolicy})
		return err
	})
	c.refused("direct get from another topic", "$JS.API.DIRECT.GET."+wire.StreamName("other", 0), func(ctx context.Context) error {
		return c.nc.PublishRequest("$JS.API.DIRECT.GET."+wire.StreamName("other", 0), c.nc.NewInbox(), []byte(`{"seq":1}`))
	})
	c.refused("read another group's state", "$JS.API.DIRECT.GET."+kvStream+"."+foreign, func(ctx context.Context) error {
		return c.nc.PublishRequest("$JS.API.DIRECT.GET."+kvStream+"."+foreign, c.nc.NewInbox(), nil)
	})
	c.refused("watch every client's replies", "_INBOX.>", func(ctx context.Context) error {
		_, err := c.nc.Subscribe("_INBOX.>", func(*nats.Msg) {})
		return err
	})
	c.refused("watch every record", "pctl.data.>", func(ctx context.Context) error {
		_, err := c.nc.Subscribe("pctl.data.>", func(*nats.Msg) {})
		return err
	})
	c.refused("an admin request", wire.AdminTopicDel, func(ctx context.Context) error {
		return c.nc.PublishRequest(wire.AdminTopicDel, c.nc.NewInbox(), []byte(`{"topic":"other"}`))
	})
	// A consumer filtered on its own topic, created on another topic's stream, reads nothing.
	oc, err := c.js.CreateOrUpdateConsumer(ctx, wire.StreamName("other", 0), jetstream.ConsumerConfig{Name: "spy2", FilterSubject: "pctl.data.orders.>", AckPolicy: jetstream.AckNonePolicy})
	if err == nil {
		if n := oc.CachedInfo().NumPending; n != 0 {
			t.Errorf("a consumer filtered on orders' subjects sees %d records of another topic", n)
		}
	}

	p := connectScoped(t, b.ClientURL(), pseed, ppub)
	ppub2 := func(subject string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := p.js.Publish(ctx, subject, []byte("x"))
			return err
		}
	}
	p.refused("publish to another topic", wire.DataSubject("other", 1, 0), ppub2(wire.DataSubject("other", 1, 0)))
	p.refused("produce to another topic through the service", wire.ProduceSubject("other"), func(ctx context.Context) error {
		return p.nc.PublishRequest(wire.ProduceSubject("other"), p.nc.NewInbox(), []byte("x"))
	})
	p.refused("publish to a retired subject", wire.RetiredSubject("orders", 0), ppub2(wire.RetiredSubject("orders", 0)))
	p.refused("write group state", foreign, ppub2(foreign))
	p.refused("direct get from another topic", "$JS.API.DIRECT.GET."+wire.StreamName("other", 0), func(ctx context.Context) error {
		return p.nc.PublishRequest("$JS.API.DIRECT.GET."+wire.StreamName("other", 0), p.nc.NewInbox(), []byte(`{"seq":1}`))
	})
	p.refused("read through a consumer", "$JS.API.CONSUMER.CREATE."+wire.StreamName("orders", 0)+".spy", func(ctx context.Context) error {
		_, err := p.js.CreateOrUpdateConsumer(ctx, wire.StreamName("orders", 0), jetstream.ConsumerConfig{Name: "spy", AckPolicy: jetstream.AckNonePolicy})
		return err
	})
	p.refused("watch every client's replies", "_INBOX.>", func(ctx context.Context) error {
		_, err := p.nc.Subscribe("_INBOX.>", func(*nats.Msg) {})
		return err
	})
	if _, err := p.js.Stream(ctx, wire.StreamName("orders", 0)); err != nil {
		t.Errorf("the producer cannot read its own topic's stream info: %v", err)
	}

	// Even the admin cannot roll the group bucket up or purge it: the bucket refuses.
	admRaw := connectHostile(t, b.ClientURL(), b.CredsPath(broker.RoleAdmin))
	admRaw.refused("admin: rollup all", "", func(ctx context.Context) error {
		m := nats.NewMsg(foreign)
		m.Header.Set("Nats-Rollup", "all")
		_, err := admRaw.js.PublishMsg(ctx, m)
		return err
	})
	admRaw.refused("admin: purge the group bucket", "", func(ctx context.Context) error {
		s, err := admRaw.js.Stream(ctx, kvStream)
		if err != nil {
			return nil
		}
		return s.Purge(ctx)
	})

	time.Sleep(500 * time.Millisecond)
	after := groupState(t, ajs, evil)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("group state %s changed: %s -> %q", k, v, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("group state %s appeared: %s", k, after[k])
		}
	}
	if got := streamStates(t, ajs, "other", 4); got != beforeOther {
		t.Errorf("topic other changed: %s -> %s", beforeOther, got)
	}
	if got := streamStates(t, ajs, "orders", 4); got != beforeOrders {
		t.Errorf("topic orders changed: %s -> %s", beforeOrders, got)
	}
	if _, _, err := admin.Topic(ctx, "other"); err != nil {
		t.Errorf("topic other: %v", err)
	}

	// Revoked: the consumer credential's connections close and it cannot connect again.
	if _, err := admin.RevokeCredential(ctx, cpub); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !c.nc.IsClosed() && c.nc.Status() == nats.CONNECTED && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if c.nc.Status() == nats.CONNECTED {
		t.Errorf("a revoked credential's connection is still up")
	}
	if _, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: cseed}); err == nil {
		t.Errorf("a revoked credential connects")
	}
}

// TestScopedProducerFollowsTopicGrowth: a producer credential's direct gets name each partition
// stream; after the topic grows, the embedded broker extends them, so the producer can read back
// (verify, search) records of the new partitions.
func TestScopedProducerFollowsTopicGrowth(t *testing.T) {
	b := startBroker(t, "")
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	seed, pub := issue(t, admin, wire.CredsRequest{Role: broker.ScopeProducer, Topic: "t"})
	p := connectScoped(t, b.ClientURL(), seed, pub)
	get := func(q int) error {
		_, err := p.nc.Request("$JS.API.DIRECT.GET."+wire.StreamName("t", q), []byte(`{"seq":1}`), 500*time.Millisecond)
		return err
	}
	if err := get(1); err != nil {
		t.Fatalf("direct get on its own topic: %v", err)
	}
	p.refused("direct get on a partition the topic does not have yet", "$JS.API.DIRECT.GET."+wire.StreamName("t", 3), func(context.Context) error { return get(3) })
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "t", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for get(3) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the producer credential cannot read partition 3 after the topic grew to 4")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestUserConfigEntryParses: the entry 'pctl creds issue' prints for an external cluster is read
// by nats-server's own configuration parser into the same permissions the embedded server uses.
func TestUserConfigEntryParses(t *testing.T) {
	seed, pub, err := client.NewCredential()
	if err != nil || len(seed) == 0 {
		t.Fatal(err)
	}
	for _, u := range []broker.ScopedUser{
		{NKey: pub, Role: broker.ScopeConsumer, Topic: "orders", TopicID: "abc", Group: "billing", Partitions: 3},
		{NKey: pub, Role: broker.ScopeProducer, Topic: "orders", TopicID: "abc", Partitions: 3},
	} {
		want := broker.ScopedPermissions(u)
		conf := "authorization {\n  users: [\n" + broker.UserConfigEntry("a \"comment\"", pub, want) + "  ]\n}\n"
		path := filepath.Join(t.TempDir(), "n.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("%s: %v\n%s", u.Role, err, conf)
		}
		if len(opts.Nkeys) != 1 || opts.Nkeys[0].Nkey != pub {
			t.Fatalf("%s: parsed users %+v", u.Role, opts.Nkeys)
		}
		got := opts.Nkeys[0].Permissions
		for _, d := range []struct {
			name      string
			got, want *server.SubjectPermission
		}{{"publish", got.Publish, want.Publish}, {"subscribe", got.Subscribe, want.Subscribe}} {
			if fmt.Sprint(d.got.Allow) != fmt.Sprint(d.want.Allow) || fmt.Sprint(d.got.Deny) != fmt.Sprint(d.want.Deny) {
				t.Errorf("%s %s: parsed %v / %v, want %v / %v", u.Role, d.name, d.got.Allow, d.got.Deny, d.want.Allow, d.want.Deny)
			}
		}
	}
}

// TestGroupBucketRefusesRollups: issue 11's attack with the (unscoped) consumer seed: one
// publish with "Nats-Rollup: all" to any key of the group bucket wiped the state of every group
// of every topic. The bucket refuses rollups and purges now, also one an older broker made: it
// is hardened when the broker starts.
func TestGroupBucketRefusesRollups(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// What an older broker made: a bucket with JetStream's KV defaults (rollups allowed), holding a
	// group's position.
	srv, err := server.NewServer(&server.Options{Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "jetstream"), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.GroupsBucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, wire.PartitionKey("tid", "victim", 0), []byte(`{"position":5}`)); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()
	srv.WaitForShutdown()

	b := startBroker(t, dir)
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	s, err := admin.JetStream().Stream(ctx, "KV_"+wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.AllowRollup || !cfg.DenyPurge || !cfg.DenyDelete {
		t.Errorf("the group bucket was not hardened on start: allow_rollup %v deny_purge %v deny_delete %v", cfg.AllowRollup, cfg.DenyPurge, cfg.DenyDelete)
	}
	before := groupState(t, admin.JetStream(), "-")
	h := connectHostile(t, b.ClientURL(), b.CredsPath(broker.RoleConsumer))
	h.refused("rollup all with the consumer seed", "", func(ctx context.Context) error {
		m := nats.NewMsg("$KV." + wire.GroupsBucket + "." + wire.MemberKey("tid", "evil", "x"))
		m.Header.Set("Nats-Rollup", "all")
		_, err := h.js.PublishMsg(ctx, m)
		return err
	})
	after := groupState(t, admin.JetStream(), "-")
	if len(before) != 1 || fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("group state %v -> %v", before, after)
	}
}
