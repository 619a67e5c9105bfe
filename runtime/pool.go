package runtime

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
)

// PoolOptions configures a Pool.
type PoolOptions struct {
	// Size is the most instances the pool creates; callers beyond it wait. Default GOMAXPROCS.
	// Instances are created on demand, so an idle pool holds one.
	Size int
}

// Pool is a set of instances of one module with one config, for concurrent callers. Every method
// is safe for concurrent use; each call takes an instance for itself, so calls never share guest
// state. Partition and PartitionBatch do not allocate on success.
type Pool struct {
	m      *Module
	config []byte
	slots  []slot

	head    atomic.Uint64 // lock-free free list: tag<<32 | (index+1); 0 = empty
	closed  atomic.Bool
	waiters atomic.Int32

	mu      sync.Mutex // guards created and the slow path
	cond    sync.Cond
	created int

	replaced atomic.Int64
}

type slot struct {
	idx  uint32
	next atomic.Uint32
	in   *instance // owned by whoever popped the slot
}

// NewPool creates a pool running the module with the given per-topic config bytes
// (spec/abi-v1.md §2.5). It creates one instance at once, so a rejected config fails here.
func (m *Module) NewPool(ctx context.Context, config []byte, opts PoolOptions) (*Pool, error) {
	size := opts.Size
	if size <= 0 {
		size = goruntime.GOMAXPROCS(0)
	}
	p := &Pool{m: m, config: append([]byte(nil), config...), slots: make([]slot, size)}
	p.cond.L = &p.mu
	for i := range p.slots {
		p.slots[i].idx = uint32(i)
	}
	in, err := m.newInstance(ctx, p.config, false)
	if err != nil {
		return nil, err
	}
	p.slots[0].in = in
	p.created = 1
	p.push(&p.slots[0])
	return p, nil
}

// Module returns the pool's module.
func (p *Pool) Module() *Module { return p.m }

// Replaced returns how many instances were discarded after a trap or a limit and replaced.
func (p *Pool) Replaced() int64 { return p.replaced.Load() }

func (p *Pool) pop() *slot {
	for {
		h := p.head.Load()
		i := uint32(h)
		if i == 0 {
			return nil
		}
		s := &p.slots[i-1]
		next := s.next.Load()
		if p.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(next)) {
			return s
		}
	}
}

func (p *Pool) push(s *slot) {
	for {
		h := p.head.Load()
		s.next.Store(uint32(h))
		if p.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(s.idx+1)) {
			break
		}
	}
	if p.waiters.Load() > 0 {
		p.mu.Lock()
		p.cond.Signal()
		p.mu.Unlock()
	}
}

func (p *Pool) acquire() (*slot, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	if s := p.pop(); s != nil {
		return s, nil
	}
	// Slow path. Registering as a waiter before the last pop attempt means a concurrent push
	// either is seen by that pop or sees the waiter and signals (under mu, after Wait).
	p.waiters.Add(1)
	defer p.waiters.Add(-1)
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed.Load() {
			return nil, ErrClosed
		}
		if s := p.pop(); s != nil {
			return s, nil
		}
		if p.created < len(p.slots) {
			s := &p.slots[p.created]
			p.created++
			return s, nil // its instance is created by ready, outside the lock
		}
		p.cond.Wait()
	}
}

// ready returns the slot's instance, creating or replacing it as needed.
func (p *Pool) ready(s *slot) (*instance, error) {
	if s.in != nil && !s.in.broken {
		return s.in, nil
	}
	if s.in != nil {
		s.in.close(context.Background())
		s.in = nil
		p.replaced.Add(1)
	}
	in, err := p.m.newInstance(context.Background(), p.config, false)
	if err != nil {
		return nil, err
	}
	s.in = in
	return in, nil
}

func (p *Pool) release(s *slot) {
	if s.in != nil && s.in.broken {
		s.in.close(context.Background())
		s.in = nil
		p.replaced.Add(1)
	}
	p.push(s)
	if p.closed.Load() {
		p.drain()
	}
}

func (p *Pool) drain() {
	for s := p.pop(); s != nil; s = p.pop() {
		if s.in != nil {
			s.in.close(context.Background())
			s.in = nil
		}
	}
}

// Close releases the pool's instances. Calls in progress finish; later calls return ErrClosed.
func (p *Pool) Close() error {
	p.closed.Store(true)
	p.mu.Lock()
	p.cond.Broadcast()
	p.mu.Unlock()
	p.drain()
	return nil
}

func checkN(n int32) error {
	if n < 1 {
		return fmt.Errorf("%w: %d; a topic has 1 to %d partitions", ErrInvalidPartitionCount, n, int32(MaxPartitions))
	}
	return nil
}

func checkKey(key []byte) error {
	if len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes; keys are at most %d bytes (spec/abi-v1.md §1.1)", ErrKeyTooLong, len(key), MaxKeyBytes)
	}
	return nil
}

// Partition returns the partition of key among n partitions. Errors: ErrInvalidPartitionCount,
// ErrKeyTooLong (the plugin is not called), ErrClosed, or a *CallError from the plugin.
func (p *Pool) Partition(key []byte, n int32) (int32, error) {
	if n < 1 {
		return -1, checkN(n)
	}
	if len(key) > MaxKeyBytes {
		return -1, checkKey(key)
	}
	s, err := p.acquire()
	if err != nil {
		return -1, err
	}
	r, err := p.partition(s, key, n)
	p.release(s)
	return r, err
}

func (p *Pool) partition(s *slot, key []byte, n int32) (int32, error) {
	in, err := p.ready(s)
	if err != nil {
		return -1, err
	}
	return in.partition(key, n)
}

// PartitionBatch computes the partitions of many keys into out (len(out) >= len(keys)), with as
// few crossings as the buffer allows. Results are identical to Partition's. On error, out is
// undefined and the *CallError says which key of which crossing failed.
func (p *Pool) PartitionBatch(keys [][]byte, n int32, out []int32) error {
	total, err := checkBatch(keys, n, out)
	if err != nil {
		return err
	}
	s, err := p.acquire()
	if err != nil {
		return err
	}
	defer p.release(s)
	return p.partitionBatch(s, keys, n, out, total)
}

// checkBatch checks every argument before any crossing (a refused batch calls nothing) and
// returns the keys' total length.
func checkBatch(keys [][]byte, n int32, out []int32) (int, error) {
	if err := checkN(n); err != nil {
		return 0, err
	}
	if len(out) < len(keys) {
		return 0, fmt.Errorf("runtime: PartitionBatch: out has %d slots for %d keys", len(out), len(keys))
	}
	total := 0
	for _, k := range keys {
		if len(k) > MaxKeyBytes {
			return 0, checkKey(k)
		}
		total += len(k)
	}
	return total, nil
}

// partitionBatch splits the keys into crossings that fit the buffer and MaxBatchKeys; total is
// the keys' total length (checkBatch). A batch that fits one crossing, the common case, skips
// the splitting pass.
func (p *Pool) partitionBatch(s *slot, keys [][]byte, n int32, out []int32, total int) error {
	maxKeys := p.m.rt.cfg.MaxBatchKeys
	if len(keys) <= maxKeys {
		in, err := p.ready(s)
		if err != nil {
			return err
		}
		if 4*len(keys)+total <= int(in.bufSize) {
			return in.batch(keys, n, out)
		}
	}
	for start := 0; start < len(keys); {
		in, err := p.ready(s)
		if err != nil {
			return err
		}
		end, size := start, 0
		for end < len(keys) && end-start < maxKeys {
			need := size + 4 + len(keys[end])
			if need > int(in.bufSize) {
				break
			}
			size = need
			end++
		}
		if err := in.batch(keys[start:end], n, out[start:end]); err != nil {
			var ce *CallError
			if errors.As(err, &ce) && start > 0 {
				ce.Detail = fmt.Sprintf("crossing starting at key %d: %s", start, ce.Detail)
			}
			return err
		}
		start = end
	}
	return nil
}

// Instance is one instance of a pool, held by one goroutine for many calls: the fastest path,
// with no pool operation per call. It is not safe for concurrent use. A failed call replaces the
// underlying guest instance transparently. Release returns it to the pool.
type Instance struct {
	p *Pool
	s *slot
}

// Acquire takes an instance for exclusive use until Release. It waits while all Size instances
// are taken.
func (p *Pool) Acquire() (*Instance, error) {
	s, err := p.acquire()
	if err != nil {
		return nil, err
	}
	return &Instance{p: p, s: s}, nil
}

// Partition is Pool.Partition on this instance.
func (i *Instance) Partition(key []byte, n int32) (int32, error) {
	if n < 1 {
		return -1, checkN(n)
	}
	if len(key) > MaxKeyBytes {
		return -1, checkKey(key)
	}
	if in := i.s.in; in != nil && !in.broken {
		return in.partition(key, n) // Pool.ready's fast path, without its call
	}
	return i.p.partition(i.s, key, n)
}

// PartitionBatch is Pool.PartitionBatch on this instance.
func (i *Instance) PartitionBatch(keys [][]byte, n int32, out []int32) error {
	total, err := checkBatch(keys, n, out)
	if err != nil {
		return err
	}
	return i.p.partitionBatch(i.s, keys, n, out, total)
}

// Release returns the instance to its pool. The Instance must not be used afterwards.
func (i *Instance) Release() {
	if i.s != nil {
		i.p.release(i.s)
		i.s = nil
	}
}

// Ancestry returns the parents the module declares for child when the partition count changes
// from fromN to toN (spec/abi-v1.md §2.7). ErrUnsupported means the module declares none for these
// arguments: use another source of ancestry.
func (p *Pool) Ancestry(fromN, toN, child int32) ([]Range, error) {
	if err := checkN(fromN); err != nil {
		return nil, err
	}
	if err := checkN(toN); err != nil {
		return nil, err
	}
	if child < 0 || child >= toN {
		return nil, fmt.Errorf("runtime: Ancestry: child %d is not a partition of %d", child, toN)
	}
	s, err := p.acquire()
	if err != nil {
		return nil, err
	}
	defer p.release(s)
	in, err := p.ready(s)
	if err != nil {
		return nil, err
	}
	return in.ancestry(fromN, toN, child)
}

// MemoryPages returns the current size of the instance's linear memory, in 64 KiB pages
// (conformance reports the peak).
func (i *Instance) MemoryPages() uint32 {
	in, err := i.p.ready(i.s)
	if err != nil {
		return 0
	}
	return in.mem.Size() / 65536
}

// WorkUsed returns the work units (fuel) the instance's last call spent: a deterministic measure
// of its cost, the same on every engine. It returns -1 for an unguarded runtime and after a call
// that stopped (a trap or a limit): spec/abi-v1.md §7.2 defines the work of calls that return.
func (i *Instance) WorkUsed() int64 {
	in := i.s.in
	if in == nil || in.fuel == nil || in.broken {
		return -1
	}
	return i.p.m.rt.cfg.Fuel - int64(in.fuel.Get())
}
