package client

// ReadBacks reports how many batches p read back after a stream leader change, and how many
// records those reads found above the last sequence the stream info named (spec/protocol.md
// §5.1.2, "the read-back's end").
func ReadBacks(p *Producer) (batches, pastInfo int64) { return p.e.ReadBacks() }
