package main

import (
	"context"
	"strings"
	"testing"
)

// 'pctl demo --stateful' is a run of its own (the run itself is examples/stateful's
// TestStatefulScaleOut): combined with --faults or --cluster it is refused with a usage error.
func TestDemoStatefulFlags(t *testing.T) {
	for _, extra := range []string{"--faults", "--cluster"} {
		r := runCLI(context.Background(), nil, nil, "demo", "--stateful", extra)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--stateful is a run of its own") {
			t.Errorf("demo --stateful %s: exit %d, stderr %q", extra, r.code, r.stderr)
		}
	}
	if r := runCLI(context.Background(), nil, nil, "demo", "--warmup"); r.code != exitUsage || !strings.Contains(r.stderr, "--warmup goes with --stateful") {
		t.Errorf("demo --warmup without --stateful: exit %d, stderr %q", r.code, r.stderr)
	}
}
