package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"pctl.dev/pctl/runtime"
)

// detNs are the partition counts the determinism runs compare (a subset of rangeNs).
var detNs = []int32{7, 1000, runtime.MaxPartitions}

// The other clock and seed of the clock-and-random run: 2033-05-18T03:33:20Z and a seed far from
// the spec's 0, so that every clock read and random byte differs.
const (
	altWASITime = 2000000000 * 1000000000
	altWASISeed = 0x5eed5eed5eed5eed
)

// interpreterShare: the interpreter is about 30 times slower than the compiler, so it gets a
// thirtieth of the random keys (and all the fixed ones).
const interpreterShare = 30

// Names of the determinism runs, in the order they run; Details lists each.
const (
	RunClockRandom = "clock-and-random"
	RunFresh       = "fresh-instance"
	RunReused      = "reused-instance"
	RunReversed    = "reversed-order"
	RunBatch       = "batch"
	RunInterleaved = "interleaved-metadata-ancestry"
	RunInterpreter = "interpreter"
)

// DeterminismDetails is the Details of the determinism check. Every run is compared with the
// reference: the range check's results (single calls, one fresh instance, compiler).
type DeterminismDetails struct {
	Partitions      []int32          `json:"partitions"`
	Keys            int              `json:"keys"`
	InterpreterKeys int              `json:"interpreter_keys"`
	Runs            []DeterminismRun `json:"runs"`
}

// DeterminismRun is one way of computing the same results.
type DeterminismRun struct {
	Name     string       `json:"name"`
	Status   Status       `json:"status"` // pass, fail or skip
	Calls    int          `json:"calls"`
	Reason   string       `json:"reason,omitempty"`
	Mismatch *Mismatch    `json:"mismatch,omitempty"`
	Failure  *CallFailure `json:"failure,omitempty"`
}

// Mismatch is a key whose result differs from the reference.
type Mismatch struct {
	KeyRef
	N         int32 `json:"n"`
	Reference int32 `json:"reference"`
	Got       int32 `json:"got"`
}

func (r *DeterminismRun) mismatch(k []byte, n, ref, got int32, format string, args ...any) {
	r.Status = StatusFail
	r.Mismatch = &Mismatch{KeyRef: keyRef(k), N: n, Reference: ref, Got: got}
	r.Reason = fmt.Sprintf("key %s, n=%d: ", keyDesc(k), n) + fmt.Sprintf(format, args...)
}

func (r *DeterminismRun) failed(what string, k []byte, n int32, err error) {
	r.Status = StatusFail
	f := &callFailure{key: k, n: n, err: err}
	r.Failure = f.details()
	r.Reason = what + ": " + f.String()
}

// ref returns the reference result of key i among n.
func (c *checker) ref(n int32, i int) int32 { return c.results[rangeIndex(n)][i] }

// checkDeterminism computes the results again in every way a host may compute them and requires
// the same answer each time (spec/abi-v1.md §1: the result depends only on key, n and config).
func (c *checker) checkDeterminism() (Result, error) {
	if !c.rangeOK {
		return skipAfterRange(CheckDeterminism), nil
	}
	det := DeterminismDetails{Partitions: detNs, Keys: len(c.keys.all), InterpreterKeys: c.interpreterKeys()}
	runs := []func() (DeterminismRun, error){c.runClockRandom, c.runFresh, c.runReused, c.runReversed, c.runBatch, c.runInterleaved, c.runInterpreter}
	for _, run := range runs {
		r, err := run()
		if err != nil {
			return Result{}, err
		}
		det.Runs = append(det.Runs, r)
	}
	var ran []string
	for _, r := range det.Runs {
		if r.Status == StatusFail {
			return Result{Name: CheckDeterminism, Status: StatusFail, Reason: oneLine(r.Reason), Details: det}, nil
		}
		if r.Status == StatusPass {
			ran = append(ran, r.Name)
		}
	}
	reason := fmt.Sprintf("%d runs agree with the reference (%s)", len(ran), strings.Join(ran, ", "))
	return Result{Name: CheckDeterminism, Status: StatusPass, Reason: reason, Details: det}, nil
}

func (c *checker) interpreterKeys() int {
	return c.keys.fixed + min(len(c.keys.random()), max(100, len(c.keys.random())/interpreterShare))
}

// runClockRandom replays the range check's exact calls on a fresh instance of a runtime whose
// WASI clock and random stream differ from the spec's. Same calls, same order, fresh instance:
// a difference can only come from the clock or the random stream.
func (c *checker) runClockRandom() (DeterminismRun, error) {
	run := DeterminismRun{Name: RunClockRandom, Status: StatusPass}
	if c.m.Profile != runtime.ProfileWASIDeterministic {
		run.Status, run.Reason = StatusSkip, "portable module: it has no clock or random stream"
		return run, nil
	}
	rt, err := c.newRuntime(runtime.Config{WASITime: altWASITime, WASISeed: altWASISeed})
	if err != nil {
		return run, err
	}
	m, err := rt.Load(c.ctx, c.wasm)
	if err != nil {
		run.Status, run.Reason = StatusFail, "does not load with another clock and random seed: "+callErrText(err)
		return run, c.ctx.Err()
	}
	in, done, err := c.fresh(m)
	if err != nil {
		run.Status, run.Reason = StatusFail, "no instance with another clock and random seed: "+callErrText(err)
		return run, c.ctx.Err()
	}
	defer done()
	for j, n := range rangeNs {
		for i, k := range c.keys.all {
			if err := c.cancelled(run.Calls); err != nil {
				return run, err
			}
			r, err := in.Partition(k, n)
			run.Calls++
			if err != nil {
				run.failed("fails with another clock and random seed", k, n, err)
				return run, nil
			}
			if want := c.results[j][i]; r != want {
				run.mismatch(k, n, want, r, "result depends on the clock/random stream: %d with the spec's clock and seed, %d with another (same calls, fresh instances)", want, r)
				return run, nil
			}
		}
	}
	return run, nil
}

// freshSamples is how many keys runFresh checks, each on its own new instance.
const freshSamples = 12

// runFresh asks sampled keys, each as the first call of a brand-new instance.
func (c *checker) runFresh() (DeterminismRun, error) {
	run := DeterminismRun{Name: RunFresh, Status: StatusPass}
	const n = 1000
	all := c.keys.all
	for s := 1; s <= freshSamples; s++ {
		i := s * (len(all) - 1) / freshSamples // spread over the keys; index 0 was range's own first call
		in, done, err := c.fresh(c.m)
		if err != nil {
			run.Status, run.Reason = StatusFail, "cannot create another instance: "+callErrText(err)
			return run, c.ctx.Err()
		}
		r, err := in.Partition(all[i], n)
		done()
		run.Calls++
		if err != nil {
			run.failed("fails as the first call of an instance", all[i], n, err)
			return run, nil
		}
		if want := c.ref(n, i); r != want {
			run.mismatch(all[i], n, want, r, "result depends on call history: %d as the first call of a fresh instance, %d after %d earlier calls", r, want, rangeIndex(n)*len(all)+i)
			return run, nil
		}
	}
	return run, nil
}

// runReused asks again, on the range check's instance, after all its calls.
func (c *checker) runReused() (DeterminismRun, error) {
	run := DeterminismRun{Name: RunReused, Status: StatusPass}
	in := c.reused
	before := len(rangeNs) * len(c.keys.all)
	defer c.reusedEnd()
	for _, n := range detNs {
		for i, k := range c.keys.all {
			if err := c.cancelled(run.Calls); err != nil {
				return run, err
			}
			r, err := in.Partition(k, n)
			run.Calls++
			if err != nil {
				run.failed(fmt.Sprintf("fails on an instance reused for %d calls", before+run.Calls), k, n, err)
				return run, nil
			}
			if want := c.ref(n, i); r != want {
				run.mismatch(k, n, want, r, "result changes as an instance is reused: %d, then %d after %d more calls", want, r, before+run.Calls)
				return run, nil
			}
		}
	}
	return run, nil
}

// runReversed asks in the reverse order (n descending, keys descending) on a fresh instance.
func (c *checker) runReversed() (DeterminismRun, error) {
	run := DeterminismRun{Name: RunReversed, Status: StatusPass}
	in, done, err := c.fresh(c.m)
	if err != nil {
		run.Status, run.Reason = StatusFail, "cannot create another instance: "+callErrText(err)
		return run, c.ctx.Err()
	}
	defer done()
	all := c.keys.all
	for j := len(detNs) - 1; j >= 0; j-- {
		n := detNs[j]
		for i := len(all) - 1; i >= 0; i-- {
			if err := c.cancelled(run.Calls); err != nil {
				return run, err
			}
			r, err := in.Partition(all[i], n)
			run.Calls++
			if err != nil {
				run.failed("fails in reverse call order", all[i], n, err)
				return run, nil
			}
			if want := c.ref(n, i); r != want {
				run.mismatch(all[i], n, want, r, "result depends on call order: %d in one order, %d in the reverse", want, r)
				return run, nil
			}
		}
	}
	return run, nil
}

// runBatch computes every result with batch calls (pctl_partition_batch; the runtime's single
// call fallback when the module has none) on a fresh instance.
func (c *checker) runBatch() (DeterminismRun, error) {
	run := DeterminismRun{Name: RunBatch, Status: StatusPass}
	if !c.m.HasBatch {
		run.Reason = "no pctl_partition_batch: hosts use single calls"
	}
	in, done, err := c.fresh(c.m)
	if err != nil {
		run.Status, run.Reason = StatusFail, "cannot create another instance: "+callErrText(err)
		return run, c.ctx.Err()
	}
	defer done()
	all := c.keys.all
	out := make([]int32, len(all))
	for _, n := range detNs {
		if err := c.ctx.Err(); err != nil {
			return run, err
		}
		if err := in.PartitionBatch(all, n, out); err != nil {
			run.Status = StatusFail
			run.Reason = fmt.Sprintf("n=%d: batch call failed where single calls succeed: %s", n, callErrText(err))
			run.Failure = &CallFailure{N: n, Error: err.Error()}
			return run, nil
		}
		run.Calls += len(all)
		for i, r := range out[:len(all)] {
			if want := c.ref(n, i); r != want {
				run.mismatch(all[i], n, want, r, "batch and single calls disagree: %d from a single call, %d from a batch", want, r)
				return run, nil
			}
		}
	}
	return run, nil
}

// interleaveEvery: the interleaved run calls pctl_metadata and pctl_ancestry after every this
// many partition calls.
const interleaveEvery = 7

// runInterleaved asks on a fresh instance with pctl_metadata and pctl_ancestry calls in between;
// neither may change a result, and the metadata document must stay the same (§2.6).
func (c *checker) runInterleaved() (DeterminismRun, error) {
	run := DeterminismRun{Name: RunInterleaved, Status: StatusPass}
	if !c.m.HasMetadata && !c.m.HasAncestry {
		run.Status, run.Reason = StatusSkip, "no pctl_metadata or pctl_ancestry export"
		return run, nil
	}
	in, done, err := c.fresh(c.m)
	if err != nil {
		run.Status, run.Reason = StatusFail, "cannot create another instance: "+callErrText(err)
		return run, c.ctx.Err()
	}
	defer done()
	doc, err := in.Metadata()
	if err != nil {
		run.Status, run.Reason = StatusFail, "pctl_metadata failed on a prepared instance: "+callErrText(err)
		return run, nil
	}
	for _, n := range detNs {
		toN := n/2 + 1
		for i, k := range c.keys.all {
			if err := c.cancelled(run.Calls); err != nil {
				return run, err
			}
			r, err := in.Partition(k, n)
			run.Calls++
			if err != nil {
				run.failed("fails with metadata and ancestry calls in between", k, n, err)
				return run, nil
			}
			if want := c.ref(n, i); r != want {
				run.mismatch(k, n, want, r, "calls to pctl_metadata/pctl_ancestry change results: %d, then %d", want, r)
				return run, nil
			}
			if run.Calls%interleaveEvery != 0 {
				continue
			}
			if c.m.HasMetadata {
				d, err := in.Metadata()
				if err != nil {
					run.Status, run.Reason = StatusFail, fmt.Sprintf("pctl_metadata failed after %d calls: %s", run.Calls, callErrText(err))
					return run, nil
				}
				if !bytes.Equal(d, doc) {
					run.Status, run.Reason = StatusFail, fmt.Sprintf("pctl_metadata returned another document after %d calls (it must return the same one on every call)", run.Calls)
					return run, nil
				}
			}
			if c.m.HasAncestry {
				_, err := in.Ancestry(n, toN, r%toN)
				if err != nil && !errors.Is(err, runtime.ErrUnsupported) {
					run.Status, run.Reason = StatusFail, fmt.Sprintf("pctl_ancestry(%d, %d, %d) failed: %s", n, toN, r%toN, callErrText(err))
					return run, nil
				}
			}
		}
	}
	return run, nil
}

// runInterpreter asks the fixed keys and a share of the random ones on wazero's interpreter.
func (c *checker) runInterpreter() (DeterminismRun, error) {
	run := DeterminismRun{Name: RunInterpreter, Status: StatusPass}
	rt, err := c.newRuntime(runtime.Config{Engine: runtime.EngineInterpreter})
	if err != nil {
		return run, err
	}
	m, err := rt.Load(c.ctx, c.wasm)
	if err != nil {
		run.Status, run.Reason = StatusFail, "the interpreter refuses the module: "+callErrText(err)
		return run, c.ctx.Err()
	}
	in, done, err := c.fresh(m)
	if err != nil {
		run.Status, run.Reason = StatusFail, "no instance on the interpreter: "+callErrText(err)
		return run, c.ctx.Err()
	}
	defer done()
	keys := c.keys.all[:c.interpreterKeys()]
	for _, n := range detNs {
		for i, k := range keys {
			if err := c.cancelled(run.Calls); err != nil {
				return run, err
			}
			r, err := in.Partition(k, n)
			run.Calls++
			if err != nil {
				run.failed("fails on the interpreter", k, n, err)
				return run, nil
			}
			if want := c.ref(n, i); r != want {
				run.mismatch(k, n, want, r, "compiler and interpreter disagree: %d compiled, %d interpreted", want, r)
				return run, nil
			}
		}
	}
	return run, nil
}
