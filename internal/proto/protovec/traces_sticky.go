package protovec

// The sticky-ambiguity traces (spec/protocol.md §5.1.2, "Sticky ambiguity"). Every expected
// action below is written by hand from that text.

// stickyTopic: epoch 1 with 2 partitions is current; the traces' new_epoch events make epoch 2
// (3 partitions) current.
var stickyTopic = Topic{Epochs: []Epoch{{Epoch: 1, Partitions: 2}}}

// stickyF: k1 is in partition 0 in epoch 1 and moves to 2 in epoch 2; k2 stays in 1; k3 stays in
// 0 (the same partition as k1 in epoch 1, so a different key in the ambiguous sink).
var stickyF = []F{
	{1, k1, 0}, {2, k1, 2},
	{1, k2, 1}, {2, k2, 1},
	{1, k3, 0}, {2, k3, 0},
}

func produce(seq uint64, key string) Event {
	return Event{Produce: &ProducerRecord{Seq: seq, KeyHex: key}}
}
func acked(seqs ...uint64) Event { return Event{Acked: &Seqs{Seqs: seqs}} }
func anomaly(epoch, q int) Event { return Event{Anomaly: &SinkRef{Epoch: epoch, Partition: q}} }
func settled(epoch, q int, stored ...uint64) Event {
	if stored == nil {
		stored = []uint64{}
	}
	return Event{Settled: &SettledIn{Epoch: epoch, Partition: q, Stored: stored}}
}
func newEpoch(e int) Event { return Event{NewEpoch: &EpochRef{Epoch: e}} }

// sends builds a StickyOut that transmits (seq, epoch, partition) triples.
func sends(v ...int) StickyOut {
	var o StickyOut
	for i := 0; i+2 < len(v); i += 3 {
		o.Send = append(o.Send, Placed{Seq: uint64(v[i]), Epoch: v[i+1], Partition: v[i+2]})
	}
	return o
}

var nothing = StickyOut{}

// stickyTrace is a trace of the sticky machine on stickyTopic and stickyF.
func stickyTrace(name, doc string, steps ...Step) Trace {
	return Trace{Name: name, Doc: doc, Topic: stickyTopic, F: stickyF, Steps: steps}
}

// then is a step: an event and the actions expected.
func then(e Event, want StickyOut) Step { return Step{Event: e, Expect: want} }

// sendsAcked is sends with these records acknowledged too.
func sendsAcked(acked []uint64, v ...int) StickyOut {
	o := sends(v...)
	o.Acked = acked
	return o
}

func ackedOut(seqs ...uint64) StickyOut { return StickyOut{Acked: seqs} }

func sticky() File {
	return File{
		Rule: "sticky-ambiguity", Role: "producer", Section: "5.1.2",
		Title: "Sticky ambiguity: an ambiguous record is settled in its own epoch and partition before it or any later record moves",
		Doc: "A record is ambiguous from the anomaly that leaves its fate unknown until settling decides it: stored, or not stored. The ambiguity " +
			"sticks to the record's (epoch, partition): while it lasts, the sink sends nothing more (no later record of the record's key, nor of any " +
			"other key, is stored in that partition ahead of it); no record the sink holds, the ambiguous one or any later one, is sent to another " +
			"partition or another epoch until the sink has settled: after a fence or a newer epoch the producer collects every sink's records only " +
			"once that sink settled, then re-sends them in their original send order, before any record sent later. A record settled as stored is " +
			"acknowledged where it is; only a record settled as not stored moves, ahead of every record sent after it. A producer must not end an " +
			"ambiguity by re-sending elsewhere on a timeout; when it is closed, unsettled records fail as unavailable. Other partitions' sinks of " +
			"the same epoch are not held back.",
		Traces: []Trace{
			stickyTrace("the-key-moves-only-after-its-ambiguous-record-settled-in-the-old-partition",
				"k1's record 1 is ambiguous in (1, 0); epoch 2 moves k1 to partition 2. Record 2 (produced before the fence) and 3 (after) wait; a timeout moves nothing; once (1, 0) settles record 1 as not stored, 1, 2, 3 go to (2, 2) in send order.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(produce(2, k1), nothing),
				then(newEpoch(2), nothing),
				then(produce(3, k1), nothing),
				then(anomaly(1, 0), nothing),
				then(settled(1, 0), sends(1, 2, 2, 2, 2, 2, 3, 2, 2)),
			),
			stickyTrace("a-fence-in-the-middle-of-a-batch-makes-it-ambiguous",
				"Records 1 and 2 of k1 are in flight in (1, 0) when epoch 2 is current: both are ambiguous, nothing moves until the sink settled; 1 was stored (acknowledged where it is, never re-sent), 2 was not and goes to k1's new partition.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(produce(2, k1), sends(2, 1, 0)),
				then(newEpoch(2), nothing),
				then(settled(1, 0, 1), sendsAcked([]uint64{1}, 2, 2, 2)),
			),
			stickyTrace("settled-as-stored-it-is-acknowledged-where-it-is",
				"Record 1 is acknowledged cleanly; 2 is ambiguous in (1, 0) and 3 of the same key waits behind it. Settled as stored, 2 is acknowledged (never sent again) and 3 goes on in (1, 0).",
				then(produce(1, k1), sends(1, 1, 0)),
				then(produce(2, k1), sends(2, 1, 0)),
				then(acked(1), ackedOut(1)),
				then(anomaly(1, 0), nothing),
				then(produce(3, k1), nothing),
				then(settled(1, 0, 2), sendsAcked([]uint64{2}, 3, 1, 0)),
			),
			stickyTrace("settled-as-not-stored-it-is-re-sent-in-its-own-partition-first",
				"Records 1 (k1) and 2 (k3) are ambiguous in (1, 0); k1's 3 and k3's 4 wait: a different key in the same partition is held back too. Settled as not stored in the current epoch, 1 and 2 are re-sent in (1, 0) ahead of 3 and 4.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(produce(2, k3), sends(2, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(produce(3, k1), nothing),
				then(produce(4, k3), nothing),
				then(settled(1, 0), sends(1, 1, 0, 2, 1, 0, 3, 1, 0, 4, 1, 0)),
			),
			stickyTrace("another-partition-of-the-same-epoch-is-not-held-back",
				"Record 1 (k1) is ambiguous in (1, 0); k2's record 2 goes to (1, 1) at once and is acknowledged there; k1's 3 waits for (1, 0) to settle.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(produce(2, k2), sends(2, 1, 1)),
				then(produce(3, k1), nothing),
				then(acked(2), ackedOut(2)),
				then(settled(1, 0, 1), sendsAcked([]uint64{1}, 3, 1, 0)),
			),
			stickyTrace("after-a-fence-every-record-waits-for-every-old-sink",
				"Epoch 2 is current while (1, 0) and (1, 1) both have records in flight. (1, 1) settles first (2 not stored): it does not move yet, nor does k2's record 4 produced after the fence, though k2's sink was settled: the re-send is in original send order across sinks. Once (1, 0) settles (1 stored, 3 not), 2, 3, 4 go to epoch 2.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(produce(2, k2), sends(2, 1, 1)),
				then(produce(3, k1), sends(3, 1, 0)),
				then(newEpoch(2), nothing),
				then(settled(1, 1), nothing),
				then(produce(4, k2), nothing),
				then(settled(1, 0, 1), sendsAcked([]uint64{1}, 2, 2, 1, 3, 2, 2, 4, 2, 1)),
			),
			stickyTrace("a-sink-with-nothing-in-flight-moves-at-once",
				"Every record of epoch 1 is acknowledged when epoch 2 is current: nothing is ambiguous, so a record produced next goes straight to its key's new partition.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(acked(1), ackedOut(1)),
				then(newEpoch(2), nothing),
				then(produce(2, k1), sends(2, 2, 2)),
			),
			stickyTrace("close-fails-an-unsettled-record-it-never-moves",
				"Record 1 is ambiguous in (1, 0) and cannot be settled (the server unreachable); epoch 2 is current and 2 (k2) waits. Closed, both fail as unavailable; nothing is re-sent elsewhere.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(newEpoch(2), nothing),
				then(produce(2, k2), nothing),
				then(anomaly(1, 0), nothing),
				then(Event{Close: empty}, StickyOut{Failed: []uint64{1, 2}}),
			),
		},
	}
}
