package testhook

import "testing"

func TestStickyCheckOnInTestsOffInBenchmarks(t *testing.T) {
	if !CheckSticky() {
		t.Fatal("the sticky check is off in a test binary: producer tests would not check the machine")
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-test.run=X", "-test.v"}, false},
		{[]string{"-test.bench=."}, true},
		{[]string{"-test.bench", "Producer"}, true},
		{[]string{"--test.bench=Producer"}, true},
		{[]string{"-test.bench="}, false},
	} {
		if got := benchmarking(tc.args); got != tc.want {
			t.Errorf("benchmarking(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
