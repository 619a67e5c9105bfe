package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// TestTopicBeingCreatedHasItsDetail: the answer for a topic whose creation has not finished is
// unavailable with the detail {"creating": true, "topic": T} (spec/protocol.md §3), so that
// clients wait for it by the detail, not the message's words; the Go client's error matches
// wire.ErrTopicCreating and wire.ErrUnavailable. The unfinished creation is a real descriptor
// with creating set, written into the topics bucket as a broker that died half way leaves it (its
// retry loop is slowed down here, so that the topic stays so). A producer started on it waits for
// the creation to finish (the broker's retry loop) and produces. Mutant shown failing: the broker
// answering without the detail (respondErrWith not attaching it).
func TestTopicBeingCreatedHasItsDetail(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Start(context.Background(), broker.Config{DataDir: dir, Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: t.Logf, RetryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "done", Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	desc, _, err := admin.Topic(ctx, "done")
	if err != nil {
		t.Fatal(err)
	}
	half := *desc
	half.Name, half.ID, half.Creating = "half", desc.ID+"h", true
	body, _ := json.Marshal(half)
	key, err := nats.NkeyOptionFromSeed(b.CredsPath(broker.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.ClientURL(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, wire.TopicsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "half", body); err != nil {
		t.Fatal(err)
	}

	_, _, err = admin.Topic(ctx, "half")
	if !errors.Is(err, wire.ErrTopicCreating) || !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("topic.get of a topic being created: %v, want an error matching wire.ErrTopicCreating and wire.ErrUnavailable", err)
	}
	raw, err := nc.Request("pctl.api.topic.get", []byte(`{"topic":"half"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		Code   string              `json:"code"`
		Detail wire.CreatingDetail `json:"detail"`
	}
	if err := json.Unmarshal(raw.Data, &reply); err != nil {
		t.Fatal(err)
	}
	if reply.Code != "unavailable" || !reply.Detail.Creating || reply.Detail.Topic != "half" {
		t.Fatalf("topic.get of a topic being created answered %s, want code unavailable with detail {\"creating\": true, \"topic\": \"half\"}", raw.Data)
	}
	// Another topic's plain unavailable does not match.
	if errors.Is(&wire.RemoteError{Code: "unavailable", Message: "topic half is being created"}, wire.ErrTopicCreating) {
		t.Fatal("an unavailable error without the detail matches ErrTopicCreating: the message's words decided")
	}

	// A producer on it waits; a second broker (a normal retry loop) finishes the creation.
	prod := connect(t, b, broker.RoleProducer)
	done := make(chan error, 1)
	go func() {
		p, err := prod.NewProducer(ctx, "half", client.ProducerOptions{Logf: t.Logf})
		if err == nil {
			_, err = p.Produce(ctx, client.Record{Key: []byte("k"), Value: []byte("v")})
			p.Close(ctx)
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	b2, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), NATSURL: b.ClientURL(), Creds: b.CredsPath("broker"), ConformanceKeys: 2000, Logf: t.Logf, RetryInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := <-done; err != nil {
		t.Fatalf("a producer started while the topic was being created: %v", err)
	}
}
