package protovec

// The sticky machine's permanent failures (spec/protocol.md §5.1.2, "Sticky ambiguity": a record
// settling fails for good, a record failed before it is transmitted). Every expected action below
// is written by hand from that text; the topic and f are the sticky traces' (k1: partition 0,
// then 2 in epoch 2; k2: 1, then 1; k3: 0, then 0).

// settledFailing is a settled event that also fails records for good.
func settledFailing(epoch, q int, stored, failed []uint64) Event {
	if stored == nil {
		stored = []uint64{}
	}
	return Event{Settled: &SettledIn{Epoch: epoch, Partition: q, Stored: stored, Failed: failed}}
}

func drop(seqs ...uint64) Event { return Event{Drop: &Seqs{Seqs: seqs}} }

func failedOut(seqs ...uint64) StickyOut { return StickyOut{Failed: seqs} }

// withFailed is o with these records failed too.
func withFailed(o StickyOut, seqs ...uint64) StickyOut {
	o.Failed = seqs
	return o
}

func seqs(v ...uint64) []uint64 { return v }

func permanentFailures() File {
	return File{
		Rule: "sticky-permanent-failures", Role: "producer", Section: "5.1.2",
		Title: "Permanent failures under sticky ambiguity: a record failed for good is reported where it is and never sent again; nothing else changes",
		Doc: "Settling may fail a record for good (a refusal 10054 or another permanent error, an id stuck in process that settling did not " +
			"find stored): it is reported failed where it is and never sent again, to its partition or any other, nor failed again at close; " +
			"the sink's records not stored go on as after any settling, in send order (after a newer epoch they move once every old sink " +
			"settled). A record settling found stored is acknowledged, even if a send of it was answered with a permanent error. A record the " +
			"producer fails for good before it is transmitted (its connection refuses it, the partitioner fails on its key at a re-send) is " +
			"reported failed wherever it waits: told to be sent, behind an ambiguous record, or held for a newer epoch; the other records keep " +
			"their order, an ambiguous sink stays ambiguous until it settled, and the record is never re-sent. An ambiguous record is never " +
			"failed this way: only settling decides it. A record already acknowledged or failed is not reported again.",
		Traces: []Trace{
			stickyTrace("a-record-failed-in-settling-is-never-re-sent-the-records-after-it-are",
				"Records 1 (k1), 2 (k3) and 3 (k1) are in flight in (1, 0) when it has an anomaly; k3's 4 waits. Settling finds 1 stored and fails 2 for good (refused): 1 is acknowledged, 2 failed, and 3 and 4 are re-sent in (1, 0) in send order. 2 is not failed again at close.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(produce(2, k3), sends(2, 1, 0)),
				then(produce(3, k1), sends(3, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(produce(4, k3), nothing),
				then(settledFailing(1, 0, seqs(1), seqs(2)), StickyOut{Acked: seqs(1), Failed: seqs(2), Send: sends(3, 1, 0, 4, 1, 0).Send}),
				then(acked(3, 4), ackedOut(3, 4)),
				then(Event{Close: empty}, nothing),
			),
			stickyTrace("failed-in-settling-after-a-newer-epoch-it-does-not-move",
				"Epoch 2 is current while 1 and 2 (k1) are in flight in (1, 0) and 3 (k2) in (1, 1). (1, 1) settles first (3 not stored): nothing moves; k1's 4 is held. (1, 0) settles failing 1 for good, 2 not stored: 1 is failed where it is, never sent to epoch 2; 2, 3 and 4 go to epoch 2 in send order.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(produce(2, k1), sends(2, 1, 0)),
				then(produce(3, k2), sends(3, 1, 1)),
				then(newEpoch(2), nothing),
				then(settled(1, 1), nothing),
				then(produce(4, k1), nothing),
				then(settledFailing(1, 0, nil, seqs(1)), withFailed(sends(2, 2, 2, 3, 2, 1, 4, 2, 2), 1)),
			),
			stickyTrace("stored-wins-over-a-permanent-failure",
				"Record 1 is ambiguous in (1, 0); settling finds it stored although a send of it was answered with a permanent error (it names it both stored and failed): it is acknowledged, not failed, and not failed at close.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(settledFailing(1, 0, seqs(1), seqs(1)), ackedOut(1)),
				then(Event{Close: empty}, nothing),
			),
			stickyTrace("a-record-refused-at-transmit-fails-alone",
				"Records 1 and 2 (k1) are told to be sent to (1, 0); the connection refuses 1 (larger than the server's maximum payload): it fails, and only it. An anomaly then makes only 2 ambiguous: settled as stored, it is acknowledged and nothing is re-sent; close fails nothing.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(produce(2, k1), sends(2, 1, 0)),
				then(drop(1), failedOut(1)),
				then(anomaly(1, 0), nothing),
				then(settled(1, 0, 2), ackedOut(2)),
				then(Event{Close: empty}, nothing),
			),
			stickyTrace("a-record-dropped-behind-an-ambiguous-one-leaves-the-order-and-the-ambiguity",
				"Record 1 (k1) is ambiguous in (1, 0); 2 (k3) and 3 (k1) wait behind it. 2 is failed for good while it waits: it fails, and (1, 0) still sends nothing (k1's 3 waits on), while k2's 4 goes to (1, 1). Settled as not stored, 1 and 3 are re-sent in (1, 0), without 2.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(produce(2, k3), nothing),
				then(produce(3, k1), nothing),
				then(drop(2), failedOut(2)),
				then(produce(4, k2), sends(4, 1, 1)),
				then(settled(1, 0), sends(1, 1, 0, 3, 1, 0)),
			),
			stickyTrace("a-record-dropped-before-a-newer-epoch-or-while-held-does-not-move",
				"Record 1 (k1) is ambiguous in (1, 0) and 2 (k3) waits behind it; 2 is failed for good. Epoch 2 becomes current; 3 (k2) and 4 (k1) are held for it, and 3 is failed for good. Once (1, 0) settles (1 not stored), only 1 and 4 go to epoch 2, in send order.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(produce(2, k3), nothing),
				then(drop(2), failedOut(2)),
				then(newEpoch(2), nothing),
				then(produce(3, k2), nothing),
				then(produce(4, k1), nothing),
				then(drop(3), failedOut(3)),
				then(settled(1, 0), sends(1, 2, 2, 4, 2, 2)),
			),
			stickyTrace("an-ambiguous-record-is-never-dropped-only-settling-decides-it",
				"Record 1 is ambiguous in (1, 0) (a copy of it may be stored): a drop of it changes nothing. Settling finds it stored: it is acknowledged.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(drop(1), nothing),
				then(produce(2, k1), nothing),
				then(settled(1, 0, 1), sendsAcked(seqs(1), 2, 1, 0)),
			),
			stickyTrace("a-record-already-acknowledged-or-failed-is-not-failed-again",
				"Record 1 is acknowledged, 2 failed in settling, 3 failed by a drop, 9 never produced: a drop of them reports nothing; after close, a drop of the record close failed reports nothing either.",
				then(produce(1, k1), sends(1, 1, 0)),
				then(acked(1), ackedOut(1)),
				then(produce(2, k1), sends(2, 1, 0)),
				then(anomaly(1, 0), nothing),
				then(settledFailing(1, 0, nil, seqs(2)), failedOut(2)),
				then(produce(3, k2), sends(3, 1, 1)),
				then(drop(3), failedOut(3)),
				then(drop(1, 2, 3, 9), nothing),
				then(produce(4, k2), sends(4, 1, 1)),
				then(Event{Close: empty}, failedOut(4)),
				then(drop(4), nothing),
			),
		},
	}
}
