package conformance

import (
	"fmt"
	"math"
	"strings"
)

// balanceNs are the partition counts whose histograms balance tests (all in rangeNs).
var balanceNs = []int32{7, 16, 100}

// Balance thresholds: a p-value below balanceWarnP (for a uniform hash, a one-in-a-million
// event per n) warns; fewer than minExpected keys per partition skips that n, where the
// chi-square approximation is poor.
const (
	balanceWarnP = 1e-6
	minExpected  = 5
)

// BalanceDetails is the Details of the balance check: one entry per n.
type BalanceDetails struct {
	Tests []BalanceTest `json:"tests"`
}

// BalanceTest is Pearson's chi-square test of the partition histogram of the random keys against
// the uniform distribution. P is the probability that a uniform hash gives a chi-square at least
// this large (Wilson-Hilferty approximation).
type BalanceTest struct {
	N         int32   `json:"n"`
	Keys      int     `json:"keys"`
	ChiSquare float64 `json:"chi_square"`
	DF        int     `json:"df"`
	P         float64 `json:"p"`
	MinCount  int     `json:"min_count"`
	MaxCount  int     `json:"max_count"`
	Skipped   bool    `json:"skipped,omitempty"`
}

// checkBalance warns when partitions are far from equally used by random keys. Balance is not
// part of the ABI (a partitioner may place keys however it likes), so it never fails.
func (c *checker) checkBalance() (Result, error) {
	if !c.rangeOK {
		return skipAfterRange(CheckBalance), nil
	}
	var det BalanceDetails
	var bad, good []string
	minP := 1.0
	for _, n := range balanceNs {
		res := c.results[rangeIndex(n)][c.keys.fixed:]
		t := BalanceTest{N: n, Keys: len(res), DF: int(n) - 1}
		if float64(len(res))/float64(n) < minExpected {
			t.Skipped = true
			det.Tests = append(det.Tests, t)
			continue
		}
		counts := make([]int, n)
		for _, r := range res {
			counts[r]++
		}
		t.ChiSquare, t.MinCount, t.MaxCount = chiSquare(counts, len(res))
		t.P = chiSquareSurvival(t.ChiSquare, t.DF)
		det.Tests = append(det.Tests, t)
		minP = math.Min(minP, t.P)
		desc := fmt.Sprintf("n=%d", n)
		if t.P < balanceWarnP {
			bad = append(bad, fmt.Sprintf("n=%d (chi-square %.0f, df %d, p%s; partition sizes %d..%d, expected %.0f)", n, t.ChiSquare, t.DF, pText(t.P), t.MinCount, t.MaxCount, float64(len(res))/float64(n)))
		} else {
			good = append(good, desc)
		}
	}
	switch {
	case len(bad) > 0:
		return Result{Name: CheckBalance, Status: StatusWarn, Details: det,
			Reason: "random keys are unevenly spread: " + strings.Join(bad, "; ")}, nil
	case len(good) == 0:
		return Result{Name: CheckBalance, Status: StatusSkip, Details: det,
			Reason: fmt.Sprintf("too few random keys (%d) for a chi-square test; use --keys %d or more", len(c.keys.random()), minExpected*100)}, nil
	}
	return Result{Name: CheckBalance, Status: StatusPass, Details: det,
		Reason: fmt.Sprintf("chi-square over %d random keys: %s; min p=%.2g", len(c.keys.random()), strings.Join(good, ", "), minP)}, nil
}

// chiSquare is Pearson's statistic of counts against a uniform spread of total.
func chiSquare(counts []int, total int) (x2 float64, lo, hi int) {
	e := float64(total) / float64(len(counts))
	lo, hi = counts[0], counts[0]
	for _, o := range counts {
		d := float64(o) - e
		x2 += d * d / e
		lo, hi = min(lo, o), max(hi, o)
	}
	return x2, lo, hi
}

// chiSquareSurvival returns P(X >= x) for X chi-square distributed with k degrees of freedom,
// by the Wilson-Hilferty approximation: (X/k)^(1/3) is nearly normal with mean 1 - 2/(9k) and
// variance 2/(9k). Accurate to a few per cent for k >= 3 in the tails that matter here.
func chiSquareSurvival(x float64, k int) float64 {
	if k < 1 {
		return 1
	}
	if x <= 0 {
		return 1
	}
	v := 2 / (9 * float64(k))
	z := (math.Cbrt(x/float64(k)) - (1 - v)) / math.Sqrt(v)
	return 0.5 * math.Erfc(z/math.Sqrt2)
}

func pText(p float64) string {
	if p < 1e-300 {
		return "<1e-300"
	}
	return fmt.Sprintf("=%.1e", p)
}
