package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Thresholds of the limits check (spec/abi-v1.md §7: conformance warns above 1 ms per call at
// p99 and above half the memory limit; it warns likewise at half the module size limit and at a
// tenth of the per-call work budget, well before a host would stop a call).
const (
	warnCallP99     = time.Millisecond
	warnWorkDivisor = 10
	timedSamples    = 2000 // random keys timed, besides the fixed ones
	warmupCalls     = 64
	maxFailures     = 16 // failed calls after which limits stops measuring
)

// LimitsDetails is the Details of the limits check. Times are wall clock on the machine that ran
// the check; work is the runtime's deterministic count (the same on every engine and machine).
type LimitsDetails struct {
	Calls            int          `json:"calls"`
	TimeP50Ns        int64        `json:"time_p50_ns"`
	TimeP99Ns        int64        `json:"time_p99_ns"`
	TimeMaxNs        int64        `json:"time_max_ns"`
	WorkP99          int64        `json:"work_p99"`
	WorkMax          int64        `json:"work_max"`
	WorkLimit        int64        `json:"work_limit"`
	PeakMemoryPages  uint32       `json:"peak_memory_pages"`
	MemoryLimitPages uint32       `json:"memory_limit_pages"`
	ModuleBytes      int          `json:"module_bytes"`
	ModuleLimitBytes int          `json:"module_limit_bytes"`
	Warnings         []string     `json:"warnings,omitempty"`
	Failure          *CallFailure `json:"failure,omitempty"`
}

// checkLimits measures a sample of single calls (n = 1000): wall time, deterministic work and
// memory. It fails only when a call hits a host limit (here or in range); everything else is at
// most a warning, since speed depends on the machine.
func (c *checker) checkLimits() (Result, error) {
	cfg := c.rt.Config()
	det := LimitsDetails{WorkLimit: cfg.Fuel, MemoryLimitPages: cfg.MaxMemoryPages, ModuleBytes: c.m.Size, ModuleLimitBytes: cfg.MaxModuleBytes}
	if f := c.rangeFail; f != nil && f.isLimit() {
		det.Failure = f.details()
		return Result{Name: CheckLimits, Status: StatusFail, Reason: "a call hit a limit: " + f.String(), Details: det}, nil
	}
	in, done, err := c.fresh(c.m)
	if err != nil {
		return Result{Name: CheckLimits, Status: StatusSkip, Reason: "no instance to measure: " + callErrText(err), Details: det}, c.ctx.Err()
	}
	const n = 1000
	random := c.keys.random()
	sample := append(append([][]byte(nil), c.keys.all[:c.keys.fixed]...), random[:min(len(random), timedSamples)]...)
	for _, k := range random[:min(len(random), warmupCalls)] {
		_, _ = in.Partition(k, n)
	}
	failures := 0
	times := make([]int64, 0, len(sample))
	work := make([]int64, 0, len(sample))
	for i, k := range sample {
		if err := c.cancelled(i); err != nil {
			done()
			return Result{}, err
		}
		t0 := time.Now()
		_, err := in.Partition(k, n)
		d := time.Since(t0)
		det.Calls++
		if err != nil {
			f := &callFailure{key: k, n: n, err: err}
			if f.isLimit() {
				done()
				det.Failure = f.details()
				return Result{Name: CheckLimits, Status: StatusFail, Reason: "a call hit a limit: " + f.String(), Details: det}, nil
			}
			// range reports the failure. Replace the instance here, not in the next timed call,
			// and stop measuring a module whose calls keep failing.
			if failures++; failures == maxFailures {
				done()
				return Result{Name: CheckLimits, Status: StatusSkip, Reason: fmt.Sprintf("%d of %d calls failed, nothing to measure (see range)", failures, det.Calls), Details: det}, nil
			}
			in.MemoryPages()
			continue
		}
		times = append(times, int64(d))
		if w := in.WorkUsed(); w >= 0 {
			work = append(work, w)
		}
	}
	done()
	det.PeakMemoryPages = c.peakPages
	slices.Sort(times)
	slices.Sort(work)
	det.TimeP50Ns, det.TimeP99Ns, det.TimeMaxNs = quantile(times, 0.5), quantile(times, 0.99), times[len(times)-1]
	if len(work) > 0 {
		det.WorkP99, det.WorkMax = quantile(work, 0.99), work[len(work)-1]
	}

	if p99 := time.Duration(det.TimeP99Ns); p99 > warnCallP99 {
		det.Warnings = append(det.Warnings, fmt.Sprintf("p99 %v per call is above %v", p99, warnCallP99))
	}
	if det.WorkMax > det.WorkLimit/warnWorkDivisor {
		det.Warnings = append(det.Warnings, fmt.Sprintf("a call used %.0f%% of the work limit", 100*float64(det.WorkMax)/float64(det.WorkLimit)))
	}
	if det.PeakMemoryPages > det.MemoryLimitPages/2 {
		det.Warnings = append(det.Warnings, fmt.Sprintf("memory grew to %d pages, above half the limit of %d", det.PeakMemoryPages, det.MemoryLimitPages))
	}
	if det.ModuleBytes > det.ModuleLimitBytes/2 {
		det.Warnings = append(det.Warnings, fmt.Sprintf("module is %d bytes, above half the limit of %d", det.ModuleBytes, det.ModuleLimitBytes))
	}
	summary := fmt.Sprintf("p50 %v, p99 %v per call; work max %d of %d; memory %d of %d pages; %d of %d bytes",
		time.Duration(det.TimeP50Ns), time.Duration(det.TimeP99Ns), det.WorkMax, det.WorkLimit,
		det.PeakMemoryPages, det.MemoryLimitPages, det.ModuleBytes, det.ModuleLimitBytes)
	if len(det.Warnings) > 0 {
		return Result{Name: CheckLimits, Status: StatusWarn, Reason: strings.Join(det.Warnings, "; ") + " (" + summary + ")", Details: det}, nil
	}
	return Result{Name: CheckLimits, Status: StatusPass, Reason: summary, Details: det}, nil
}

// quantile returns the q-quantile of sorted values (nearest rank).
func quantile(sorted []int64, q float64) int64 {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
