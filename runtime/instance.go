package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Range is a half-open range [Lo, Hi) of partitions, as pctl_ancestry declares them.
type Range struct{ Lo, Hi int32 }

// instance is one instantiated module, prepared per spec/abi-v1.md §3. It is not goroutine-safe:
// a Pool hands it to one caller at a time.
type instance struct {
	m           *Module
	mod         api.Module
	mem         api.Memory
	fuel        api.MutableGlobal
	depth       api.Global
	memFail     api.Global
	fnPartition api.Function
	fnBatch     api.Function
	fnAncestry  api.Function
	ctx         context.Context // carries ws to the WASI host functions
	ws          *wasiState

	buf, bufSize uint32
	view         []byte // the buffer, aliasing guest memory; valid while memory keeps viewMem bytes
	viewMem      uint32
	viewFixed    bool // view is taken and the module has no memory.grow: it stays valid
	stack        [3]uint64

	broken         bool // trapped or hit a limit: must be replaced
	wasiRegistered bool
}

func (in *instance) close(ctx context.Context) {
	if in.wasiRegistered {
		wasiStates.Delete(in.mod)
	}
	if in.mod != nil {
		_ = in.mod.Close(ctx)
	}
}

// refreshView re-derives the buffer slice if guest memory grew (growing may move wazero's
// backing array; guest addresses stay the same). A module without memory.grow cannot grow its
// memory (the host never does), so its view, once taken, needs no check: that saves an interface
// call into wazero on every crossing.
func (in *instance) refreshView() {
	if in.viewFixed {
		return
	}
	if sz := in.mem.Size(); sz != in.viewMem || in.view == nil {
		in.view, _ = in.mem.Read(in.buf, in.bufSize)
		in.viewMem = sz
	}
	in.viewFixed = in.view != nil && !in.m.growsMemory
}

// copyShort and copyKey are copy(dst, src) for len(dst) >= len(src), for keys. Short keys, the
// common case in partitioning, are copied as overlapping words instead of through
// runtime.memmove (the memmove call was a tenth of the host's time per 16-byte key in the batch
// path). copyShort, small enough to be inlined, copies keys of 8 to 16 bytes and says whether it
// did; the call sites fall back to copyKey, which copies any key.
func copyShort(dst, src []byte) bool {
	n := len(src)
	if uint(n-8) > 8 {
		return false
	}
	*(*[8]byte)(dst) = *(*[8]byte)(src)
	*(*[8]byte)(dst[n-8:]) = *(*[8]byte)(src[n-8:])
	return true
}

func copyKey(dst, src []byte) {
	n := len(src)
	switch {
	case n > 32:
		copy(dst, src)
	case n > 16:
		*(*[16]byte)(dst) = *(*[16]byte)(src)
		*(*[16]byte)(dst[n-16:]) = *(*[16]byte)(src[n-16:])
	case n >= 8:
		*(*[8]byte)(dst) = *(*[8]byte)(src)
		*(*[8]byte)(dst[n-8:]) = *(*[8]byte)(src[n-8:])
	case n >= 4:
		*(*[4]byte)(dst) = *(*[4]byte)(src)
		*(*[4]byte)(dst[n-4:]) = *(*[4]byte)(src[n-4:])
	default:
		d := dst[:n]
		for i := range d {
			d[i] = src[i]
		}
	}
}

var le = binary.LittleEndian

func (in *instance) call(op string, fn api.Function) ([]uint64, error) {
	if err := fn.CallWithStack(in.ctx, in.stack[:1]); err != nil {
		return nil, in.fail(op, err)
	}
	return in.stack[:1], nil
}

func (in *instance) call1(op string, fn api.Function, arg uint64) ([]uint64, error) {
	in.stack[0] = arg
	if err := fn.CallWithStack(in.ctx, in.stack[:1]); err != nil {
		return nil, in.fail(op, err)
	}
	return in.stack[:1], nil
}

// partition is the single-key path: one copy into guest memory, one call, no allocation.
// The caller guarantees 1 <= n and len(key) <= MaxKeyBytes (<= bufSize).
func (in *instance) partition(key []byte, n int32) (int32, error) {
	if !in.viewFixed {
		in.refreshView()
	}
	if !copyShort(in.view, key) {
		copyKey(in.view, key)
	}
	in.stack[0] = uint64(len(key))
	in.stack[1] = uint64(uint32(n))
	if err := in.fnPartition.CallWithStack(in.ctx, in.stack[:2]); err != nil {
		return -1, in.fail("pctl_partition", err)
	}
	r := uint32(in.stack[0])
	if r < uint32(n) { // 0 <= r < n, as n >= 1
		return int32(r), nil
	}
	return -1, in.resultError("pctl_partition", int32(r), n, -1)
}

// batch computes len(keys) partitions in one crossing. The caller guarantees that the keys fit:
// 4*len(keys)+sum(len) <= bufSize and len(keys) <= MaxBatchKeys.
func (in *instance) batch(keys [][]byte, n int32, out []int32) error {
	if in.fnBatch == nil {
		for i, k := range keys {
			r, err := in.partition(k, n)
			if err != nil {
				var ce *CallError
				if errors.As(err, &ce) {
					ce.Detail = fmt.Sprintf("key %d of the batch: %s", i, ce.Detail)
				}
				return err
			}
			out[i] = r
		}
		return nil
	}
	if !in.viewFixed {
		in.refreshView()
	}
	layBatch(in.view, keys)
	in.stack[0] = uint64(len(keys))
	in.stack[1] = uint64(uint32(n))
	if err := in.fnBatch.CallWithStack(in.ctx, in.stack[:2]); err != nil {
		return in.fail("pctl_partition_batch", err)
	}
	if status := int32(uint32(in.stack[0])); status != 0 {
		return in.resultError("pctl_partition_batch", status, n, -1)
	}
	if !in.viewFixed {
		in.refreshView()
	}
	if i := readBatch(in.view, n, out[:len(keys)]); i >= 0 {
		return in.resultError("pctl_partition_batch", int32(le.Uint32(in.view[4*i:])), n, i)
	}
	return nil
}

// layBatch writes the layout of spec/abi-v1.md §2.4 at the start of v: len(keys) little-endian
// u32 lengths, then the keys back to back. It is the batch path's one pass over the keys, so it
// is written for 16-byte keys: stores through pointers instead of slices (the slice version
// re-derived and bounds-checked three slices per key and kept its loop state on the stack),
// keys of 8 to 16 bytes as two overlapping words, others by copyKey. It stays memory-safe
// without the caller's guarantee (4*len(keys)+sum(len) <= len(v)): before it writes key i and
// its length it checks that the key ends within v (so does the length, which lies before the
// first key), and panics rather than write past v. Pointers are formed only to bytes inside v
// (checkptr, under -race, checks that).
func layBatch(v []byte, keys [][]byte) {
	base := unsafe.Pointer(unsafe.SliceData(v))
	off := 4 * len(keys)
	for i, k := range keys {
		n := len(k)
		if n > len(v)-off {
			panic("runtime: layBatch: the batch does not fit the buffer")
		}
		le.PutUint32((*[4]byte)(unsafe.Add(base, 4*i))[:], uint32(n))
		if uint(n-8) <= 8 {
			src := unsafe.Pointer(unsafe.SliceData(k))
			dst := unsafe.Add(base, off)
			*(*[8]byte)(dst) = *(*[8]byte)(src)
			*(*[8]byte)(unsafe.Add(dst, n-8)) = *(*[8]byte)(unsafe.Add(src, n-8))
		} else {
			copyKey(v[off:off+n], k)
		}
		off += n
	}
}

// readBatch copies the results of a batch (where layBatch wrote the lengths, RATIONALE: "Why do
// batch results overwrite the lengths?") into out and returns -1, or the index of the first
// result outside [0, n) (n >= 1), with out written up to it.
func readBatch(v []byte, n int32, out []int32) int {
	res := v[:4*len(out)]
	for i := range out {
		r := le.Uint32(res)
		res = res[4:]
		if r >= uint32(n) { // r < 0 or r >= n, as n >= 1
			return i
		}
		out[i] = int32(r)
	}
	return -1
}

func (in *instance) ancestry(fromN, toN, child int32) ([]Range, error) {
	if in.fnAncestry == nil {
		return nil, &CallError{Digest: in.m.Digest, Name: in.m.displayName(), Op: "pctl_ancestry", Err: ErrUnsupported, Detail: "the module does not export pctl_ancestry"}
	}
	in.stack[0] = uint64(uint32(fromN))
	in.stack[1] = uint64(uint32(toN))
	in.stack[2] = uint64(uint32(child))
	if err := in.fnAncestry.CallWithStack(in.ctx, in.stack[:3]); err != nil {
		return nil, in.fail("pctl_ancestry", err)
	}
	count := int32(uint32(in.stack[0]))
	if count < 0 {
		if count == CodeUnsupported || count == CodeBuffer {
			return nil, &CallError{Digest: in.m.Digest, Name: in.m.displayName(), Op: "pctl_ancestry", Err: ErrUnsupported, Code: count, Detail: fmt.Sprintf("declined for from_n=%d to_n=%d child=%d (%s)", fromN, toN, child, CodeName(count))}
		}
		return nil, &CallError{Digest: in.m.Digest, Name: in.m.displayName(), Op: "pctl_ancestry", Err: ErrPluginCode, Code: count}
	}
	if count > MaxAncestryRanges {
		return nil, &CallError{Digest: in.m.Digest, Name: in.m.displayName(), Op: "pctl_ancestry", Err: ErrOutOfRange, Detail: fmt.Sprintf("returned %d ranges; at most %d are allowed (spec/abi-v1.md §2.7)", count, MaxAncestryRanges)}
	}
	in.refreshView()
	out := make([]Range, count)
	prevHi := int64(-1)
	for i := range out {
		lo := binary.LittleEndian.Uint32(in.view[8*i:])
		hi := binary.LittleEndian.Uint32(in.view[8*i+4:])
		if lo >= hi || hi > uint32(fromN) || int64(lo) < prevHi {
			return nil, &CallError{Digest: in.m.Digest, Name: in.m.displayName(), Op: "pctl_ancestry", Err: ErrOutOfRange,
				Detail: fmt.Sprintf("range %d is [%d, %d): ranges must be non-empty, sorted, disjoint and within [0, from_n=%d) (spec/abi-v1.md §2.7)", i, lo, hi, fromN)}
		}
		prevHi = int64(hi)
		out[i] = Range{int32(lo), int32(hi)}
	}
	return out, nil
}

func (in *instance) resultError(op string, r, n int32, index int) error {
	in.broken = in.broken || r >= n // a module that returns garbage may be in a bad state
	e := &CallError{Digest: in.m.Digest, Name: in.m.displayName(), Op: op}
	where := ""
	if index >= 0 {
		where = fmt.Sprintf("key %d of the batch: ", index)
	}
	if r >= n {
		e.Err = ErrOutOfRange
		e.Detail = fmt.Sprintf("%sreturned %d for n=%d; a partition must be in [0, n)", where, r, n)
		return e
	}
	e.Err = ErrPluginCode
	e.Code = r
	if where != "" {
		e.Detail = strings.TrimSuffix(where, ": ")
	}
	return e
}

// fail classifies an error of CallWithStack and marks the instance for replacement.
func (in *instance) fail(op string, err error) error {
	in.broken = true
	cfg := &in.m.rt.cfg
	e := &CallError{Digest: in.m.Digest, Name: in.m.displayName(), Op: op}
	var exit *sys.ExitError
	switch {
	case errors.As(err, &exit):
		e.Err = ErrExit
		e.Detail = fmt.Sprintf("proc_exit(%d); a partitioner must return, not exit", exit.ExitCode())
	case in.fuel != nil && int64(in.fuel.Get()) < 0:
		e.Err = ErrTimeLimit
		budget := cfg.Fuel
		if op == "start" || op == "_initialize" {
			budget = cfg.InitFuel
		}
		e.Detail = fmt.Sprintf("used its whole work budget of %d units (spec/abi-v1.md §7.2, about %v of work): it loops forever, does unbounded work or is far too slow for a partitioner", budget, fuelTime(budget))
	case (in.depth != nil && uint32(in.depth.Get()) > cfg.MaxCallDepth) || strings.Contains(err.Error(), "stack overflow"):
		e.Err = ErrCallDepth
		e.Detail = fmt.Sprintf("nested more than %d calls (unbounded recursion?)", cfg.MaxCallDepth)
	case (in.memFail != nil && in.memFail.Get() != 0) || in.mem.Size() >= cfg.MaxMemoryPages*65536:
		e.Err = ErrMemoryLimit
		e.Detail = fmt.Sprintf("trapped after memory.grow was refused at %d of at most %d pages (%d MiB): %v", in.mem.Size()/65536, cfg.MaxMemoryPages, cfg.MaxMemoryPages/16, firstLine(err))
	default:
		e.Err = ErrTrap
		e.Detail = firstLine(err)
	}
	return e
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
