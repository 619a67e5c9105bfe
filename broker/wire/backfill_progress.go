package wire

import "time"

// BackfillProgress is a backfill's progress as the descriptor records it (spec/protocol.md
// §10.3), worded for people: `pctl topic describe` and the status page show it.
type BackfillProgress struct {
	Epoch int    `json:"epoch"` // the epoch copied into
	From  int    `json:"from"`  // the ended epoch copied from
	State string `json:"state"` // BackfillRunning or BackfillDone
	// Partitions, one per old partition: its stored messages of the old epoch handled and in all.
	Partitions []BackfillPartition `json:"partitions"`
	// PartitionsDone counts the old partitions whose copying is complete.
	PartitionsDone int `json:"partitions_done"`
	// Handled and Total sum Partitions.
	Handled uint64 `json:"handled"`
	Total   uint64 `json:"total"`
	// Copied, Newer and Expired are the descriptor's counts (Backfill).
	Copied  int64      `json:"copied"`
	Newer   int64      `json:"newer"`
	Expired int64      `json:"expired"`
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	// Elapsed is how long it ran (until Ended, or until the time asked).
	Elapsed time.Duration `json:"elapsed_ns"`
	// KeysPerSecond is the keys decided (copied, refused as newer, expired) per second of Elapsed;
	// the counts are recorded every few seconds while it runs, so a running one's rate lags.
	KeysPerSecond float64 `json:"keys_per_second"`
}

// BackfillPartition is one old partition of a backfill.
type BackfillPartition struct {
	Partition int    `json:"partition"`
	Handled   uint64 `json:"handled"` // stored messages of the old epoch in this stream, up to Done
	Total     uint64 `json:"total"`   // stored messages of the old epoch in this stream
	Complete  bool   `json:"complete"`
}

// BackfillProgress returns the progress of the backfill into epoch `epoch` at now, or nil when
// that epoch has none.
func (t *Topic) BackfillProgress(epoch int, now time.Time) *BackfillProgress {
	ep := t.Epoch(epoch)
	if ep == nil || ep.Backfill == nil {
		return nil
	}
	bf := ep.Backfill
	prev := t.Epoch(epoch - 1)
	p := &BackfillProgress{Epoch: epoch, From: epoch - 1, State: bf.State, Copied: bf.Copied, Newer: bf.Newer, Expired: bf.Expired,
		Started: bf.Started, Ended: bf.Ended, Partitions: make([]BackfillPartition, 0, len(bf.Done))}
	for q, d := range bf.Done {
		bp := BackfillPartition{Partition: q}
		if prev != nil && q < len(prev.Boundaries) {
			start, last := t.EpochStart(prev.Epoch, q), prev.Boundaries[q]
			if last+1 > start {
				bp.Total = last + 1 - start
				if d+1 > start {
					bp.Handled = min(d, last) + 1 - start
				}
			}
			bp.Complete = d >= last || start > last
		}
		if bp.Complete {
			p.PartitionsDone++
		}
		p.Handled += bp.Handled
		p.Total += bp.Total
		p.Partitions = append(p.Partitions, bp)
	}
	end := now
	if bf.Ended != nil {
		end = *bf.Ended
	}
	if p.Elapsed = end.Sub(bf.Started); p.Elapsed < 0 {
		p.Elapsed = 0
	}
	if s := p.Elapsed.Seconds(); s > 0 {
		p.KeysPerSecond = float64(bf.Copied+bf.Newer+bf.Expired) / s
	}
	return p
}

// BackfillsProgress returns the progress of every backfill the topic recorded, newest first.
func (t *Topic) BackfillsProgress(now time.Time) []BackfillProgress {
	out := []BackfillProgress{}
	for i := len(t.Epochs) - 1; i >= 0; i-- {
		if p := t.BackfillProgress(t.Epochs[i].Epoch, now); p != nil {
			out = append(out, *p)
		}
	}
	return out
}
