package main

import (
	"strings"
	"testing"
)

// TestDemo runs the README's first command, small: it must exit 0 with the checker's OK, and show
// the epochs it went through.
func TestDemo(t *testing.T) {
	out, errOut, code := runPctl(t, "", "demo", "--records", "300", "--keys", "50")
	if code != 0 {
		t.Fatalf("pctl demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"OK: per-key order held across 4 epoch changes", "kafka-murmur2", "0 lost, 0 order violations", "member crashed and replaced: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}
