package metrics

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// A sticky group's last recorded assignment shows as pctl_group_keys_moved_ratio, for the sticky
// assignor and for what modulo would have moved: three members, linear hashing 4 -> 8. The
// balance bound (3, 3, 2) makes the sticky assignor move one child (about 1/8 of the keys);
// modulo moves about half. Before the broker read g.assignment there was no such series.
func TestGroupKeysMovedMetric(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	br, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	c, err := client.Connect(ctx, client.Options{URL: br.ClientURL(), Creds: br.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "mv", Partitions: 4, Partitioner: "linear-murmur2"}); err != nil {
		t.Fatal(err)
	}
	var stops []func()
	for _, name := range []string{"a", "b", "c"} {
		cn, err := c.NewConsumer(ctx, "mv", client.ConsumerOptions{Group: "g", Member: name, Assignor: wire.AssignorSticky, Heartbeat: 100 * time.Millisecond, SessionTimeout: 6 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- cn.Run(rctx, func(context.Context, *client.Message) error { return nil }) }()
		stops = append(stops, func() { stop(); <-done })
	}
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	m := New(Options{})
	m.SetSource(br.Status)
	round := func() float64 {
		v, _ := metricValue(t, m, "pctl_group_assignments_total", nil)
		return v
	}
	waitMetric := func(what string, ok func() bool) {
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	kv, err := c.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	desc, _, _ := c.Topic(ctx, "mv")
	threeMembers := func() bool {
		a, err := readAssignment(ctx, kv, desc.ID)
		return err == nil && len(a.Members) == 3
	}
	waitMetric("a record of the three members", threeMembers)
	before := round()
	if _, err := c.Repartition(ctx, wire.RepartitionRequest{Topic: "mv", Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	waitMetric("the record of epoch 2", func() bool {
		a, err := readAssignment(ctx, kv, desc.ID)
		return err == nil && a.Epoch == 2 && len(a.Members) == 3
	})
	if after := round(); after <= before {
		t.Errorf("pctl_group_assignments_total %v after the expansion, %v before", after, before)
	}
	sticky, ok1 := metricValue(t, m, "pctl_group_keys_moved_ratio", map[string]string{"assignor": "sticky", "group": "g", "topic": "mv"})
	modulo, ok2 := metricValue(t, m, "pctl_group_keys_moved_ratio", map[string]string{"assignor": "modulo", "group": "g", "topic": "mv"})
	if !ok1 || !ok2 {
		t.Fatalf("no pctl_group_keys_moved_ratio series for the group")
	}
	t.Logf("keys moved: sticky %.3f, modulo %.3f", sticky, modulo)
	if sticky > 0.2 || modulo < 0.4 {
		t.Errorf("keys moved: sticky %.3f (want about 1/8), modulo %.3f (want about 1/2)", sticky, modulo)
	}
}

func readAssignment(ctx context.Context, kv jetstream.KeyValue, topicID string) (*wire.Assignment, error) {
	e, err := kv.Get(ctx, wire.AssignmentKey(topicID, "g"))
	if err != nil {
		return nil, err
	}
	var a wire.Assignment
	return &a, json.Unmarshal(e.Value(), &a)
}

// metricValue gathers the registry and returns the value of the series of family name whose
// labels include the given ones.
func metricValue(t *testing.T, m *Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case s.GetGauge() != nil:
				return s.GetGauge().GetValue(), true
			case s.GetCounter() != nil:
				return s.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}
