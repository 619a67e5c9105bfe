package proto

import "sort"

// The producer's decisions (spec/protocol.md §5.1.2).

// ResendOrder returns the order (indices into seqs) in which the unacknowledged records taken
// from a fenced epoch's sinks are re-sent under the new epoch: their original send order, Pctl-Seq
// ascending, whatever sink they came from, before any record sent later (§5.1.2 step 4). Each
// record then goes to its key's partition in the new epoch, so every partition receives its
// records in send order.
func ResendOrder(seqs []uint64) []int {
	idx := make([]int, len(seqs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return seqs[idx[a]] < seqs[idx[b]] })
	return idx
}

// SearchFloor is the stream sequence a search for a batch's unacknowledged records reads down to
// (exclusive): the sink's floor, or lower when one of the records was first sent to this stream
// above a lower floor (an earlier attempt's copy would be a duplicate for the server, so it may be
// the stored one). firstSent lists the floors at which the records were first sent to this stream
// (§5.1.2 step 3 and "Searches likewise start at the lowest floor any of the records was first
// sent above").
func SearchFloor(sinkFloor uint64, firstSent []uint64) uint64 {
	low := sinkFloor
	for _, f := range firstSent {
		if f < low {
			low = f
		}
	}
	return low
}

// SearchTop is where a search starts reading backwards (§5.1.2 step 3): the epoch's boundary of
// the partition when the partition was fenced (the records of a fenced epoch are all at or below
// it), else the stream's last sequence, which the sink reads (readLast). A fenced partition whose
// boundary is 0 held nothing in that epoch: its last sequence is read too.
func SearchTop(fenced bool, boundary uint64) (top uint64, readLast bool) {
	if fenced && boundary > 0 {
		return boundary, false
	}
	return 0, true
}

// Admits reports whether a record may join the open batch under the per-key rule (§5.1.2, on a
// cluster): a keyless record always; a keyed one only when no record of its key is in the batch
// (inBatch). Without the rule (perKey false: a single server) every record may.
func Admits(perKey, keyless bool, inBatch bool) bool {
	return !perKey || keyless || !inBatch
}

// Batches plans how a sink's queue is cut into batches (§5.1.2): a batch takes records from the
// head of the queue while they are admitted (Admits) and it holds fewer than size; the first
// record not admitted starts the next batch, which begins only after this one is confirmed (so
// a key's next record waits for its earlier one). keys[i] is record i's key ("" and keyless[i]
// for a keyless one). It returns each batch's record indices.
func Batches(keys []string, keyless []bool, perKey bool, size int) [][]int {
	var out [][]int
	var cur []int
	in := map[string]bool{}
	for i, k := range keys {
		if len(cur) >= size || !Admits(perKey, keyless[i], in[k]) {
			out = append(out, cur)
			cur, in = nil, map[string]bool{}
		}
		cur = append(cur, i)
		if !keyless[i] {
			in[k] = true
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
