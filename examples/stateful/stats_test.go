package stateful

import (
	"testing"
	"time"
)

// TestStatsDoesNotWaitForACatchUp: a catch-up holds the index lock across its reads of the
// changelog; Stats must answer meanwhile. It waited behind a crashed member's catch-up stuck in
// nats.go's consumer re-creation, and the scale-out run hung for 17 minutes in CI.
func TestStatsDoesNotWaitForACatchUp(t *testing.T) {
	p := New(nil, "changelog", nil)
	p.idxMu.Lock() // a catch-up reading the changelog
	defer p.idxMu.Unlock()
	done := make(chan Stats, 1)
	go func() { done <- p.Stats() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Stats waited for the index lock that a catch-up holds across network reads")
	}
}
