package partitioner

import (
	"fmt"
	"strings"
	"sync"

	"pctl.dev/pctl/partitioner/builtin"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

type native struct {
	b      builtin.Builtin
	digest string
}

// Native returns the Go implementation of a built-in partitioner.
func Native(name string) (Partitioner, error) {
	b, ok := builtin.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w %q; the built-ins are %s", ErrNotBuiltin, name, strings.Join(plugins.BuiltinNames(), ", "))
	}
	wasm, ok := plugins.Builtin(name)
	if !ok {
		return nil, fmt.Errorf("partitioner: built-in %q has no embedded module (a build problem: run make plugins)", name)
	}
	return &native{b: b, digest: runtime.Digest(wasm)}, nil
}

func (p *native) Name() string   { return p.b.Name }
func (p *native) Digest() string { return p.digest }
func (p *native) Close() error   { return nil }

func (p *native) Partition(key []byte, n int32) (int32, error) {
	if n < 1 {
		return -1, fmt.Errorf("%w: %d; a topic has 1 to 2147483647 partitions", runtime.ErrInvalidPartitionCount, n)
	}
	if len(key) > runtime.MaxKeyBytes {
		return -1, fmt.Errorf("%w: %d bytes; keys are at most %d bytes", runtime.ErrKeyTooLong, len(key), runtime.MaxKeyBytes)
	}
	return p.b.Func(key, n), nil
}

func (p *native) PartitionBatch(keys [][]byte, n int32, out []int32) error {
	if len(out) < len(keys) {
		return fmt.Errorf("partitioner: PartitionBatch: out has %d slots for %d keys", len(out), len(keys))
	}
	for i, k := range keys {
		r, err := p.Partition(k, n)
		if err != nil {
			return err
		}
		out[i] = r
	}
	return nil
}

func (p *native) Ancestry(fromN, toN, child int32) ([]Range, error) {
	if p.b.Ancestry == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoAncestry, p.b.Name)
	}
	rs := p.b.Ancestry(fromN, toN, child)
	if rs == nil {
		return nil, fmt.Errorf("partitioner: %s ancestry: invalid arguments from=%d to=%d child=%d", p.b.Name, fromN, toN, child)
	}
	out := make([]Range, len(rs))
	for i, r := range rs {
		out[i] = Range{Lo: r.Lo, Hi: r.Hi}
	}
	return out, nil
}

// builtinDigests maps each embedded built-in module's digest to the built-in's name.
var builtinDigests = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	for _, name := range plugins.BuiltinNames() {
		if wasm, ok := plugins.Builtin(name); ok {
			m[runtime.Digest(wasm)] = name
		}
	}
	return m
})

// NativeFor returns the Go implementation of the built-in whose embedded module has exactly this
// digest, for a partitioner without config: the native fast path of spec/builtins.md. It
// returns false for any other digest (an upload that claims compatible:<builtin> included) and
// whenever config is not empty.
func NativeFor(digest string, config []byte) (Partitioner, bool) {
	if len(config) > 0 {
		return nil, false
	}
	name, ok := builtinDigests()[digest]
	if !ok {
		return nil, false
	}
	p, err := Native(name)
	if err != nil {
		return nil, false
	}
	return p, true
}
