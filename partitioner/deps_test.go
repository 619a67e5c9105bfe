package partitioner_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoNATSBelowTheBroker keeps DESIGN.md §5's dependency rule: runtime/ and partitioner/ never
// import NATS (nor the broker); they depend on wazero alone.
func TestNoNATSBelowTheBroker(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "pctl.dev/pctl/runtime/...", "pctl.dev/pctl/partitioner/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "nats-io") || strings.HasPrefix(dep, "pctl.dev/pctl/broker") || strings.HasPrefix(dep, "pctl.dev/pctl/client") {
			t.Errorf("runtime/ or partitioner/ depends on %s; keep NATS and the broker above them", dep)
		}
	}
}
