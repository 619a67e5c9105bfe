package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// TestScanKeysStopsWithItsContext: the scan behind an epoch's observed ancestry reads a partition
// up to its boundary. When those records do not come (here the boundary is past the stream's
// end, as on a replica that is behind), the scan must end when its context does: Close stops the
// broker's loops and waits for them, and a scan blocked in the iterator's Next kept a broker from
// stopping (CI, 2026-12-03, chaos seed 2: "broker b1 did not stop within 15s of SIGTERM"). A
// real broker and stream.
func TestScanKeysStopsWithItsContext(t *testing.T) {
	b := startBroker(t, "")
	defer b.Close()
	js := connect(t, b, broker.RoleAdmin).JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subject := wire.DataSubject("scan", 1, 0)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: wire.StreamName("scan", 0), Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		m := nats.NewMsg(subject)
		m.Header.Set(wire.HeaderKey, wire.EncodeKey([]byte("k")))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	sctx, scancel := context.WithCancel(ctx)
	seen := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- b.ScanKeys(sctx, "scan", 0, 5, func([]byte, int) error { seen <- struct{}{}; return nil })
	}()
	for i := 0; i < 2; i++ {
		select {
		case <-seen:
		case err := <-done:
			t.Fatalf("the scan ended before it read the stream's 2 records: %v", err)
		case <-ctx.Done():
			t.Fatal("the scan read fewer than the stream's 2 records within a minute")
		}
	}
	scancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the scan says it reached sequence 5 of a stream of 2 records")
		}
	case <-time.After(30 * time.Second): // a hang guard, not a speed check
		t.Fatal("the scan did not end within 30s of its context: Close would wait for it for ever")
	}
}
