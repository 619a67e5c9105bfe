package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// fnv1a32 is the 32-bit FNV-1a of the FNV specification: what bulk-trigger.wat computes for every
// key but its trigger, written here independently of the module.
func fnv1a32(key []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range key {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

// TestHostileProduceKeepsTheBrokerAnswering (issue 11, item 1): a plugin that passes conformance
// but, for one key, runs memory.fill of 16 MiB in a loop forever. Its partition call once ran for
// about a day, and since the Go runtime's stop-the-world waits for a goroutine inside compiled
// wasm, one produce request of that key froze the whole broker process, embedded NATS included.
// With bulk instructions charged by their length (spec/abi-v1.md §7.2) the call stops at its
// budget: the trigger's produce requests get the typed plugin_failed error naming the time limit,
// while another client keeps getting answers to topic listings and produces of other keys (with
// the partitions FNV-1a gives them), during and after. Liveness is asserted with the clients'
// request timeouts (far above the budget), never with a measured duration.
func TestHostileProduceKeepsTheBrokerAnswering(t *testing.T) {
	wasm, err := os.ReadFile(filepath.Join("..", "runtime", "testdata", "hostile", "bulk-trigger.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "")
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := connect(t, b, broker.RoleAdmin)
	info, err := admin.UploadPlugin(ctx, wasm)
	if err != nil {
		t.Fatalf("the module passes conformance, so the upload must succeed: %v", err)
	}
	const topic, n = "hostile", 16
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: n, Partitioner: info.Digest}); err != nil {
		t.Fatal(err)
	}
	trigger := []byte("hostile:freeze!!")
	prod := connect(t, b, broker.RoleProducer)
	// Warm up the produce service (its producer, its pool) with a good key first.
	if r, err := prod.ProduceBrokerSide(ctx, topic, client.Record{Key: []byte("warm-up"), Value: []byte("0")}); err != nil || r.Partition != int(fnv1a32([]byte("warm-up"))%n) {
		t.Fatalf("warm-up produce: %+v, %v; want partition %d", r, err, fnv1a32([]byte("warm-up"))%n)
	}

	// The other client: topic listings on one connection, produces of other keys on another,
	// until the trigger's requests are done, and a last round after them.
	lister := connect(t, b, broker.RoleAdmin)
	other := connect(t, b, broker.RoleProducer)
	var stop atomic.Bool
	var listsDuring, producesDuring atomic.Int64
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			ts, err := lister.Topics(ctx)
			if err != nil {
				errs <- fmt.Errorf("pctl.api.topic.list while the hostile call ran: %w", err)
				return
			}
			found := false
			for _, s := range ts {
				found = found || s.Name == topic
			}
			if !found {
				errs <- fmt.Errorf("topic list %+v lacks %q", ts, topic)
				return
			}
			listsDuring.Add(1)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			key := []byte(fmt.Sprintf("other-%d", i))
			r, err := other.ProduceBrokerSide(ctx, topic, client.Record{Key: key, Value: []byte("v")})
			if err != nil {
				errs <- fmt.Errorf("produce of key %q while the hostile call ran: %w", key, err)
				return
			}
			if want := int(fnv1a32(key) % n); r.Partition != want {
				errs <- fmt.Errorf("key %q went to partition %d; FNV-1a gives %d", key, r.Partition, want)
				return
			}
			producesDuring.Add(1)
		}
	}()

	// The trigger, three times in a row: each request must be answered with the typed error.
	for i := 0; i < 3; i++ {
		_, err := prod.ProduceBrokerSide(ctx, topic, client.Record{Key: trigger, Value: []byte("freeze")})
		if !errors.Is(err, wire.ErrPluginFailed) || !strings.Contains(err.Error(), "time limit exceeded") {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("trigger produce %d: got %v; want the plugin_failed error naming the time limit (the broker must answer, not freeze)", i, err)
		}
		if !strings.Contains(err.Error(), "bulk-trigger") {
			t.Errorf("the error %q does not name the plugin", err)
		}
	}
	during := listsDuring.Load()
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if during == 0 {
		t.Errorf("no topic listing was answered while the three hostile calls ran")
	}
	t.Logf("answered while the hostile calls ran and until the other client stopped: %d topic listings, %d produces of other keys", listsDuring.Load(), producesDuring.Load())

	// Afterwards the service answers as before, and the records of other keys are where FNV-1a
	// puts them; the trigger's records were never stored.
	for _, key := range []string{"after-1", "after-2", "after-3"} {
		r, err := prod.ProduceBrokerSide(ctx, topic, client.Record{Key: []byte(key), Value: []byte("v")})
		if err != nil || r.Partition != int(fnv1a32([]byte(key))%n) {
			t.Fatalf("produce of %q after the hostile calls: %+v, %v; want partition %d", key, r, err, fnv1a32([]byte(key))%n)
		}
	}
	if _, err := lister.Topics(ctx); err != nil {
		t.Fatalf("topic list after the hostile calls: %v", err)
	}
}
