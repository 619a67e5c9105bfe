package runtime_test

import (
	"context"
	"sync"
	"testing"

	"pctl.dev/pctl/runtime"
)

// TestConcurrentLoadsCompileOnce: many goroutines loading the same bytes at once get one *Module
// (the race detector saw wazero's compiler race with itself when two Loads compiled together).
func TestConcurrentLoadsCompileOnce(t *testing.T) {
	ctx := context.Background()
	wasm := mustBuiltin(t, "kafka-murmur2")
	// A warm on-disk cache: a module read back from it is published in wazero's engine before its
	// entry preambles are compiled (wazero issue 2547), which is where concurrent loads raced.
	dir := t.TempDir()
	warm, err := runtime.New(ctx, runtime.Config{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := warm.Load(ctx, wasm); err != nil {
		t.Fatal(err)
	}
	warm.Close(ctx)
	rt, err := runtime.New(ctx, runtime.Config{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	const n = 8
	mods := make([]*runtime.Module, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			mods[i], errs[i] = rt.Load(ctx, wasm)
			if errs[i] == nil {
				// Instantiate at once, while other loads may still be compiling.
				var p *runtime.Pool
				if p, errs[i] = mods[i].NewPool(ctx, nil, runtime.PoolOptions{Size: 1}); errs[i] == nil {
					_, errs[i] = p.Partition([]byte("k"), 12)
				}
			}
		}(i)
	}
	close(start)
	wg.Wait()
	for i := 0; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("load %d: %v", i, errs[i])
		}
		if mods[i] != mods[0] {
			t.Fatalf("load %d returned another *Module", i)
		}
	}
}
