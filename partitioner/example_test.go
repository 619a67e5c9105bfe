package partitioner_test

import (
	"context"
	"fmt"

	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/runtime"
)

// A built-in partitioner as its WebAssembly module and as native Go: the same partitions. The
// expected values follow from Kafka's UtilsTest (murmur2("21") = -973932308, "foobar" =
// -790332482, "" = 275646681): (h & 0x7fffffff) % 12.
func Example() {
	ctx := context.Background()
	rt, _ := runtime.New(ctx, runtime.Config{})
	defer rt.Close(ctx)
	lib := partitioner.NewLibrary(rt)

	wasm, err := lib.Open(ctx, "kafka-murmur2", nil, runtime.PoolOptions{})
	if err != nil {
		panic(err)
	}
	defer wasm.Close()
	native, _ := partitioner.Native("kafka-murmur2")

	for _, key := range []string{"21", "foobar", ""} {
		a, _ := wasm.Partition([]byte(key), 12)
		b, _ := native.Partition([]byte(key), 12)
		fmt.Printf("%q -> %d %d\n", key, a, b)
	}
	// Output:
	// "21" -> 0 0
	// "foobar" -> 6 6
	// "" -> 9 9
}

// Canonical config bytes: the same flags in any order give the same bytes.
func ExampleEncodeConfig() {
	a, _ := partitioner.EncodeConfig([]string{"seed=42", "mode=fast"})
	b, _ := partitioner.EncodeConfig([]string{"mode=fast", "seed=42"})
	fmt.Printf("%q %v\n", a, string(a) == string(b))
	// Output: "mode=fast\nseed=42\n" true
}
