package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// TestFenceMarkerPoisoning: a malicious client with the producer seed publishes look-alikes of
// the next epoch change's fence markers (header Pctl-Fence, the marker's Nats-Msg-Id) into every
// partition before the broker fences it. Were the marker's duplicate acknowledgement taken at its
// word, its boundary would be the look-alike's sequence − 1, below records of the old epoch (a
// consumer would then take them for records past the fence). Each partition's boundary must stay
// at or above the last old-epoch message, with the real marker (on the stream's new subject)
// right above it. Two attacks: ids in the predictable format of old brokers
// ("pctl-fence-<topic id>-<epoch>-<q>", published long before the change; fails on the old code),
// and ids with the change's real token, read from the descriptor while the change runs and
// published to the still-bound old subject just before the fence step.
func TestFenceMarkerPoisoning(t *testing.T) {
	for _, tc := range []struct {
		name  string
		early bool // predictable ids, before the change; else the real token, during it
	}{
		{"predictable-ids-before-the-change", true},
		{"real-token-read-during-the-change", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const topic, partitions = "fencepoison", 2
			var attacker *client.Client
			var hookErr error
			attacked := false
			b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: t.Logf,
				Testing: testhook.Steps(func(name, state string) error {
					if tc.early || name != topic || state != "created" || attacked {
						return nil
					}
					attacked = true
					d, _, err := attacker.Topic(ctx, topic)
					if err != nil || d.Change == nil {
						hookErr = fmt.Errorf("attacker reads the descriptor: %v (change %v)", err, d != nil && d.Change != nil)
						return nil
					}
					id := func(q int) string {
						return fmt.Sprintf("pctl-fence-%s-%d-%d-%s", d.ID, d.Change.To, q, d.Change.FenceToken)
					}
					hookErr = publishLookAlikes(ctx, attacker, d, id)
					return nil
				})})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			admin := connect(t, b, broker.RoleAdmin)
			if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
				t.Fatal(err)
			}
			attacker = connect(t, b, broker.RoleProducer)
			d, _, err := attacker.Topic(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			if tc.early {
				if err := publishLookAlikes(ctx, attacker, d, func(q int) string { return fmt.Sprintf("pctl-fence-%s-%d-%d", d.ID, 2, q) }); err != nil {
					t.Fatal(err)
				}
			}
			// Records of epoch 1 after the look-alikes.
			p, err := connect(t, b, broker.RoleProducer).NewProducer(ctx, topic, client.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 200; i++ {
				if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			lastBefore := make([]uint64, partitions)
			for q := range lastBefore {
				s, err := admin.JetStream().Stream(ctx, wire.StreamName(topic, q))
				if err != nil {
					t.Fatal(err)
				}
				lastBefore[q] = s.CachedInfo().State.LastSeq
			}
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 3}); err != nil {
				t.Fatal(err)
			}
			if hookErr != nil {
				t.Fatal(hookErr)
			}
			if !tc.early && !attacked {
				t.Fatal("the attack during the change did not run")
			}
			after, _, err := admin.Topic(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			e1 := after.Epoch(1)
			for q := 0; q < partitions; q++ {
				bound := e1.Boundaries[q]
				// lastBefore counts the early look-alikes too: they are old-epoch messages.
				if bound < lastBefore[q] {
					t.Errorf("partition %d: boundary %d is below the last old-epoch message %d: a look-alike was taken for the fence marker", q, bound, lastBefore[q])
					continue
				}
				s, err := admin.JetStream().Stream(ctx, wire.StreamName(topic, q))
				if err != nil {
					t.Fatal(err)
				}
				m, err := s.GetMsg(ctx, bound+1)
				if err != nil {
					t.Fatalf("partition %d: no message above boundary %d: %v", q, bound, err)
				}
				if m.Header.Get(wire.HeaderFence) != "2" || m.Subject != wire.DataSubject(topic, 2, q) {
					t.Errorf("partition %d: the message above boundary %d is not the fence marker (subject %s, Pctl-Fence %q)", q, bound, m.Subject, m.Header.Get(wire.HeaderFence))
				}
			}
		})
	}
}

// publishLookAlikes publishes, as the attacker, a message that looks like partition q's fence
// marker (id(q)) to every partition's current subject.
func publishLookAlikes(ctx context.Context, c *client.Client, d *wire.Topic, id func(q int) string) error {
	cur := d.Current()
	for q := 0; q < cur.Partitions; q++ {
		m := nats.NewMsg(wire.DataSubject(d.Name, cur.Epoch, q))
		m.Header.Set(wire.HeaderFence, strconv.Itoa(cur.Epoch+1))
		m.Header.Set(wire.HeaderMsgID, id(q))
		if _, err := c.JetStream().PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("look-alike for partition %d: %w", q, err)
		}
	}
	return nil
}
