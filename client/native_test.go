package client_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/plugins"
)

// TestNativeBuiltins: with Options.NativeBuiltins a client partitions a built-in's epochs with
// the Go implementation (spec/builtins.md, the native fast path) and everything else with the
// module: an upload of kafka-murmur2 built by another toolchain (it claims compatibility, with a
// digest of its own) runs as a module. Records a native producer stores land in the partitions
// the module (the reference, through a client without the switch) gives their keys, and a native
// consumer, which checks every record's placement, delivers them all.
func TestNativeBuiltins(t *testing.T) {
	b := thinBroker(t) // topic "t": 4 partitions, kafka-murmur2
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := thinConnect(t, b, broker.RoleAdmin)
	// The Rust build: 1 KB (the Go build is 1.8 MB, whose upload checks took over 20 s under load).
	rustBuild := plugins.Murmur2Builds()["rust"]
	info, err := admin.UploadPlugin(ctx, rustBuild)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "up", Partitions: 4, Partitioner: info.Digest}); err != nil {
		t.Fatal(err)
	}
	connect := func(role string, native bool) *client.Client {
		c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(role), Timeout: 20 * time.Second, NativeBuiltins: native})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ref := connect(broker.RoleProducer, false)
	for _, topic := range []string{"t", "up"} {
		desc, _, err := ref.Topic(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		wp := desc.Current().Partitioner
		for _, native := range []bool{false, true} {
			p, err := connect(broker.RoleProducer, native).PartitionerFor(ctx, wp)
			if err != nil {
				t.Fatal(err)
			}
			_, isWASM := p.(*partitioner.WASM)
			if want := !(native && topic == "t"); isWASM != want {
				t.Errorf("topic %s (%s), NativeBuiltins %v: partitions with %T, want the module: %v", topic, wp.Name, native, p, want)
			}
		}
	}

	const n = 2000
	prod := connect(broker.RoleProducer, true)
	p, err := prod.NewProducer(ctx, "t", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	desc, _, err := ref.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	module, err := ref.Partitioner(ctx, desc.Current().Partitioner)
	if err != nil {
		t.Fatal(err)
	}
	var wrong atomic.Int64
	var firstWrong atomic.Value
	for i := 0; i < n; i++ {
		key := []byte(fmt.Sprintf("customer-%d", i))
		want, err := module.Partition(key, 4)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Send(ctx, client.Record{Key: key, Value: []byte("v")}, func(r client.Result) {
			if r.Err != nil || r.Partition != int(want) {
				if wrong.Add(1) == 1 {
					firstWrong.Store(fmt.Sprintf("key %s: partition %d (err %v), the module says %d", key, r.Partition, r.Err, want))
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if wrong.Load() > 0 {
		t.Fatalf("%d records not where the module puts them; first: %v", wrong.Load(), firstWrong.Load())
	}
	cn, err := connect(broker.RoleConsumer, true).NewConsumer(ctx, "t", client.ConsumerOptions{Group: "native", FromBeginning: true, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	var delivered atomic.Int64 // the handler runs on every partition's worker at once
	if err := cn.Run(rctx, func(context.Context, *client.Message) error {
		if delivered.Add(1) == int64(n) {
			rcancel()
		}
		return nil
	}); err != nil && rctx.Err() == nil {
		t.Fatal(err)
	}
	if got := delivered.Load(); got != int64(n) {
		t.Fatalf("the native consumer delivered %d of %d records", got, n)
	}
}
