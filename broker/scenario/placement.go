package scenario

import (
	"context"
	"fmt"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// Placement is one keyed delivery's place: the epoch and partition the record was stored in.
type Placement struct {
	Epoch, Partition int
	Key              []byte
}

// PlacementReport is the verdict of CheckPlacements.
type PlacementReport struct {
	Checked int // keyed deliveries checked
	Wrong   int // stored in another partition than f_epoch(key)
	// Errors counts deliveries whose expected partition could not be computed (an epoch the
	// descriptor does not have, a module that fails on the key, bytes that cannot be had): each
	// is a failure, never "placed correctly".
	Errors   int
	Examples []string
}

// OK reports whether every delivery was checked and found in its partition.
func (p PlacementReport) OK() bool { return p.Wrong == 0 && p.Errors == 0 }

// ModuleSource returns a module's bytes by digest (hex SHA-256), for the epochs whose function
// is not a built-in. CheckPlacements verifies the bytes against the digest.
type ModuleSource func(ctx context.Context, digest string) ([]byte, error)

// CheckPlacements computes, independently of the producers' code path (client.Partitioner, the
// wazero compiler), the partition each keyed delivery's key must have in its epoch, and counts
// those stored elsewhere. An epoch whose module is a built-in (by digest) uses the built-in's
// native Go implementation (partitioner/builtin, pinned to the reference clients by
// spec/vectors); any other module runs on the wazero interpreter, a second engine, from bytes
// that must match the epoch's digest. Whatever cannot be computed is an error, counted as a
// failure.
func CheckPlacements(ctx context.Context, t *wire.Topic, src ModuleSource, places []Placement) PlacementReport {
	var rep PlacementReport
	example := func(format string, args ...any) {
		if len(rep.Examples) < 10 {
			rep.Examples = append(rep.Examples, fmt.Sprintf(format, args...))
		}
	}
	fns := map[int]func([]byte) (int32, error){}
	fnErr := map[int]error{}
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	fn := func(epoch int) (func([]byte) (int32, error), error) {
		if f, ok := fns[epoch]; ok {
			return f, nil
		}
		if err, ok := fnErr[epoch]; ok {
			return nil, err
		}
		f, closer, err := referenceFunc(ctx, t, epoch, src)
		if err != nil {
			fnErr[epoch] = err
			return nil, err
		}
		if closer != nil {
			closers = append(closers, closer)
		}
		fns[epoch] = f
		return f, nil
	}
	type ek struct {
		epoch int
		key   string
	}
	want := map[ek]int32{}
	for _, p := range places {
		rep.Checked++
		k := ek{p.Epoch, string(p.Key)}
		w, ok := want[k]
		if !ok {
			f, err := fn(p.Epoch)
			if err != nil {
				rep.Errors++
				example("key %q in partition %d of epoch %d: cannot compute its partition: %v", p.Key, p.Partition, p.Epoch, err)
				continue
			}
			if w, err = f(p.Key); err != nil {
				rep.Errors++
				example("key %q in partition %d of epoch %d: the reference fails: %v", p.Key, p.Partition, p.Epoch, err)
				continue
			}
			want[k] = w
		}
		if int(w) != p.Partition {
			rep.Wrong++
			example("key %q delivered from partition %d of epoch %d; f_%d(key) = %d", p.Key, p.Partition, p.Epoch, p.Epoch, w)
		}
	}
	return rep
}

// referenceFunc returns the independent f_epoch(key).
func referenceFunc(ctx context.Context, t *wire.Topic, epoch int, src ModuleSource) (func([]byte) (int32, error), func(), error) {
	ep := t.Epoch(epoch)
	if ep == nil {
		return nil, nil, fmt.Errorf("topic %s has no epoch %d", t.Name, epoch)
	}
	n := int32(ep.Partitions)
	for _, name := range plugins.BuiltinNames() {
		nat, err := partitioner.Native(name)
		if err != nil {
			return nil, nil, err
		}
		if nat.Digest() != ep.Partitioner.Digest {
			continue
		}
		if len(ep.Partitioner.Config) > 0 {
			return nil, nil, fmt.Errorf("epoch %d: built-in %s with a config (%d bytes): built-ins take none", epoch, name, len(ep.Partitioner.Config))
		}
		return func(k []byte) (int32, error) { return nat.Partition(k, n) }, nil, nil
	}
	if src == nil {
		return nil, nil, fmt.Errorf("epoch %d: module %s is not a built-in and no module source was given", epoch, ep.Partitioner.Digest)
	}
	wasm, err := src(ctx, ep.Partitioner.Digest)
	if err != nil {
		return nil, nil, fmt.Errorf("epoch %d: module %s: %w", epoch, ep.Partitioner.Digest, err)
	}
	if d := runtime.Digest(wasm); d != ep.Partitioner.Digest {
		return nil, nil, fmt.Errorf("epoch %d: the module's bytes have digest %s, the epoch names %s", epoch, d, ep.Partitioner.Digest)
	}
	rt, err := runtime.New(ctx, runtime.Config{Engine: runtime.EngineInterpreter})
	if err != nil {
		return nil, nil, err
	}
	m, err := rt.Load(ctx, wasm)
	if err != nil {
		rt.Close(ctx)
		return nil, nil, fmt.Errorf("epoch %d: module %s on the interpreter: %w", epoch, ep.Partitioner.Name, err)
	}
	pool, err := m.NewPool(ctx, ep.Partitioner.Config, runtime.PoolOptions{Size: 1})
	if err != nil {
		rt.Close(ctx)
		return nil, nil, fmt.Errorf("epoch %d: module %s on the interpreter: %w", epoch, ep.Partitioner.Name, err)
	}
	closer := func() { pool.Close(); rt.Close(context.Background()) }
	return func(k []byte) (int32, error) { return pool.Partition(k, n) }, closer, nil
}
