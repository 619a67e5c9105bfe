package proto

import "testing"

// BenchmarkStickyCheckRecord is the sticky machine's cost per record on the producer's clean
// path (produced, the sink's Next, transmitted, acknowledged), 8 partitions: what the producer
// now pays in production for taking its decisions from the machine.
//
//	go test -run '^$' -bench StickyCheckRecord ./internal/proto/
func BenchmarkStickyCheckRecord(b *testing.B) {
	c := NewStickyCheck(1, func(msg string) { b.Fatal(msg) })
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		seq := uint64(i + 1)
		id := SinkID{1, i % 8}
		c.Produce(seq, 1, id.Partition)
		if next, _ := c.Next(id); next != seq {
			b.Fatalf("next %d; want %d", next, seq)
		}
		c.Transmit(seq, id)
		c.Acked(id, seq)
	}
}
