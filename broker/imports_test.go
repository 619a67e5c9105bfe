package broker_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBrokerDoesNotImportClient: the broker, and everything it builds on (its non-test
// dependencies), stays free of the public client package (issue 12): the produce service runs on
// the producer engine (internal/produce), which client.Producer wraps, so nothing the broker
// needs has to be public client API. The check reads the build graph with 'go list -deps'.
func TestBrokerDoesNotImportClient(t *testing.T) {
	for _, pkg := range []string{"pctl.dev/pctl/broker", "pctl.dev/pctl/broker/wire"} {
		if bad := importers(t, pkg, "pctl.dev/pctl/client"); len(bad) > 0 {
			t.Errorf("%s builds on pctl.dev/pctl/client through %s: the broker must not depend on the public client (use internal/produce)", pkg, strings.Join(bad, ", "))
		}
	}
}

// importers returns the packages among pkg and its non-test dependencies that import target
// directly.
func importers(t *testing.T, pkg, target string) []string {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if imp == target {
				bad = append(bad, f[0])
			}
		}
	}
	return bad
}
