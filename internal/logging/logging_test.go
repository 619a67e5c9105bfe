package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestLongListsSummarised: a list of 16,384 boundaries (issue 16 saw one line print them all) is
// one short field; a short list is printed whole.
func TestLongListsSummarised(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "json", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]uint64, 16384)
	for i := range b {
		b[i] = uint64(i % 1000)
	}
	l.Info("epoch active", "boundaries", Uints(b), "short", Uints([]uint64{3, 1, 2}), "parts", Ints([]int{5, 6}))
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines, want 1", n)
	}
	if buf.Len() > 400 {
		t.Fatalf("line of %d bytes for 16384 boundaries: %s", buf.Len(), buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	// min 0, max 999, sum = 16 full cycles of 0..999 (16 * 499500 = 7992000) + 0..383 (73536).
	if m["boundaries"] != "n=16384 min=0 max=999 sum=8065536 first=[0 1 2 3 4 5 6 7]..." {
		t.Fatalf("boundaries: %v", m["boundaries"])
	}
	if m["short"] != "[3 1 2]" || m["parts"] != "[5 6]" || m["level"] != "INFO" || m["msg"] != "epoch active" {
		t.Fatalf("fields: %v", m)
	}
}

func TestLevelsAndFormats(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "text", slog.LevelWarn)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("step retried", "topic", "orders")
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, `level=WARN msg="step retried" topic=orders`) {
		t.Fatalf("text: %q", s)
	}
	if _, err := New(&buf, "xml", slog.LevelInfo); err == nil {
		t.Fatal("format xml accepted")
	}
	for _, s := range Levels {
		if _, err := ParseLevel(s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ParseLevel("loud"); err == nil || !strings.Contains(err.Error(), "debug, info, warn or error") {
		t.Fatalf("ParseLevel(loud): %v", err)
	}
}

func TestLogf(t *testing.T) {
	var lines []string
	l := Logf(func(f string, a ...any) { lines = append(lines, strings.TrimSpace(f+" "+a[0].(string))) })
	l.With("topic", "t1").Warn("stuck step", "step", "fence", "err", "node down")
	l.Debug("dropped")
	if len(lines) != 1 || lines[0] != `%s WARN stuck step topic=t1 step=fence err="node down"` {
		t.Fatalf("lines: %q", lines)
	}
}
