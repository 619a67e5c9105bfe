package protovec

// The traces. Every expected decision below is written by hand from the rule's text in
// spec/protocol.md (quoted in each trace's doc), not computed by the code under test: the Go core
// (internal/proto) is checked against them like every SDK.

func now(ms int64) Event { return Event{Now: &ms} }

var empty = &struct{}{}

// Keys (hex of ASCII): k1 = 6b31, k2 = 6b32, k3 = 6b33, k4 = 6b34.
const (
	k1 = "6b31"
	k2 = "6b32"
	k3 = "6b33"
	k4 = "6b34"
)

// threeEpochs: epoch 1 (2 partitions) ended at [10, 20]; epoch 2 (3 partitions, a grow) ended
// at [30, 40, 7] (partition 0's fence marker of epoch 2 is at 11, partition 1's at 21; partition 2
// is a new stream); epoch 3 (4 partitions) is current.
var threeEpochs = Topic{Epochs: []Epoch{
	{Epoch: 1, Partitions: 2, Boundaries: []uint64{10, 20}},
	{Epoch: 2, Partitions: 3, Boundaries: []uint64{30, 40, 7}},
	{Epoch: 3, Partitions: 4},
}}

// threeEpochsF: k1 lives in 1, 2, 0; k2 in 1, 0, 0 (no move in epoch 2 -> 3, but a move in
// 1 -> 2); k3 always in 0; k4 in 0, 1, 3.
var threeEpochsF = []F{
	{1, k1, 1}, {2, k1, 2}, {3, k1, 0},
	{1, k2, 1}, {2, k2, 0}, {3, k2, 0},
	{1, k3, 0}, {2, k3, 0}, {3, k3, 0},
	{1, k4, 0}, {2, k4, 1}, {3, k4, 3},
}

func gating() File {
	return File{
		Rule: "epoch-gating", Role: "consumer", Section: "6.5",
		Title: "Epoch gating: a record waits for every undrained older epoch's partition of its key",
		Doc: "A record of epoch x in partition p with key k is delivered only when, for every earlier epoch e < x not yet fully drained, " +
			"the key's partition q_e = f_e(k, N_e) has group position >= boundaries_e[q_e]; q_e = p needs no wait (§6.7). " +
			"An epoch is fully drained when every one of its partitions, and every older epoch's, is past its boundary.",
		Traces: []Trace{
			{
				Name:  "waits-on-every-undrained-older-epoch",
				Doc:   "k1 was in partition 1 in epoch 1 and 2 in epoch 2; its epoch-3 record in partition 0 waits for both, newest first, and opens as each parent reaches its boundary.",
				Topic: threeEpochs, F: threeEpochsF,
				Steps: []Step{
					{Event: Event{DrainedThrough: empty}, Expect: DrainedOut{0}},
					{Event: Event{Record: &Record{Epoch: 3, Partition: 0, KeyHex: k1}}, Expect: GateOut{
						Waits: []Wait{{2, 2, 7}, {1, 1, 20}}, Parent: 2, Assigned: &Wait{2, 2, 7}}},
					{Event: pos(2, 7)},
					{Event: Event{Record: &Record{Epoch: 3, Partition: 0, KeyHex: k1}}, Expect: GateOut{
						Waits: []Wait{{1, 1, 20}}, Parent: 2, Assigned: &Wait{2, 2, 7}}},
					{Event: pos(1, 19)},
					{Event: Event{Record: &Record{Epoch: 3, Partition: 0, KeyHex: k1}}, Expect: GateOut{
						Waits: []Wait{{1, 1, 20}}, Parent: 2, Assigned: &Wait{2, 2, 7}}},
					{Event: pos(1, 20)},
					{Event: Event{Record: &Record{Epoch: 3, Partition: 0, KeyHex: k1}}, Expect: GateOut{
						Parent: 2, Assigned: &Wait{2, 2, 7}}},
				},
			},
			{
				Name:  "checking-only-the-previous-epoch-is-not-enough",
				Doc:   "k2 stayed in partition 0 from epoch 2 to 3 (its own partition: no wait there), but was in partition 1 in epoch 1: the record still waits for partition 1 to reach epoch 1's boundary.",
				Topic: threeEpochs, F: threeEpochsF,
				Steps: []Step{
					{Event: Event{Record: &Record{Epoch: 3, Partition: 0, KeyHex: k2}}, Expect: GateOut{
						Waits: []Wait{{1, 1, 20}}, Parent: 0}},
					{Event: pos(1, 20)},
					{Event: Event{Record: &Record{Epoch: 3, Partition: 0, KeyHex: k2}}, Expect: GateOut{Parent: 0}},
				},
			},
			{
				Name:  "own-partition-needs-no-wait",
				Doc:   "k3 was always in partition 0: its older records are before this one in the same stream (§6.7).",
				Topic: threeEpochs, F: threeEpochsF,
				Steps: []Step{
					{Event: Event{Record: &Record{Epoch: 3, Partition: 0, KeyHex: k3}}, Expect: GateOut{Parent: 0}},
				},
			},
			{
				Name:  "drained-epochs-need-no-check",
				Doc:   "Once every partition of epoch 1 is past its boundary, epoch 1 is fully drained; then epoch 2 too. A record of epoch 2 waits only for epoch 1.",
				Topic: threeEpochs, F: threeEpochsF,
				Steps: []Step{
					{Event: Event{Record: &Record{Epoch: 2, Partition: 1, KeyHex: k4}}, Expect: GateOut{
						Waits: []Wait{{1, 0, 10}}, Parent: 0, Assigned: &Wait{1, 0, 10}}},
					{Event: pos(0, 10, 1, 20)},
					{Event: Event{DrainedThrough: empty}, Expect: DrainedOut{1}},
					{Event: Event{Record: &Record{Epoch: 2, Partition: 1, KeyHex: k4}}, Expect: GateOut{
						Parent: 0, Assigned: &Wait{1, 0, 10}}},
					{Event: Event{Record: &Record{Epoch: 3, Partition: 3, KeyHex: k4}}, Expect: GateOut{
						Waits: []Wait{{2, 1, 40}}, Parent: 1, Assigned: &Wait{2, 1, 40}}},
					{Event: pos(0, 30, 1, 40)},
					{Event: Event{DrainedThrough: empty}, Expect: DrainedOut{1}},
					{Event: pos(2, 7)},
					{Event: Event{DrainedThrough: empty}, Expect: DrainedOut{2}},
					{Event: Event{Record: &Record{Epoch: 3, Partition: 3, KeyHex: k4}}, Expect: GateOut{
						Parent: 1, Assigned: &Wait{2, 1, 40}}},
				},
			},
			{
				Name: "a-parent-without-records-is-drained-at-0",
				Doc:  "Boundary 0: the stream held no records in that epoch; position 0 is at it.",
				Topic: Topic{Epochs: []Epoch{
					{Epoch: 1, Partitions: 2, Boundaries: []uint64{0, 9}},
					{Epoch: 2, Partitions: 2},
				}},
				F: []F{{1, k1, 0}, {2, k1, 1}},
				Steps: []Step{
					{Event: Event{Record: &Record{Epoch: 2, Partition: 1, KeyHex: k1}}, Expect: GateOut{
						Parent: 0, Assigned: &Wait{1, 0, 0}}},
				},
			},
			{
				Name:  "first-epoch-records-are-not-gated",
				Doc:   "A record of the topic's first epoch has no older epoch.",
				Topic: threeEpochs, F: threeEpochsF,
				Steps: []Step{
					{Event: Event{Record: &Record{Epoch: 1, Partition: 1, KeyHex: k1}}, Expect: GateOut{Parent: -1}},
				},
			},
			{
				Name:  "a-record-newer-than-the-descriptor-refreshes-it",
				Doc:   "A record of epoch x is judged only once the descriptor shows epoch x-1 ended (its boundaries) and epoch x: never against an older descriptor (§6.8).",
				Topic: Topic{Epochs: []Epoch{{Epoch: 1, Partitions: 2}}},
				F:     []F{{1, k1, 1}, {2, k1, 0}},
				Steps: []Step{
					{Event: Event{Record: &Record{Epoch: 2, Partition: 0, KeyHex: k1}}, Expect: GateOut{Refresh: true, Parent: -1}},
					{Event: Event{Descriptor: &Topic{Epochs: []Epoch{{Epoch: 1, Partitions: 2, Boundaries: []uint64{10, 20}}, {Epoch: 2, Partitions: 2}}}}},
					{Event: Event{Record: &Record{Epoch: 2, Partition: 0, KeyHex: k1}}, Expect: GateOut{
						Waits: []Wait{{1, 1, 20}}, Parent: 1, Assigned: &Wait{1, 1, 20}}},
				},
			},
		},
	}
}

// shrunk: epoch 1 has 4 partitions ended at [10, 20, 30, 40]; epoch 2 has 2 (partitions 2 and 3
// shrunk away, retired after their final boundaries 30 and 40).
var shrunk = Topic{Epochs: []Epoch{
	{Epoch: 1, Partitions: 4, Boundaries: []uint64{10, 20, 30, 40}},
	{Epoch: 2, Partitions: 2},
}}

func retirement() File {
	return File{
		Rule: "shrink-retirement", Role: "consumer", Section: "6.2",
		Title: "Shrink retirement: a partition shrunk away is read until drained past its final boundary",
		Doc: "Assignable partitions are the current epoch's 0 .. N-1, plus any partition shrunk away whose group position is below its final boundary " +
			"(its boundary in the last ended epoch that had it, §6.2, §7).",
		Traces: []Trace{
			{
				Name: "retired-partitions-leave-when-drained", Topic: shrunk,
				Doc: "Partitions 2 and 3 stay assignable until the group's position reaches 30 and 40.",
				Steps: []Step{
					{Event: Event{Assignable: empty}, Expect: AssignableOut{[]int{0, 1, 2, 3}}},
					{Event: pos(2, 29, 3, 40)},
					{Event: Event{Assignable: empty}, Expect: AssignableOut{[]int{0, 1, 2}}},
					{Event: pos(2, 30)},
					{Event: Event{Assignable: empty}, Expect: AssignableOut{[]int{0, 1}}},
				},
			},
			{
				Name: "the-final-boundary-is-the-last-epoch-that-had-the-partition",
				Doc:  "4 -> 3 -> 2 partitions: partition 3's final boundary is epoch 1's (40), partition 2's is epoch 2's (70), not epoch 1's (30).",
				Topic: Topic{Epochs: []Epoch{
					{Epoch: 1, Partitions: 4, Boundaries: []uint64{10, 20, 30, 40}},
					{Epoch: 2, Partitions: 3, Boundaries: []uint64{50, 60, 70}},
					{Epoch: 3, Partitions: 2},
				}},
				Steps: []Step{
					{Event: pos(2, 30, 3, 40)},
					{Event: Event{Assignable: empty}, Expect: AssignableOut{[]int{0, 1, 2}}},
					{Event: pos(2, 70)},
					{Event: Event{Assignable: empty}, Expect: AssignableOut{[]int{0, 1}}},
				},
			},
			{
				Name: "a-grow-after-a-shrink-makes-the-partition-current-again",
				Doc:  "4 -> 2 -> 4 partitions: partitions 2 and 3 are current again, assignable whatever their positions.",
				Topic: Topic{Epochs: []Epoch{
					{Epoch: 1, Partitions: 4, Boundaries: []uint64{10, 20, 30, 40}},
					{Epoch: 2, Partitions: 2, Boundaries: []uint64{50, 60}},
					{Epoch: 3, Partitions: 4},
				}},
				Steps: []Step{
					{Event: pos(2, 30, 3, 40)},
					{Event: Event{Assignable: empty}, Expect: AssignableOut{[]int{0, 1, 2, 3}}},
				},
			},
		},
	}
}

func keysAssigned() File {
	return File{
		Rule: "keys-assigned-past-boundary", Role: "consumer", Section: "6.5",
		Title: "Keys assigned waits until the parent is past its boundary",
		Doc: "Keys assigned (p, q, e+1) runs only once the group's position of q is past the boundary b: > b (the marker is passed), " +
			"or = b while no live lease holds q and q is not assignable (shrunk away and drained to its final boundary). " +
			"A lease is live, to another member, until lease_end + the clock-skew bound (§6.3).",
		Traces: []Trace{
			{
				Name: "at-the-boundary-is-not-past-it", Topic: shrunk, SessionMS: 6000,
				Doc: "Partition 0 is current: at 10 its owner may still run keys revoked; at 11 (the marker passed) it is done.",
				Steps: []Step{
					{Event: now(100000)},
					{Event: pos(0, 9)},
					{Event: Event{PastBoundary: &PartitionAt{0, 10}}, Expect: PastOut{false}},
					{Event: pos(0, 10)},
					{Event: Event{PastBoundary: &PartitionAt{0, 10}}, Expect: PastOut{false}},
					{Event: pos(0, 11)},
					{Event: Event{PastBoundary: &PartitionAt{0, 10}}, Expect: PastOut{true}},
				},
			},
			{
				Name: "a-retired-partition-at-its-final-boundary-once-no-lease-holds-it", Topic: shrunk, SessionMS: 6000,
				Doc: "Partition 2 was shrunk away: at its final boundary 30 it is past it once no live lease holds it; its owner's lease ending at 10000 " +
					"stays live to others until 10000 + 1000 (the bound for a 6 s session).",
				Steps: []Step{
					{Event: pos(2, 30)},
					{Event: Event{Lease: &Lease{Partition: 2, Owner: "b", LeaseEnd: 10000}}},
					{Event: now(9000)},
					{Event: Event{PastBoundary: &PartitionAt{2, 30}}, Expect: PastOut{false}},
					{Event: now(10500)},
					{Event: Event{PastBoundary: &PartitionAt{2, 30}}, Expect: PastOut{false}},
					{Event: now(11000)},
					{Event: Event{PastBoundary: &PartitionAt{2, 30}}, Expect: PastOut{true}},
					{Event: Event{Lease: &Lease{Partition: 2, Owner: "", LeaseEnd: 0}}},
					{Event: now(9000)},
					{Event: Event{PastBoundary: &PartitionAt{2, 30}}, Expect: PastOut{true}},
				},
			},
			{
				Name: "a-retired-partition-below-its-final-boundary", Topic: shrunk, SessionMS: 6000,
				Doc: "Partition 3 at 39, final boundary 40: not past, lease or not.",
				Steps: []Step{
					{Event: now(100000)},
					{Event: pos(3, 39)},
					{Event: Event{PastBoundary: &PartitionAt{3, 40}}, Expect: PastOut{false}},
					{Event: pos(3, 40)},
					{Event: Event{PastBoundary: &PartitionAt{3, 40}}, Expect: PastOut{true}},
				},
			},
		},
	}
}

// onePartition: a topic of one epoch with one partition (the lease rules read no descriptor).
var onePartition = Topic{Epochs: []Epoch{{Epoch: 1, Partitions: 1}}}

func leases() File {
	return File{
		Rule: "lease-expiry", Role: "consumer", Section: "6.3",
		Title: "Leases: expiry under a clock-skew bound, and the holder's delivery margin",
		Doc: "The clock-skew bound is min(1 s, session timeout / 6). Another member takes a partition only if its key has no owner, is its own, " +
			"or now >= lease_end + bound by its own clock; the holder delivers a record only while more than a quarter of the session timeout " +
			"is left on its lease by its own clock (else it renews first).",
		Traces: []Trace{
			{
				Name: "skew-bounds", SessionMS: 6000, Topic: onePartition, Doc: "6 s session: 1 s.",
				Steps: []Step{{Event: Event{MaxSkew: empty}, Expect: SkewOut{1000}}},
			},
			{
				Name: "skew-bound-of-a-long-session", SessionMS: 30000, Topic: onePartition, Doc: "30 s session: capped at 1 s.",
				Steps: []Step{{Event: Event{MaxSkew: empty}, Expect: SkewOut{1000}}},
			},
			{
				Name: "skew-bound-of-a-short-session", SessionMS: 1500, Topic: onePartition, Doc: "1.5 s session: 250 ms.",
				Steps: []Step{{Event: Event{MaxSkew: empty}, Expect: SkewOut{250}}},
			},
			{
				Name: "another-members-lease-expires-only-after-the-skew-bound", Member: "a", SessionMS: 6000, Topic: onePartition,
				Doc: "b's lease ends at 10000 by b's clock: a may take the partition from 11000 by its own.",
				Steps: []Step{
					{Event: now(9999)},
					{Event: Event{Acquire: &Lease{Partition: 0, Owner: "b", LeaseEnd: 10000}}, Expect: AcquireOut{false}},
					{Event: now(10000)},
					{Event: Event{Acquire: &Lease{Partition: 0, Owner: "b", LeaseEnd: 10000}}, Expect: AcquireOut{false}},
					{Event: now(10999)},
					{Event: Event{Acquire: &Lease{Partition: 0, Owner: "b", LeaseEnd: 10000}}, Expect: AcquireOut{false}},
					{Event: now(11000)},
					{Event: Event{Acquire: &Lease{Partition: 0, Owner: "b", LeaseEnd: 10000}}, Expect: AcquireOut{true}},
				},
			},
			{
				Name: "free-and-own-leases-are-taken", Member: "a", SessionMS: 6000, Topic: onePartition,
				Doc: "No owner (released), or the member's own lease, whatever its end.",
				Steps: []Step{
					{Event: now(10000)},
					{Event: Event{Acquire: &Lease{Partition: 0, Owner: "", LeaseEnd: 20000}}, Expect: AcquireOut{true}},
					{Event: Event{Acquire: &Lease{Partition: 0, Owner: "a", LeaseEnd: 20000}}, Expect: AcquireOut{true}},
					{Event: Event{Acquire: &Lease{Partition: 0, Owner: "b", LeaseEnd: 20000}}, Expect: AcquireOut{false}},
				},
			},
			{
				Name: "the-holder-delivers-while-a-quarter-of-the-session-is-left", Member: "a", SessionMS: 6000, Topic: onePartition,
				Doc: "6 s session: the holder of a lease ending at 11501 delivers at 10000 (1501 ms left > 1500); at 11500 it renews first.",
				Steps: []Step{
					{Event: now(10000)},
					{Event: Event{Deliver: &Deliver{11501}}, Expect: DeliverOut{true}},
					{Event: Event{Deliver: &Deliver{11500}}, Expect: DeliverOut{false}},
					{Event: Event{Deliver: &Deliver{9000}}, Expect: DeliverOut{false}},
					{Event: Event{Deliver: &Deliver{16000}}, Expect: DeliverOut{true}},
				},
			},
		},
	}
}

func markers() File {
	return File{
		Rule: "fence-markers", Role: "consumer", Section: "6.4",
		Title: "Fence markers and keys revoked: a marker is passed, never delivered, after the boundary's keys-revoked step",
		Doc: "A fence marker (header Pctl-Fence: e+1, no Pctl-Key) is not a record: the member moves its position past it and commits at once. " +
			"First it waits for a descriptor showing epoch e ended; keys revoked (q, e) runs once every record up to boundaries_e[q] is handled, " +
			"before the position passes the boundary, once per member and generation; a member that acquires q past b does not run it, at b it does (§6.5).",
		Traces: []Trace{
			{
				Name: "markers-are-passed-after-keys-revoked", Topic: threeEpochs,
				Doc: "Partition 0: boundary 10 of epoch 1 (marker 11), boundary 30 of epoch 2 (marker 31).",
				Steps: []Step{
					{Event: Event{At: &PartitionPos{0, 9}}, Expect: AtOut{}},
					{Event: Event{At: &PartitionPos{0, 10}}, Expect: AtOut{Revoke: []int{1}, Commit: true}},
					{Event: Event{Marker: &MarkerIn{0, 11, 2}}, Expect: MarkerOut{Position: 11, Commit: true}},
					{Event: Event{At: &PartitionPos{0, 29}}, Expect: AtOut{}},
					{Event: Event{At: &PartitionPos{0, 30}}, Expect: AtOut{Revoke: []int{2}, Commit: true}},
					{Event: Event{At: &PartitionPos{0, 30}}, Expect: AtOut{}},
					{Event: Event{Marker: &MarkerIn{0, 31, 3}}, Expect: MarkerOut{Position: 31, Commit: true}},
				},
			},
			{
				Name: "a-marker-right-after-the-start-runs-keys-revoked", Topic: threeEpochs,
				Doc: "Partition 1 read from 20 = its epoch-1 boundary (acquired there): keys revoked (1, 1) runs at the marker 21, not skipped.",
				Steps: []Step{
					{Event: Event{Acquired: &PartitionPos{1, 20}}, Expect: AcquiredOut{}},
					{Event: Event{Marker: &MarkerIn{1, 21, 2}}, Expect: MarkerOut{Revoke: []int{1}, Position: 21, Commit: true}},
				},
			},
			{
				Name: "acquired-past-a-boundary-its-step-ran-elsewhere", Topic: threeEpochs,
				Doc: "Partition 1 acquired at 25, past epoch 1's boundary 20: its earlier owner ran keys revoked (1, 1); at 40, epoch 2's, it runs here.",
				Steps: []Step{
					{Event: Event{Acquired: &PartitionPos{1, 25}}, Expect: AcquiredOut{Passed: []int{1}}},
					{Event: Event{At: &PartitionPos{1, 25}}, Expect: AtOut{}},
					{Event: Event{At: &PartitionPos{1, 40}}, Expect: AtOut{Revoke: []int{2}, Commit: true}},
				},
			},
			{
				Name:  "a-marker-before-its-epoch-is-active-refreshes-the-descriptor",
				Doc:   "The broker fences, then activates: a marker read in between waits for the descriptor with epoch 1's boundaries.",
				Topic: Topic{Epochs: []Epoch{{Epoch: 1, Partitions: 2}}},
				Steps: []Step{
					{Event: Event{Marker: &MarkerIn{1, 21, 2}}, Expect: MarkerOut{Refresh: true}},
					{Event: Event{Descriptor: &Topic{Epochs: []Epoch{{Epoch: 1, Partitions: 2, Boundaries: []uint64{10, 20}}, {Epoch: 2, Partitions: 2}}}}},
					{Event: Event{Marker: &MarkerIn{1, 21, 2}}, Expect: MarkerOut{Revoke: []int{1}, Position: 21, Commit: true}},
				},
			},
		},
	}
}

func rec(seq uint64, key string) ProducerRecord { return ProducerRecord{Seq: seq, KeyHex: key} }
func keyless(seq uint64) ProducerRecord         { return ProducerRecord{Seq: seq, Keyless: true} }

func resend() File {
	return File{
		Rule: "fence-resend-order", Role: "producer", Section: "5.1.2",
		Title: "After a fence, unacknowledged records are re-sent in their original send order",
		Doc: "If the descriptor shows a newer epoch, the producer takes every unacknowledged record of every sink, re-partitions them under the new " +
			"epoch and re-sends them in their original send order (Pctl-Seq ascending), before any record sent later: each new partition receives " +
			"its records in send order, whatever old sink they come from.",
		Traces: []Trace{
			{
				Name:  "records-of-two-sinks-merge-in-send-order",
				Doc:   "Epoch 1 (2 partitions) fenced by epoch 2 (3): k1 and k3 both move to partition 2 from different old sinks; they arrive interleaved by sequence.",
				Topic: Topic{Epochs: []Epoch{{Epoch: 1, Partitions: 2, Boundaries: []uint64{50, 60}}, {Epoch: 2, Partitions: 3}}},
				F:     []F{{1, k1, 0}, {1, k2, 0}, {1, k3, 1}, {1, k4, 1}, {2, k1, 2}, {2, k2, 0}, {2, k3, 2}, {2, k4, 0}},
				Steps: []Step{{
					Event:  Event{FenceResend: &FenceResend{Records: []ProducerRecord{rec(3, k1), rec(7, k2), rec(9, k1), rec(2, k3), rec(5, k4), rec(8, k3), keyless(10)}}},
					Expect: ResendOut{Order: []uint64{2, 3, 5, 7, 8, 9, 10}, Partitions: []PartitionSeqs{{0, []uint64{5, 7}}, {2, []uint64{2, 3, 8, 9}}}},
				}},
			},
			{
				Name:  "a-shrink-to-one-partition",
				Doc:   "Three sinks fenced by an epoch of one partition: everything goes to partition 0, by sequence.",
				Topic: Topic{Epochs: []Epoch{{Epoch: 1, Partitions: 3, Boundaries: []uint64{5, 5, 5}}, {Epoch: 2, Partitions: 1}}},
				F:     []F{{2, k1, 0}, {2, k2, 0}, {2, k3, 0}},
				Steps: []Step{{
					Event:  Event{FenceResend: &FenceResend{Records: []ProducerRecord{rec(4, k1), rec(1, k2), rec(6, k2), rec(3, k3)}}},
					Expect: ResendOut{Order: []uint64{1, 3, 4, 6}, Partitions: []PartitionSeqs{{0, []uint64{1, 3, 4, 6}}}},
				}},
			},
		},
	}
}

func search() File {
	return File{
		Rule: "ambiguous-search-floor", Role: "producer", Section: "5.1.2",
		Title: "The search for an ambiguous batch's stored prefix: from the boundary or the last sequence down to the lowest floor",
		Doc: "The search reads the stream backwards, from its last sequence (from the epoch's boundary if the partition was fenced) down to the floor; " +
			"searches start at the lowest floor any of the records was first sent above (an earlier attempt's copy is a duplicate for the server).",
		Traces: []Trace{
			{
				Name: "floors", Topic: onePartition,
				Doc: "Not fenced: down to the sink's floor, or lower when a record was first sent above a lower floor; records re-sent with a new token (holes) have no first-send floor here.",
				Steps: []Step{
					{Event: Event{Search: &SearchIn{SinkFloor: 100, FirstSent: []uint64{100, 100}}}, Expect: SearchOut{Low: 100, ReadLast: true}},
					{Event: Event{Search: &SearchIn{SinkFloor: 140, FirstSent: []uint64{120, 140}}}, Expect: SearchOut{Low: 120, ReadLast: true}},
					{Event: Event{Search: &SearchIn{SinkFloor: 200, FirstSent: []uint64{}}}, Expect: SearchOut{Low: 200, ReadLast: true}},
				},
			},
			{
				Name: "a-fenced-partition-is-searched-from-its-boundary", Topic: onePartition,
				Doc: "Fenced with boundary 75: every record of the old epoch is at or below it. Boundary 0 (nothing stored in that epoch): the last sequence.",
				Steps: []Step{
					{Event: Event{Search: &SearchIn{SinkFloor: 50, FirstSent: []uint64{60}, Fenced: true, Boundary: 75}}, Expect: SearchOut{Low: 50, Top: 75}},
					{Event: Event{Search: &SearchIn{SinkFloor: 0, FirstSent: []uint64{0}, Fenced: true, Boundary: 0}}, Expect: SearchOut{Low: 0, ReadLast: true}},
				},
			},
		},
	}
}

func perKeyBatches() File {
	none := ""
	return File{
		Rule: "per-key-batches", Role: "producer", Section: "5.1.2",
		Title: "The per-key rule: on a cluster a batch never holds two records of one key",
		Doc: "When the next record's key is already in the open batch, the sink commits the batch and starts the next only after this one is confirmed " +
			"(keyless records are free; the empty key is a key). A batch also ends at the batch size. On a single server the rule does not apply.",
		Traces: []Trace{
			{
				Name: "a-repeated-key-cuts-the-batch", Topic: onePartition,
				Doc: "k1 k2 | k1 k3 - - k2: the second k1 starts a new batch, which then admits k2 again.",
				Steps: []Step{
					{Event: Event{Batches: &BatchesIn{Records: []ProducerRecord{{KeyHex: k1}, {KeyHex: k2}, {KeyHex: k1}, {KeyHex: k3}, {Keyless: true}, {Keyless: true}, {KeyHex: k2}}, PerKey: true, Size: 4096}},
						Expect: BatchesOut{[][]int{{0, 1}, {2, 3, 4, 5, 6}}}},
					{Event: Event{Batches: &BatchesIn{Records: []ProducerRecord{{KeyHex: k1}, {KeyHex: k1}, {KeyHex: k1}}, PerKey: true, Size: 4096}},
						Expect: BatchesOut{[][]int{{0}, {1}, {2}}}},
				},
			},
			{
				Name: "the-empty-key-is-a-key", Topic: onePartition,
				Doc: "Two records of the empty key are never in one batch; keyless records join any batch.",
				Steps: []Step{
					{Event: Event{Batches: &BatchesIn{Records: []ProducerRecord{{KeyHex: none}, {KeyHex: none}, {Keyless: true}, {Keyless: true}}, PerKey: true, Size: 4096}},
						Expect: BatchesOut{[][]int{{0}, {1, 2, 3}}}},
				},
			},
			{
				Name: "a-single-server-and-the-batch-size", Topic: onePartition,
				Doc: "Without the rule a key may repeat in a batch; every batch ends at the batch size.",
				Steps: []Step{
					{Event: Event{Batches: &BatchesIn{Records: []ProducerRecord{{KeyHex: k1}, {KeyHex: k1}, {KeyHex: k1}}, PerKey: false, Size: 4096}},
						Expect: BatchesOut{[][]int{{0, 1, 2}}}},
					{Event: Event{Batches: &BatchesIn{Records: []ProducerRecord{{KeyHex: k1}, {KeyHex: k2}, {KeyHex: k3}, {KeyHex: k4}, {Keyless: true}, {KeyHex: k1}, {KeyHex: k1}}, PerKey: false, Size: 3}},
						Expect: BatchesOut{[][]int{{0, 1, 2}, {3, 4, 5}, {6}}}},
					{Event: Event{Batches: &BatchesIn{Records: []ProducerRecord{{KeyHex: k1}, {KeyHex: k2}, {KeyHex: k3}, {KeyHex: k4}}, PerKey: true, Size: 2}},
						Expect: BatchesOut{[][]int{{0, 1}, {2, 3}}}},
				},
			},
		},
	}
}

// Files returns every vector file, in the order written.
func Files() []File {
	return []File{gating(), keysAssigned(), markers(), leases(), retirement(), resend(), search(), perKeyBatches(), sticky(), permanentFailures()}
}
