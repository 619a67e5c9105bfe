package partitioner

import (
	"context"
	"errors"
	"fmt"

	"pctl.dev/pctl/runtime"
)

// WASM is a Partitioner backed by a module running in pctl's wazero host. It is safe for
// concurrent use: calls take instances from a pool.
type WASM struct {
	pool   *runtime.Pool
	module *runtime.Module
}

// NewWASM makes a Partitioner of a loaded module with the given config bytes.
func NewWASM(ctx context.Context, m *runtime.Module, config []byte, opts runtime.PoolOptions) (*WASM, error) {
	p, err := m.NewPool(ctx, config, opts)
	if err != nil {
		return nil, err
	}
	return &WASM{pool: p, module: m}, nil
}

// Module returns the loaded module (digest, metadata, profile, exports).
func (w *WASM) Module() *runtime.Module { return w.module }

// Pool returns the instance pool, for callers that want Acquire (one instance per goroutine).
func (w *WASM) Pool() *runtime.Pool { return w.pool }

func (w *WASM) Name() string   { return w.module.Metadata.Name }
func (w *WASM) Digest() string { return w.module.Digest }
func (w *WASM) Close() error   { return w.pool.Close() }

func (w *WASM) Partition(key []byte, n int32) (int32, error) { return w.pool.Partition(key, n) }

func (w *WASM) PartitionBatch(keys [][]byte, n int32, out []int32) error {
	return w.pool.PartitionBatch(keys, n, out)
}

func (w *WASM) Ancestry(fromN, toN, child int32) ([]Range, error) {
	if !w.module.HasAncestry {
		return nil, fmt.Errorf("%w: %s does not export pctl_ancestry", ErrNoAncestry, w.module)
	}
	rs, err := w.pool.Ancestry(fromN, toN, child)
	if errors.Is(err, runtime.ErrUnsupported) {
		return nil, fmt.Errorf("%w: %v", ErrNoAncestry, err)
	}
	return rs, err
}
