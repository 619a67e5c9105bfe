package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"pctl.dev/pctl/partitioner/builtin"
	"pctl.dev/pctl/runtime"
)

// TestBatchCrossings: PartitionBatch gives every key the partition of the Go kafka-murmur2
// (partitioner/builtin, pinned to Kafka's own vectors), whether the batch fits one crossing (the
// path without the splitting pass) or is split by MaxBatchKeys or by the buffer's bytes, on the
// default buffer (1 MiB, 4096 keys) and on the smallest (64 KiB, 100 keys per crossing), through
// the Pool and through an Instance; also keys that fill the buffer to the byte, and keys that fit
// it only without their 4-byte lengths (spec/abi-v1.md §2.4's layout).
func TestBatchCrossings(t *testing.T) {
	ctx := context.Background()
	ref, _ := builtin.Lookup("kafka-murmur2")
	r := rand.New(rand.NewPCG(17, 60))
	keysOf := func(count, minLen, maxLen int) [][]byte {
		keys := make([][]byte, count)
		for i := range keys {
			keys[i] = make([]byte, minLen+r.IntN(maxLen-minLen+1))
			for j := range keys[i] {
				keys[i][j] = byte(r.Uint32())
			}
		}
		return keys
	}
	for _, cfg := range []runtime.Config{{}, {BufferBytes: runtime.MinBufferBytes, MaxBatchKeys: 100}} {
		rt := newRuntime(t, cfg)
		m, err := rt.Load(ctx, mustBuiltin(t, "kafka-murmur2"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.NewPool(ctx, nil, runtime.PoolOptions{Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		fill := rt.Config().BufferBytes / 1024
		for _, tc := range []struct {
			name string
			keys [][]byte
		}{
			{"one key", keysOf(1, 0, 300)},
			{"7 keys of 0-40 bytes", keysOf(7, 0, 40)},
			{"100 keys", keysOf(100, 0, 300)},
			{"101 keys", keysOf(101, 0, 300)},
			{"4096 keys of 16 bytes", keysOf(4096, 16, 16)},
			{"4096 keys of 0-300 bytes", keysOf(4096, 0, 300)},
			{"4097 keys of 0-32 bytes", keysOf(4097, 0, 32)},
			{"3600 keys of 290-300 bytes (over 1 MiB)", keysOf(3600, 290, 300)},
			{"20 keys of 60-64 KiB", keysOf(20, 60000, runtime.MaxKeyBytes)},
			// bufSize/1024 keys of 1020 bytes and their lengths fill the buffer exactly; of 1021
			// bytes the keys alone fit but not with their lengths: two crossings.
			{"keys filling the buffer exactly", keysOf(fill, 1020, 1020)},
			{"keys fitting without their lengths", keysOf(fill, 1021, 1021)},
		} {
			name := fmt.Sprintf("buffer %d/%s", rt.Config().BufferBytes, tc.name)
			for _, n := range []int32{1, 7, 1000, 2147483647} {
				out := make([]int32, len(tc.keys))
				if err := p.PartitionBatch(tc.keys, n, out); err != nil {
					t.Fatalf("%s n=%d: %v", name, n, err)
				}
				in, _ := p.Acquire()
				out2 := make([]int32, len(tc.keys))
				err := in.PartitionBatch(tc.keys, n, out2)
				in.Release()
				if err != nil {
					t.Fatalf("%s n=%d, Instance: %v", name, n, err)
				}
				for i, k := range tc.keys {
					if want := ref.Func(k, n); out[i] != want || out2[i] != want {
						t.Fatalf("%s n=%d key %d (%d bytes): pool %d, instance %d, reference %d", name, n, i, len(k), out[i], out2[i], want)
					}
				}
			}
		}
		p.Close()
	}
}

// TestBatchRefusedCallsNothing: a batch with a key over MaxKeyBytes is refused with
// ErrKeyTooLong before any crossing, also when the bad key is the last of a batch that needs
// several: the instance's last call is still the one before (its WorkUsed unchanged), and out
// is not written.
func TestBatchRefusedCallsNothing(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, runtime.Config{})
	m, _ := rt.Load(ctx, mustBuiltin(t, "kafka-murmur2"))
	p, _ := m.NewPool(ctx, nil, runtime.PoolOptions{Size: 1})
	defer p.Close()
	in, _ := p.Acquire()
	defer in.Release()
	for _, count := range []int{1, 10, 5000} {
		if _, err := in.Partition([]byte("a key of 20 bytes.."), 1000); err != nil {
			t.Fatal(err)
		}
		before := in.WorkUsed()
		keys := make([][]byte, count)
		for i := range keys {
			keys[i] = []byte(fmt.Sprintf("key %d", i))
		}
		keys[count-1] = make([]byte, runtime.MaxKeyBytes+1)
		out := make([]int32, count)
		for i := range out {
			out[i] = -7
		}
		err := in.PartitionBatch(keys, 1000, out)
		if !errors.Is(err, runtime.ErrKeyTooLong) {
			t.Fatalf("%d keys, the last too long: got %v, want ErrKeyTooLong", count, err)
		}
		if after := in.WorkUsed(); after != before {
			t.Fatalf("%d keys, the last too long: WorkUsed went from %d to %d: a crossing ran before the refusal", count, before, after)
		}
		for i, r := range out {
			if r != -7 {
				t.Fatalf("%d keys, the last too long: out[%d] = %d was written", count, i, r)
			}
		}
	}
}
