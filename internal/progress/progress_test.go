package progress

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func env(v string) func(string) string {
	return func(k string) string {
		if k == "PCTL_PROGRESS" {
			return v
		}
		return ""
	}
}

// TestQuietUnlessTerminal: a pipe or a buffer gets nothing (nil Bar, every method a no-op);
// PCTL_PROGRESS=always shows the count and the description anyway.
func TestQuietUnlessTerminal(t *testing.T) {
	var buf bytes.Buffer
	if b := New(&buf, env(""), -1, "producing", "records"); b != nil {
		t.Fatal("progress on a buffer")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if Enabled(w, env("")) {
		t.Fatal("a pipe is not a terminal")
	}
	var nilBar *Bar
	nilBar.Add(1)
	nilBar.Describe("x")
	nilBar.Printf("x")
	nilBar.Finish()

	b := New(&buf, env("always"), 10, "conformance", "checks")
	b.Describe("conformance: range")
	time.Sleep(250 * time.Millisecond) // renders are throttled to one per 200ms
	b.Set(4)
	b.Finish()
	b.Finish()
	if s := buf.String(); !strings.Contains(s, "conformance: range") || !strings.Contains(s, "4/10") {
		t.Fatalf("progress output %q", s)
	}
	if New(&buf, env("never"), 1, "x", "y") != nil {
		t.Fatal("PCTL_PROGRESS=never shows progress")
	}
}
