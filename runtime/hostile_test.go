package runtime_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
	"pctl.dev/pctl/spec/vectors"
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
		// spec/abi-v1.md §7.3: structural checks every host makes itself.
		{"a 134M-element table filled at start", "table-huge.wasm", runtime.ErrTableLimit, "134217728 initial elements; the limit is 131072"},
		{"element segment out of bounds (wazero would instantiate it)", "elem-out-of-bounds.wasm", runtime.ErrInvalidModule, "element segment 0 writes elements [1, 2) of table 0, which has 1"},
		{"data segment out of bounds", "data-out-of-bounds.wasm", runtime.ErrInvalidModule, "data segment 0 writes bytes [1114111, 1114113)"},
		// spec/abi-v1.md §7: a limit hit while loading is that limit, not a trap.
		{"start function loops forever", "start-loop.wasm", runtime.ErrTimeLimit, "start"},
		{"start function exhausts memory", "start-memory.wasm", runtime.ErrMemoryLimit, "start"},
		// spec/abi-v1.md §2.6: what every host refuses in metadata.
		{"metadata not UTF-8", "metadata-invalid-utf8.wasm", runtime.ErrBadMetadata, "not valid UTF-8"},
		{"metadata with a byte-order mark", "metadata-bom.wasm", runtime.ErrBadMetadata, "byte-order mark"},
		{"metadata with NaN", "metadata-nan.wasm", runtime.ErrBadMetadata, "not a JSON object"},
		{"metadata nested 2001 deep", "metadata-deep.wasm", runtime.ErrBadMetadata, "nest 2001 deep"},
		{"metadata keys in the wrong case", "metadata-key-case.wasm", runtime.ErrBadMetadata, `name ""`},
		{"metadata properties holding null", "metadata-null-property.wasm", runtime.ErrBadMetadata, "list of strings"},
		{"metadata description not a string", "metadata-description-type.wasm", runtime.ErrBadMetadata, `"description" must be a string`},
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

// keyLenMod is the partition function the sources of most hostile modules state for their
// well-behaved keys: key_len % n.
func keyLenMod(key []byte, n int32) int32 { return int32(len(key)) % n }

// fnv1a is bulk-trigger.wat's function for every key but its trigger: 32-bit FNV-1a modulo n,
// written here from the FNV specification, not from the module.
func fnv1a(key []byte, n int32) int32 {
	h := uint32(2166136261)
	for _, c := range key {
		h = (h ^ uint32(c)) * 16777619
	}
	return int32(h % uint32(n))
}

// TestHostileAtCall: modules that load but misbehave when called. Each call fails with its own
// sentinel inside a *CallError that names the plugin, in bounded time; the process survives; the
// instance is replaced; and after every failure a correct module on the same runtime answers as
// the Kafka client's own vectors say, and every hostile pool still answers its well-behaved keys
// as its source says (valid, computed here, never by the module).
func TestHostileAtCall(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		key   []byte
		want  error
		valid func(key []byte, n int32) int32 // the module's function on validKeys; nil: none
	}{
		{"loops forever", "loop-forever.wasm", []byte("k"), runtime.ErrTimeLimit, nil},
		{"exponential recursion without loops", "exponential.wasm", []byte("k"), runtime.ErrTimeLimit, nil},
		{"grows memory past the limit", "memory-grow.wasm", []byte("k"), runtime.ErrMemoryLimit, nil},
		{"recurses without end", "recurse.wasm", []byte("k"), runtime.ErrCallDepth, nil},
		{"traps on some keys", "trap-some-keys.wasm", []byte{0xff, 1}, runtime.ErrTrap, keyLenMod},
		{"returns out of range", "out-of-range.wasm", []byte("odd"), runtime.ErrOutOfRange, keyLenMod},
		{"calls proc_exit", "proc-exit.wasm", []byte("k"), runtime.ErrExit, nil},
		// spec/abi-v1.md §7.2, rule 3: bulk instructions are charged by their length.
		{"memory.fill of 16 MiB in a loop", "bulk-memory.wasm", []byte("f"), runtime.ErrTimeLimit, keyLenMod},
		{"memory.copy of 16 MiB in a loop", "bulk-memory.wasm", []byte("c"), runtime.ErrTimeLimit, keyLenMod},
		{"memory.init of 16 KiB in a loop", "bulk-memory.wasm", []byte("i"), runtime.ErrTimeLimit, keyLenMod},
		{"table.fill of 131072 elements in a loop", "bulk-table.wasm", []byte("F"), runtime.ErrTimeLimit, keyLenMod},
		{"table.copy of 131071 elements in a loop", "bulk-table.wasm", []byte("C"), runtime.ErrTimeLimit, keyLenMod},
		{"table.init of 4096 elements in a loop", "bulk-table.wasm", []byte("I"), runtime.ErrTimeLimit, keyLenMod},
		{"fill forever for one key only", "bulk-trigger.wasm", []byte("hostile:freeze!!"), runtime.ErrTimeLimit, fnv1a},
		// spec/abi-v1.md §7.2, rule 4: WASI calls are charged per call and by the bytes they touch.
		{"random_get of 16 MiB in a loop", "wasi-bulk.wasm", []byte("r"), runtime.ErrTimeLimit, keyLenMod},
		{"fd_write of 2M iovecs in a loop", "wasi-bulk.wasm", []byte("w"), runtime.ErrTimeLimit, keyLenMod},
		{"poll_oneoff of 200000 subscriptions in a loop", "wasi-bulk.wasm", []byte("p"), runtime.ErrTimeLimit, keyLenMod},
		{"sched_yield in a loop", "wasi-bulk.wasm", []byte("y"), runtime.ErrTimeLimit, keyLenMod},
	}
	// Keys every module with a valid function answers (none starts with a trigger byte or 0xff,
	// none has an odd length, which out-of-range.wasm refuses).
	validKeys := [][]byte{nil, []byte("aa"), []byte("abcd"), []byte("abcdefghijkl")}
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
	vf, err := vectors.Load("kafka-murmur2")
	if err != nil {
		t.Fatal(err)
	}
	var ref vectors.Case // a case of the Kafka client's own vectors, not a value of the pool
	for _, c := range vf.Cases {
		if c.N == 1000 && len(c.Key) > 4 {
			ref = c
			break
		}
	}
	if ref.N == 0 {
		t.Fatal("no kafka-murmur2 vector with n = 1000")
	}
	pools := make([]*runtime.Pool, len(tests))
	mods := make([]*runtime.Module, len(tests))
	for i, tc := range tests {
		m, err := rt.Load(ctx, hostile(t, tc.file))
		if err != nil {
			t.Fatalf("%s: load: %v", tc.file, err)
		}
		p, err := m.NewPool(ctx, nil, runtime.PoolOptions{Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		pools[i], mods[i] = p, m
	}
	// afterFailure asks the good pool and every hostile pool that has well-behaved keys for them.
	afterFailure := func(t *testing.T, what string) {
		t.Helper()
		if got, err := goodPool.Partition(ref.Key, ref.N); err != nil || got != ref.Partition {
			t.Fatalf("after %s: kafka-murmur2 gives (%d, %v) for key %x, n=%d; the Kafka client's vectors say %d", what, got, err, ref.Key, ref.N, ref.Partition)
		}
		for i, tc := range tests {
			if tc.valid == nil {
				continue
			}
			for _, n := range []int32{1, 7, 1000} {
				for _, k := range validKeys {
					if got, err := pools[i].Partition(k, n); err != nil || got != tc.valid(k, n) {
						t.Fatalf("after %s: %s answers (%d, %v) for key %q, n=%d; its source says %d", what, tc.file, got, err, k, n, tc.valid(k, n))
					}
				}
			}
		}
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, p := mods[i], pools[i]
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
				afterFailure(t, tc.name)
				within(t, 60*time.Second, func() {
					out := make([]int32, 3)
					err := p.PartitionBatch([][]byte{[]byte("aa"), tc.key, []byte("bb")}, 10, out)
					if !errors.Is(err, tc.want) {
						t.Fatalf("batch round %d: got %v, want %v", round, err, tc.want)
					}
				})
				afterFailure(t, tc.name+" (batch)")
			}
		})
	}
}

// TestFuelEdge pins the counting of spec/abi-v1.md §7.2 at the edge of the budget, on both
// engines: fuel-edge.wat's comments derive, from the spec's rules alone, the keys that spend
// exactly the whole budget (they must get their partition) and the keys one unit dearer (they must
// stop with a time limit). A host that counts one instruction, one loop turn or one byte
// differently flips one of them.
func TestFuelEdge(t *testing.T) {
	key := func(op byte, v uint32) []byte {
		return binary.LittleEndian.AppendUint32([]byte{'f', 'u', 'e', 'l', op}, v)
	}
	tests := []struct {
		name string
		key  []byte
		want int32 // -1: time limit
		used int64 // the fuel the call used, when it succeeds
	}{
		{"memory.fill: the whole budget", key('m', 2147481680), 0, 1 << 31},
		{"memory.fill: one unit more", key('m', 2147481681), -1, 0},
		{"memory.fill: nothing", key('m', 0), 0, 48 + 15},
		{"memory.fill: exactly one chunk", key('m', 1<<24), 0, 48 + 15 + 1<<24},
		{"memory.fill: one chunk and a byte", key('m', 1<<24+1), 0, 48 + 2*15 + 1<<24 + 1},
		{"random_get: within the budget", key('r', 33554175), 1, 48 + 16384 + 64*33554175},
		{"random_get: over it", key('r', 33554176), -1, 0},
		{"random_get: nothing", key('r', 0), 1, 48 + 16384},
		{"another key: the whole top level is charged at entry", []byte("fuel"), 4, 48},
	}
	for _, engine := range []runtime.Engine{runtime.EngineCompiler, runtime.EngineInterpreter} {
		rt := newRuntime(t, runtime.Config{Engine: engine})
		m, err := rt.Load(context.Background(), hostile(t, "fuel-edge.wasm"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.NewPool(context.Background(), nil, runtime.PoolOptions{Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range tests {
			t.Run(engine.String()+"/"+tc.name, func(t *testing.T) {
				in, err := p.Acquire()
				if err != nil {
					t.Fatal(err)
				}
				defer in.Release()
				got, err := in.Partition(tc.key, 10)
				if tc.want < 0 {
					if !errors.Is(err, runtime.ErrTimeLimit) {
						t.Fatalf("got (%d, %v); want a time limit: the key costs one unit more than the budget", got, err)
					}
					return
				}
				if err != nil || got != tc.want {
					t.Fatalf("got (%d, %v); want partition %d: the key costs at most the budget (spec/abi-v1.md §7.2)", got, err, tc.want)
				}
				if used := in.WorkUsed(); used != tc.used {
					t.Errorf("the call used %d units; the rules of §7.2 give %d", used, tc.used)
				}
			})
		}
		p.Close()
	}
}

// TestTableLimitAtRunTime: table-grow.wasm grows its table to exactly the limit (must succeed)
// and one element more (must fail, table.grow returns -1); it returns n, out of range, otherwise.
func TestTableLimitAtRunTime(t *testing.T) {
	rt := newRuntime(t, runtime.Config{})
	m, err := rt.Load(context.Background(), hostile(t, "table-grow.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := m.NewPool(context.Background(), nil, runtime.PoolOptions{Size: 1})
	defer p.Close()
	for _, k := range [][]byte{nil, []byte("abc")} {
		if got, err := p.Partition(k, 7); err != nil || got != keyLenMod(k, 7) {
			t.Fatalf("key %q: got (%d, %v); want %d: the table must grow to exactly %d elements", k, got, err, keyLenMod(k, 7), runtime.MaxTableElements)
		}
	}
}

// TestValidMetadataLoads: a document that every rule of spec/abi-v1.md §2.6 allows, with a
// 5000-digit number under an unknown key (Python's json refuses such integers), loads.
func TestValidMetadataLoads(t *testing.T) {
	rt := newRuntime(t, runtime.Config{})
	m, err := rt.Load(context.Background(), hostile(t, "metadata-big-number.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Metadata.Name != "metadata-big-number" {
		t.Fatalf("name %q", m.Metadata.Name)
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
