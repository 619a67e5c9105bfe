package broker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/partitioner"
)

// recordingTB collects a checker's errors instead of failing the test.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recordingTB) mentions(s string) bool {
	for _, e := range r.errs {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

// TestCompactedCheckersCatchAStaleValue shows that the compacted-topic checkers fail on the
// outcomes they exist to catch: an older record of a key stored over its newer one in the
// current epoch (what a copy without its expected last subject sequence would do), a key missing,
// and a key delivered twice. They pass on the correct state first.
func TestCompactedCheckersCatchAStaleValue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := startBroker(t, "")
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "ck", Partitions: 2, Partitioner: "kafka-murmur2", Compact: true}); err != nil {
		t.Fatal(err)
	}
	p, err := admin.NewProducer(ctx, "ck", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var log latestLog
	for round := 1; round <= 2; round++ {
		for _, k := range []string{"a", "b", "c"} {
			rec := client.Record{Key: []byte(k), Value: []byte(fmt.Sprintf("%s=%d", k, round))}
			if err := p.Send(ctx, rec, log.done(p.ID(), rec)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := log.snapshot()
	native, err := partitioner.Native("kafka-murmur2")
	if err != nil {
		t.Fatal(err)
	}
	ok := &recordingTB{TB: t}
	checkStoredState(ok, ctx, admin, "ck", want, native, false)
	checkLatest(ok, "correct", readCurrentEpoch(t, ctx, admin, "ck", "g1", 500*time.Millisecond), want)
	if len(ok.errs) > 0 {
		t.Fatalf("the checkers fail on the correct state: %q", ok.errs)
	}

	// Delivered twice, and a key missing: checkLatest alone.
	got := readCurrentEpoch(t, ctx, admin, "ck", "g2", 500*time.Millisecond)
	var noC []*client.Message
	for _, m := range got {
		if string(m.Key) != "c" {
			noC = append(noC, m)
		}
	}
	bad := &recordingTB{TB: t}
	checkLatest(bad, "wrong", append(noC, noC[0]), want)
	if !bad.mentions("delivered twice") || !bad.mentions("1 keys missing") {
		t.Fatalf("checkLatest missed a duplicate or a missing key: %q", bad.errs)
	}

	// Key b's first value stored again over its second, with b's first record's identity.
	part, _ := native.Partition([]byte("b"), 2)
	m := nats.NewMsg(wire.RecordSubject("ck", 1, int(part), true, []byte("b")))
	m.Header.Set(wire.HeaderKey, wire.EncodeKey([]byte("b")))
	m.Header.Set(wire.HeaderProducer, p.ID())
	m.Header.Set(wire.HeaderSeq, "2")
	m.Data = []byte("b=1")
	if _, err := admin.JetStream().PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	stale := &recordingTB{TB: t}
	checkStoredState(stale, ctx, admin, "ck", want, native, false)
	if !stale.mentions(`key "b": epoch 1 holds`) {
		t.Fatalf("checkStoredState missed b's stale value: %q", stale.errs)
	}
	stale2 := &recordingTB{TB: t}
	checkLatest(stale2, "stale", readCurrentEpoch(t, ctx, admin, "ck", "g3", 500*time.Millisecond), want)
	if !stale2.mentions(`key "b": got`) {
		t.Fatalf("checkLatest missed b's stale value: %q", stale2.errs)
	}
}
