package conformance_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRequiredEngines: the engine list TestHosts enforces. A required host that is missing, or
// whose setup or run is not executable, or whose setup failed, is named with the reason; before
// the list existed, TestHosts discovered whatever directories were there and, with every host
// missing, compared wazero with wazero and passed.
func TestRequiredEngines(t *testing.T) {
	root := t.TempDir()
	mk := func(dir, file string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, file), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("node", "setup", 0o755)
	mk("node", "run", 0o755)
	mk("python", "setup", 0o755)
	mk("python", "run", 0o644) // not executable
	mk("extra", "setup", 0o755)
	mk("extra", "run", 0o755)
	if err := os.WriteFile(filepath.Join(root, "README.md"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	hosts, broken := discoverHosts(t, root)
	var names []string
	for _, h := range hosts {
		names = append(names, h.name)
	}
	if !slices.Equal(names, []string{"extra", "node"}) || len(broken) != 1 || !strings.Contains(broken["python"], "run is not an executable file") {
		t.Fatalf("hosts %v, broken %v", names, broken)
	}
	tests := []struct {
		name   string
		ready  []string
		failed map[string]string
		want   []string // substrings, one per missing engine, in requiredEngines order
	}{
		{"all there", []string{"java", "node", "python"}, nil, nil},
		{"extra hosts do not stand in for required ones", []string{"extra", "node", "python"}, nil, []string{"Chicory (Java) (conformance/hosts/java): no such directory"}},
		{"not executable, setup failed, missing", []string{"node"}, map[string]string{"python": broken["python"], "java": "setup failed: exit status 1: mvn: not found"},
			[]string{"wasmtime (Python) (conformance/hosts/python): run is not an executable file", "Chicory (Java) (conformance/hosts/java): setup failed: exit status 1: mvn: not found"}},
		{"none", nil, nil, []string{"V8 (Node.js)", "wasmtime (Python)", "Chicory (Java)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ready []*confHost
			for _, n := range tc.ready {
				ready = append(ready, &confHost{name: n})
			}
			got := missingEngines(ready, tc.failed)
			if len(got) != len(tc.want) {
				t.Fatalf("missing %q, want %d: %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("missing[%d] = %q, want it to say %q", i, got[i], tc.want[i])
				}
			}
		})
	}
	// The list itself: five engines, the two wazero ones in process.
	var all []string
	for _, e := range requiredEngines {
		all = append(all, e.name+"@"+e.host)
	}
	if !slices.Equal(all, []string{"wazero compiler@", "wazero interpreter@", "V8 (Node.js)@node", "wasmtime (Python)@python", "Chicory (Java)@java"}) {
		t.Fatalf("required engines %v", all)
	}
}
