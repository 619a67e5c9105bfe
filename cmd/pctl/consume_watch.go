package main

import (
	"sync"
	"sync/atomic"
	"time"

	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/progress"
)

// consumeWatch shows a member's progress on a terminal: records delivered, the rate, the
// partitions it holds and the records held at the epoch gate (client hooks).
type consumeWatch struct {
	bar    *progress.Bar
	gated  atomic.Int64
	mu     sync.Mutex
	owned  map[int]bool
	finish func()
}

func newConsumeWatch(e *env) *consumeWatch {
	w := &consumeWatch{bar: progress.New(e.stderr, e.getenv, -1, "consuming", "records"), owned: map[int]bool{}}
	var once sync.Once
	w.finish = func() { once.Do(w.bar.Finish) }
	return w
}

func (w *consumeWatch) describe() {
	w.mu.Lock()
	n := len(w.owned)
	w.mu.Unlock()
	w.bar.Describe("consuming: %d partition(s), %d record(s) waited at the epoch gate", n, w.gated.Load())
}

// OnConsumeRecord implements client.HookConsumeRecord.
func (w *consumeWatch) OnConsumeRecord(string, string, *client.Message, time.Duration) { w.bar.Add(1) }

// OnGateWait implements client.HookGateWait.
func (w *consumeWatch) OnGateWait(string, string, int, int, time.Duration) {
	w.gated.Add(1)
	w.describe()
}

// OnLeaseChange implements client.HookLeaseChange.
func (w *consumeWatch) OnLeaseChange(_, _, _ string, partition int, acquired bool) {
	w.mu.Lock()
	if acquired {
		w.owned[partition] = true
	} else {
		delete(w.owned, partition)
	}
	w.mu.Unlock()
	w.describe()
}

var (
	_ client.HookConsumeRecord = (*consumeWatch)(nil)
	_ client.HookGateWait      = (*consumeWatch)(nil)
	_ client.HookLeaseChange   = (*consumeWatch)(nil)
)
