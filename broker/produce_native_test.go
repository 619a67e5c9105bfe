package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// pluginCalls records the produce service's partition calls (broker.HookPluginCall).
type pluginCalls struct {
	mu           sync.Mutex
	native, wasm int // calls without work units (native) and with
}

func (p *pluginCalls) OnPluginCall(plugin string, keys int, took time.Duration, fuel int64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fuel < 0 {
		p.native++
	} else {
		p.wasm++
	}
}

// TestProduceServiceNativeBuiltins: with Config.NativeBuiltins the produce service places thin
// clients' records with the built-in's Go code (its calls spend no work units), and every record
// lands in the partition the topic's WebAssembly module gives its key, computed here through the
// module (client.Partitioner), not through the native code. Without the switch the module runs.
func TestProduceServiceNativeBuiltins(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(fmt.Sprintf("native=%v", native), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			calls := &pluginCalls{}
			b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: t.Logf,
				NativeBuiltins: native, Hooks: []any{calls}})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			admin := connect(t, b, broker.RoleAdmin)
			const partitions = 7
			desc, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "nat", Partitions: partitions, Partitioner: "kafka-murmur2"})
			if err != nil {
				t.Fatal(err)
			}
			wasm, err := admin.Partitioner(ctx, desc.Current().Partitioner)
			if err != nil {
				t.Fatal(err)
			}
			tp, err := connect(t, b, broker.RoleProducer).NewThinProducer("nat", client.ThinOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tp.Close(ctx)
			for i := 0; i < 300; i++ {
				key := []byte(fmt.Sprintf("key-%d", i*7919))
				r, err := tp.Produce(ctx, client.Record{Key: key, Value: []byte("v")})
				if err != nil {
					t.Fatal(err)
				}
				want, err := wasm.Partition(key, partitions)
				if err != nil {
					t.Fatal(err)
				}
				if r.Partition != int(want) {
					t.Fatalf("key %q placed in partition %d; the module places it in %d", key, r.Partition, want)
				}
			}
			calls.mu.Lock()
			defer calls.mu.Unlock()
			if native && (calls.native == 0 || calls.wasm > 0) {
				t.Fatalf("with NativeBuiltins: %d native and %d WebAssembly calls; want only native ones", calls.native, calls.wasm)
			}
			if !native && (calls.wasm == 0 || calls.native > 0) {
				t.Fatalf("without NativeBuiltins: %d native and %d WebAssembly calls; want only WebAssembly ones", calls.native, calls.wasm)
			}
		})
	}
}
