package metrics

import (
	"testing"
	"time"

	"pctl.dev/pctl/internal/produce"
)

// BenchmarkProduceHook is the cost the metrics add per record produced by the produce service
// (or by a client producer given the hook): one call of OnProduceRecordUnbuffered. Compare it
// with the time per record of 'pctl bench produce' (about 10 to 20 µs on this machine).
func BenchmarkProduceHook(b *testing.B) {
	m := New(Options{})
	rec := &produce.Record{Key: []byte("key-1"), Value: make([]byte, 100)}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m.OnProduceRecord("bench", rec, produce.Result{Epoch: 1, Partition: i % 8}, time.Millisecond)
	}
}

// BenchmarkPluginHook is the cost per partition call the metrics add (time, fuel, keys).
func BenchmarkPluginHook(b *testing.B) {
	m := New(Options{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m.OnPluginCall("kafka-murmur2", 1, 300*time.Nanosecond, 1200, nil)
	}
}
