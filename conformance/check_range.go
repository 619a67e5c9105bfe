package conformance

import (
	"errors"
	"fmt"

	"pctl.dev/pctl/runtime"
)

// rangeNs are the partition counts of the range check: the smallest ones, primes, powers of two,
// round numbers and PCTL_MAX_PARTITIONS. Later checks reuse these results, so every n another
// check needs is here.
var rangeNs = []int32{1, 2, 3, 7, 8, 16, 31, 100, 1000, 1024, 65521, 65536, runtime.MaxPartitions}

// rangeIndex returns the position of n in rangeNs.
func rangeIndex(n int32) int {
	for j, m := range rangeNs {
		if m == n {
			return j
		}
	}
	panic(fmt.Sprintf("conformance: n=%d is not among the range check's partition counts", n))
}

// callFailure is a call that did not return a partition.
type callFailure struct {
	key []byte
	n   int32
	err error
}

func (f *callFailure) String() string {
	return fmt.Sprintf("key %s, n=%d: %s", keyDesc(f.key), f.n, callErrText(f.err))
}

func (f *callFailure) details() *CallFailure {
	return &CallFailure{KeyRef: keyRef(f.key), N: f.n, Error: f.err.Error()}
}

// isLimit reports whether a call failed on a host limit of spec/abi-v1.md §7.
func (f *callFailure) isLimit() bool {
	return errors.Is(f.err, runtime.ErrTimeLimit) || errors.Is(f.err, runtime.ErrMemoryLimit) || errors.Is(f.err, runtime.ErrCallDepth)
}

// CallFailure identifies a failed call in Details.
type CallFailure struct {
	KeyRef
	N     int32  `json:"n"`
	Error string `json:"error"` // the runtime's full message
}

// RangeDetails is the Details of the range check.
type RangeDetails struct {
	Partitions  []int32      `json:"partitions"` // the n values
	Keys        int          `json:"keys"`       // keys per n, fixed and random
	FixedKeys   int          `json:"fixed_keys"`
	MaxKeyBytes int          `json:"max_key_bytes"`
	Calls       int          `json:"calls"`
	Failure     *CallFailure `json:"failure,omitempty"`
}

// checkRange calls pctl_partition for every key and every n of rangeNs, one instance, single
// calls: each must return a partition in [0, n), without trap or limit.
func (c *checker) checkRange() (Result, error) {
	det := RangeDetails{Partitions: rangeNs, Keys: len(c.keys.all), FixedKeys: c.keys.fixed, MaxKeyBytes: c.keys.maxLen}
	in, done, err := c.fresh(c.m)
	if err != nil {
		c.rangeFail = &callFailure{key: []byte{}, n: 1, err: err}
		return Result{Name: CheckRange, Status: StatusFail, Reason: "could not create an instance: " + callErrText(err), Details: det}, nil
	}
	c.closers = append(c.closers, done)
	c.reused, c.reusedEnd = in, done

	c.results = make([][]int32, len(rangeNs))
	for j, n := range rangeNs {
		res := make([]int32, len(c.keys.all))
		for i, k := range c.keys.all {
			if err := c.cancelled(det.Calls); err != nil {
				return Result{}, err
			}
			r, err := in.Partition(k, n)
			det.Calls++
			if err != nil {
				c.rangeFail = &callFailure{key: k, n: n, err: err}
				det.Failure = c.rangeFail.details()
				return Result{Name: CheckRange, Status: StatusFail, Reason: c.rangeFail.String(), Details: det}, nil
			}
			res[i] = r
		}
		c.results[j] = res
	}
	c.notePages(in.MemoryPages())
	c.rangeOK = true
	reason := fmt.Sprintf("%d keys (empty, every byte, up to %d bytes, %d random) x %d partition counts (1 to 2^31-1): all in [0, n)",
		len(c.keys.all), c.keys.maxLen, len(c.keys.random()), len(rangeNs))
	return Result{Name: CheckRange, Status: StatusPass, Reason: reason, Details: det}, nil
}

// skipAfterRange is the result of a check that needs working calls when range failed.
func skipAfterRange(name string) Result {
	return Result{Name: name, Status: StatusSkip, Reason: "range failed: calls do not all return partitions (fix that first)"}
}
