package testhook

import (
	"os"
	"testing"
)

func TestStickyCheckOnInTestsOffInBenchmarks(t *testing.T) {
	if !CheckSticky() {
		t.Fatal("the sticky check is off in a test binary: producer tests would not check the machine")
	}
	if v := os.Getenv(CheckStickyEnv); v != "1" {
		t.Fatalf("%s=%q in a test binary: the brokers it starts (the chaos suite's) would not check their produce service", CheckStickyEnv, v)
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
