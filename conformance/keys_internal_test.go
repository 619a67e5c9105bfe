package conformance

import (
	"bytes"
	"math"
	"testing"
)

func TestKeys(t *testing.T) {
	ks := makeKeys(1000, 1)
	if len(ks.random()) != 1000 || ks.fixed != 1+256+1+5+2 || ks.maxLen != 65536 {
		t.Fatalf("%d random, %d fixed, longest %d", len(ks.random()), ks.fixed, ks.maxLen)
	}
	seen := map[string]bool{}
	for _, k := range ks.all {
		if seen[string(k)] {
			t.Fatalf("key %x twice", k)
		}
		seen[string(k)] = true
	}
	if len(ks.all[0]) != 0 {
		t.Fatal("the empty key is not first")
	}
	again := makeKeys(1000, 1)
	other := makeKeys(1000, 2)
	same := 0
	for i := range ks.all {
		if !bytes.Equal(ks.all[i], again.all[i]) {
			t.Fatalf("key %d differs for the same seed", i)
		}
		if bytes.Equal(ks.all[i], other.all[i]) {
			same++
		}
	}
	if same != ks.fixed {
		t.Fatalf("seed 2 shares %d keys with seed 1, want only the %d fixed ones", same, ks.fixed)
	}
}

// TestChiSquareSurvival compares the Wilson-Hilferty approximation with tabulated critical values
// of the chi-square distribution (p = 0.05 and 0.001).
func TestChiSquareSurvival(t *testing.T) {
	for _, tc := range []struct {
		x  float64
		df int
		p  float64
	}{
		{12.592, 6, 0.05}, {22.458, 6, 0.001},
		{24.996, 15, 0.05}, {37.697, 15, 0.001},
		{123.225, 99, 0.05}, {148.230, 99, 0.001},
	} {
		got := chiSquareSurvival(tc.x, tc.df)
		if math.Abs(got-tc.p)/tc.p > 0.1 {
			t.Errorf("P(X >= %v; df %d) = %.4g, want %.4g", tc.x, tc.df, got, tc.p)
		}
	}
	if chiSquareSurvival(0, 6) != 1 || chiSquareSurvival(1e6, 6) > 1e-100 {
		t.Error("tails")
	}
}
