package runtime_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

func newRuntime(t testing.TB, cfg runtime.Config) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

func hostile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "hostile", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// within fails the test if f does not return within d: the runtime must stop every hostile
// module in bounded time (this is a liveness bound, far above the limits, not a speed claim).
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("did not return within %v: the host failed to stop the guest", d)
	}
}

// TestHostileAtLoad: modules the runtime must refuse before running any of their code, each with
// its own sentinel and a message naming what is wrong. Sources are beside the .wasm files in
// testdata/hostile (see its README.md).
func TestHostileAtLoad(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		want    error
		mention string // the message must contain this
	}{
		{"not wasm", "not-wasm.wasm", runtime.ErrNotWasm, "not \\0asm"},
		{"truncated", "truncated.wasm", runtime.ErrInvalidModule, "byte"},
		{"larger than the size limit", "oversize.wasm", runtime.ErrModuleTooLarge, "8388608"},
		{"forbidden import", "forbidden-import.wasm", runtime.ErrForbiddenImport, "env.now"},
		{"WASI function outside the profile", "forbidden-wasi-import.wasm", runtime.ErrForbiddenImport, "fd_read"},
		{"WASI function with a wrong signature", "wasi-wrong-signature.wasm", runtime.ErrForbiddenImport, "random_get"},
		{"missing required export", "missing-export.wasm", runtime.ErrMissingExport, "pctl_partition"},
		{"export with a wrong signature", "bad-signature.wasm", runtime.ErrBadSignature, "(i32) -> (i32)"},
		{"ABI version 2", "abi-v2.wasm", runtime.ErrUnsupportedABI, "version 2"},
		{"initial memory above the limit", "memory-initial.wasm", runtime.ErrMemoryLimit, "513"},
	}
	rt := newRuntime(t, runtime.Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rt.Load(context.Background(), hostile(t, tc.file))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var le *runtime.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("want a *runtime.LoadError, got %T", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("message %q does not mention %q", err, tc.mention)
			}
		})
	}
}

// TestHostileAtCall: modules that load but misbehave when called. Each call fails with its own
// sentinel inside a *CallError that names the plugin, in bounded time; the process survives; the
// instance is replaced; and a correct module on the same runtime keeps answering correctly.
func TestHostileAtCall(t *testing.T) {
	tests := []struct {
		name string
		file string
		key  []byte
		want error
	}{
		{"loops forever", "loop-forever.wasm", []byte("k"), runtime.ErrTimeLimit},
		{"exponential recursion without loops", "exponential.wasm", []byte("k"), runtime.ErrTimeLimit},
		{"grows memory past the limit", "memory-grow.wasm", []byte("k"), runtime.ErrMemoryLimit},
		{"recurses without end", "recurse.wasm", []byte("k"), runtime.ErrCallDepth},
		{"traps on some keys", "trap-some-keys.wasm", []byte{0xff, 1}, runtime.ErrTrap},
		{"returns out of range", "out-of-range.wasm", []byte("odd"), runtime.ErrOutOfRange},
		{"calls proc_exit", "proc-exit.wasm", []byte("k"), runtime.ErrExit},
	}
	rt := newRuntime(t, runtime.Config{})
	ctx := context.Background()
	good, err := rt.Load(ctx, mustBuiltin(t, "kafka-murmur2"))
	if err != nil {
		t.Fatal(err)
	}
	goodPool, err := good.NewPool(ctx, nil, runtime.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := goodPool.Partition([]byte("after"), 1000)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := rt.Load(ctx, hostile(t, tc.file))
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			p, err := m.NewPool(ctx, nil, runtime.PoolOptions{Size: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			for round := 0; round < 2; round++ { // the second round runs on a replacement instance
				within(t, 60*time.Second, func() {
					r, err := p.Partition(tc.key, 10)
					if !errors.Is(err, tc.want) {
						t.Fatalf("round %d: got (%d, %v), want %v", round, r, err, tc.want)
					}
					var ce *runtime.CallError
					if !errors.As(err, &ce) || ce.Digest != m.Digest || !strings.Contains(err.Error(), m.Metadata.Name) {
						t.Fatalf("want a *CallError naming %s, got %v", m, err)
					}
				})
				within(t, 60*time.Second, func() {
					out := make([]int32, 3)
					err := p.PartitionBatch([][]byte{[]byte("aa"), tc.key, []byte("bb")}, 10, out)
					if !errors.Is(err, tc.want) {
						t.Fatalf("batch round %d: got %v, want %v", round, err, tc.want)
					}
				})
			}
			if got, err := goodPool.Partition([]byte("after"), 1000); err != nil || got != want {
				t.Fatalf("the good module answers %d (%v) after the hostile one, want %d", got, err, want)
			}
		})
	}
}

func mustBuiltin(t testing.TB, name string) []byte {
	b, ok := plugins.Builtin(name)
	if !ok {
		t.Fatalf("no built-in %s", name)
	}
	return b
}

// TestTrapThenServe: after a trap on one key the pool replaces the instance and answers the next
// keys correctly (trap-some-keys computes key_len % n for keys not starting with 0xFF).
func TestTrapThenServe(t *testing.T) {
	rt := newRuntime(t, runtime.Config{})
	m, err := rt.Load(context.Background(), hostile(t, "trap-some-keys.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := m.NewPool(context.Background(), nil, runtime.PoolOptions{Size: 1})
	for i := 0; i < 50; i++ {
		if _, err := p.Partition([]byte{0xff}, 7); !errors.Is(err, runtime.ErrTrap) {
			t.Fatalf("want a trap, got %v", err)
		}
		key := make([]byte, i)
		if r, err := p.Partition(key, 7); err != nil || r != int32(i%7) {
			t.Fatalf("after a trap: key of %d bytes gives (%d, %v), want %d", i, r, err, i%7)
		}
	}
	if p.Replaced() != 50 {
		t.Fatalf("replaced %d instances, want 50 (one per trap)", p.Replaced())
	}
}

// TestHammer: many goroutines on one small pool, mixing good keys, trapping keys, batches and
// exclusive instances. Run under -race in CI.
func TestHammer(t *testing.T) {
	rt := newRuntime(t, runtime.Config{})
	m, err := rt.Load(context.Background(), hostile(t, "trap-some-keys.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := m.NewPool(context.Background(), nil, runtime.PoolOptions{Size: 3})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				key := make([]byte, (g+i)%50)
				switch i % 10 {
				case 0:
					if _, err := p.Partition(append([]byte{0xff}, key...), 13); !errors.Is(err, runtime.ErrTrap) {
						errs <- err
						return
					}
				case 1:
					out := make([]int32, 3)
					if err := p.PartitionBatch([][]byte{key, key[:0], append(key, 1)}, 13, out); err != nil || out[0] != int32(len(key)%13) || out[1] != 0 || out[2] != int32((len(key)+1)%13) {
						errs <- err
						return
					}
				case 2:
					in, err := p.Acquire()
					if err != nil {
						errs <- err
						return
					}
					for j := 0; j < 5; j++ {
						if r, err := in.Partition(key, 13); err != nil || r != int32(len(key)%13) {
							errs <- err
							in.Release()
							return
						}
					}
					in.Release()
				default:
					if r, err := p.Partition(key, 13); err != nil || r != int32(len(key)%13) {
						errs <- err
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("hammer: %v", err)
	}
}

// TestClosedPool: calls after Close fail with ErrClosed, and Close is idempotent.
func TestClosedPool(t *testing.T) {
	rt := newRuntime(t, runtime.Config{})
	m, _ := rt.Load(context.Background(), mustBuiltin(t, "jump"))
	p, _ := m.NewPool(context.Background(), nil, runtime.PoolOptions{})
	p.Close()
	p.Close()
	if _, err := p.Partition([]byte("x"), 3); !errors.Is(err, runtime.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

// TestArgumentChecks: the host refuses bad arguments itself, without calling the plugin.
func TestArgumentChecks(t *testing.T) {
	rt := newRuntime(t, runtime.Config{})
	m, _ := rt.Load(context.Background(), mustBuiltin(t, "kafka-murmur2"))
	p, _ := m.NewPool(context.Background(), nil, runtime.PoolOptions{})
	for _, n := range []int32{0, -1, -2147483648} {
		if _, err := p.Partition([]byte("x"), n); !errors.Is(err, runtime.ErrInvalidPartitionCount) {
			t.Errorf("n=%d: got %v, want ErrInvalidPartitionCount", n, err)
		}
	}
	if _, err := p.Partition(make([]byte, runtime.MaxKeyBytes+1), 3); !errors.Is(err, runtime.ErrKeyTooLong) {
		t.Errorf("long key: got %v, want ErrKeyTooLong", err)
	}
	if _, err := p.Partition(make([]byte, runtime.MaxKeyBytes), 3); err != nil {
		t.Errorf("a key of exactly %d bytes must be accepted: %v", runtime.MaxKeyBytes, err)
	}
	if _, err := p.Partition(nil, 3); err != nil {
		t.Errorf("the empty key is a key: %v", err)
	}
}
