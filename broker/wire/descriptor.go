package wire

import (
	"fmt"
	"time"
)

// Topic is a topic descriptor, the value of key <topic> in TopicsBucket (spec/protocol.md §4).
// It changes only by compare-and-set on the KV revision, by the broker.
type Topic struct {
	Name    string    `json:"name"`
	ID      string    `json:"id"` // random, new for every creation of the name
	Created time.Time `json:"created"`
	// Epochs, oldest first; Epochs[len-1] is current. Epoch numbers start at 1 and increase by one.
	Epochs []Epoch `json:"epochs"`
	// Change is the epoch change in progress, if any (issue 5's state machine).
	Change *Change `json:"change,omitempty"`
	// Creating is set until every partition stream exists; Deleting while they are removed.
	Creating bool `json:"creating,omitempty"`
	Deleting bool `json:"deleting,omitempty"`
	// Replicas is the number of replicas of every partition stream (JetStream R1 to R5). 0 in a
	// descriptor written before replicas were recorded: the broker's default (Config.Replicas).
	Replicas int `json:"replicas,omitempty"`
	// PlacementTags, if any, place every partition stream on servers that have all of them
	// (JetStream placement tags; a tag starting with "!" excludes servers that have it).
	PlacementTags []string `json:"placement_tags,omitempty"`
	// Reconfig is a change of Replicas or PlacementTags in progress (spec/protocol.md §7.1).
	Reconfig *Reconfig `json:"reconfig,omitempty"`
	// Compact makes the topic compacted (spec/protocol.md §10): a subject per key, the last
	// record of every key kept, tombstones. Fixed at creation.
	Compact *Compaction `json:"compact,omitempty"`
	// Backfill makes a plain topic backfill at epoch changes (a compacted one always does).
	Backfill bool `json:"backfill,omitempty"`
	// Retiring is a retirement of old epochs' records in progress (spec/protocol.md §10.7).
	Retiring *Retiring `json:"retiring,omitempty"`
}

// Compaction configures a compacted topic.
type Compaction struct {
	// DeleteRetentionMS is the Nats-TTL (in ms; producers send it in seconds) that a tombstone
	// written now gets: the topic's delete retention, or, while the current epoch's backfill
	// runs, TombstoneHoldMS (spec/protocol.md §10.2: a tombstone must not expire before the
	// backfill has decided its key's copy).
	DeleteRetentionMS int64 `json:"delete_retention_ms"`
	// HeldRetentionMS is set while the hold is in force: the topic's own delete retention, which
	// DeleteRetentionMS gets back when the backfill ends.
	HeldRetentionMS int64 `json:"held_retention_ms,omitempty"`
}

// TombstoneHoldMS is the tombstone TTL producers are given while a backfill runs: 100 years,
// which is "never" in practice yet an ordinary whole number of seconds for every producer's
// Nats-TTL (they send delete_retention_ms / 1000).
const TombstoneHoldMS = 100 * 365 * 24 * 60 * 60 * 1000

// Retention is the topic's delete retention (in ms), whether or not a backfill holds tombstones.
func (c *Compaction) Retention() int64 {
	if c.HeldRetentionMS > 0 {
		return c.HeldRetentionMS
	}
	return c.DeleteRetentionMS
}

// Held reports whether tombstones written now are held for a running backfill.
func (c *Compaction) Held() bool { return c.HeldRetentionMS > 0 }

// Retiring is a retirement of epochs <= Through in progress.
type Retiring struct {
	Through int       `json:"through"`
	Started time.Time `json:"started"`
	// Checked: every group was past the epochs' boundaries; the records are being deleted.
	Checked bool `json:"checked,omitempty"`
}

// Backfill is the copying of the previous epoch's records into an epoch (spec/protocol.md §10.3).
type Backfill struct {
	State   string     `json:"state"` // BackfillRunning or BackfillDone
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	// Done[q]: every record of the previous epoch's partition q up to this stream sequence has
	// been handled.
	Done []uint64 `json:"done"`
	// Copied counts copies stored; Newer copies refused because the key already had a newer
	// record (or the copy) in the new partition; Expired tombstones past their retention.
	Copied  int64 `json:"copied"`
	Newer   int64 `json:"newer"`
	Expired int64 `json:"expired"`
}

// Backfill states.
const (
	BackfillRunning = "running"
	BackfillDone    = "done"
)

// Backfills reports whether the topic backfills at epoch changes.
func (t *Topic) Backfills() bool { return t.Compact != nil || t.Backfill }

// KeySubjects reports whether the topic's record subjects carry key tokens (spec/protocol.md
// §10.1): a compacted topic, or a plain topic with backfill (whose copies are chained per key
// subject, §10.3). Every decision on subjects (records, EOBs, stream bindings, fence markers,
// consumers' token checks) asks this, never Compact alone.
func (t *Topic) KeySubjects() bool { return t.Compact != nil || t.Backfill }

// Backfilling returns the epoch whose backfill runs, or nil.
func (t *Topic) Backfilling() *Epoch {
	for i := range t.Epochs {
		if b := t.Epochs[i].Backfill; b != nil && b.State == BackfillRunning {
			return &t.Epochs[i]
		}
	}
	return nil
}

// EpochStart returns the first stream sequence of partition stream q that can hold a record of
// epoch e: one past the fence marker of the last earlier epoch that fenced q (1 if none).
func (t *Topic) EpochStart(e, q int) uint64 {
	start := uint64(1)
	for _, x := range t.Epochs {
		if x.Epoch >= e {
			break
		}
		if q < len(x.Boundaries) {
			start = x.Boundaries[q] + 2
		}
	}
	return start
}

// CurrentEpochStart is the position at which a group that reads the current epoch alone starts
// in stream q (spec/protocol.md §10.5): the sequence of the last fence marker q has, 0 if none.
func (t *Topic) CurrentEpochStart(q int) uint64 {
	var pos uint64
	for _, x := range t.Epochs {
		if q < len(x.Boundaries) && x.Boundaries[q]+1 > pos {
			pos = x.Boundaries[q] + 1
		}
	}
	return pos
}

// OriginRetired reports whether epoch e's records are retired or being retired (a backfilled
// copy of one of them is then delivered: spec/protocol.md §10.4).
func (t *Topic) OriginRetired(e int) bool {
	if t.Retiring != nil && e <= t.Retiring.Through {
		return true
	}
	if len(t.Epochs) > 0 && e < t.Epochs[0].Epoch {
		return true
	}
	ep := t.Epoch(e)
	return ep != nil && ep.Retired
}

// Reconfig is a change of a topic's replicas or placement in progress: every partition stream is
// updated, then Replicas and PlacementTags take the new values and Reconfig is cleared. It
// excludes an epoch change (each waits for the other).
type Reconfig struct {
	Replicas      int       `json:"replicas"`
	PlacementTags []string  `json:"placement_tags,omitempty"`
	Started       time.Time `json:"started"`
}

// Epoch fixes a layout: partitioner, config and partition count.
type Epoch struct {
	Epoch       int         `json:"epoch"`
	Partitioner Partitioner `json:"partitioner"`
	Partitions  int         `json:"partitions"`
	Started     time.Time   `json:"started"`
	// Boundaries[q] is the stream sequence of partition q's last record of this epoch; set when
	// the epoch ends (its partitions are fenced). 0 means the partition had no records up to then.
	Boundaries []uint64 `json:"boundaries,omitempty"`
	// Ancestry of this epoch's partitions from the previous epoch's (nil for epoch 1).
	Ancestry *Ancestry `json:"ancestry,omitempty"`
	// Backfill is the copying of the previous epoch's records into this one (topics that
	// backfill; spec/protocol.md §10.3).
	Backfill *Backfill `json:"backfill,omitempty"`
	// Retired: this epoch's records were deleted (spec/protocol.md §10.7).
	Retired bool `json:"retired,omitempty"`
}

// Partitioner names an epoch's partition function.
type Partitioner struct {
	Name   string `json:"name"`   // declared metadata name, for humans
	Digest string `json:"digest"` // hex SHA-256 of the module: the identity
	Config []byte `json:"config,omitempty"`
}

// Ancestry is partition-level split ancestry from epoch e-1 to epoch e.
type Ancestry struct {
	// Source is "declared" (the plugin's pctl_ancestry, verified by conformance), "observed"
	// (both functions evaluated over the keys stored in the old partitions), "identity" (same
	// function and count) or "all" (every old partition).
	Source string `json:"source"`
	// Parents[child] lists the previous epoch's partitions whose keys may now be in child, as
	// half-open ranges [lo, hi).
	Parents [][][2]int `json:"parents"`
	// Keys, for observed ancestry only, counts the distinct keys seen per edge: Keys[child] lists
	// [parent, keys] pairs, parents ascending, one for every parent that fed child at least one
	// key. Absent for other sources and for epochs of more than MaxAncestryKeyPartitions
	// partitions (spec/protocol.md §4). Informational, like the rest of Ancestry.
	Keys [][][2]int64 `json:"keys,omitempty"`
}

// MaxAncestryKeyPartitions bounds the epochs whose observed ancestry records key counts, so that
// the descriptor of a very large topic does not grow by a pair per edge.
const MaxAncestryKeyPartitions = 1024

// Change is an epoch change in progress. Its steps (spec/protocol.md §5) are idempotent.
type Change struct {
	To         int         `json:"to"` // the epoch being created
	Partitions int         `json:"partitions"`
	Partition  Partitioner `json:"partitioner"`
	State      string      `json:"state"` // "planned", "created", "fenced"
	// Fenced is no longer written: the fence step is recorded for every old partition at once
	// (state "fenced"). Descriptors of older brokers have it, false for every partition until then.
	Fenced     []bool    `json:"fenced,omitempty"`
	Boundaries []uint64  `json:"boundaries,omitempty"`
	Started    time.Time `json:"started"`
	// FenceToken is the random part of this change's fence markers' Nats-Msg-Id
	// (spec/protocol.md §7): drawn when the change is planned (and again if a look-alike
	// claimed it), recorded so that a broker resuming the change re-publishes the same markers.
	FenceToken string `json:"fence_token,omitempty"`
}

// Current returns the current epoch.
func (t *Topic) Current() *Epoch { return &t.Epochs[len(t.Epochs)-1] }

// Epoch returns epoch number e, or nil.
func (t *Topic) Epoch(e int) *Epoch {
	if len(t.Epochs) == 0 {
		return nil
	}
	i := e - t.Epochs[0].Epoch
	if i < 0 || i >= len(t.Epochs) {
		return nil
	}
	return &t.Epochs[i]
}

// MaxPartitions is the number of partition streams the topic has ever had: its streams are
// 0 .. MaxPartitions-1 (partitions shrunk away stay, retired, until drained and the topic is deleted).
func (t *Topic) MaxPartitions() int {
	m := 0
	for _, e := range t.Epochs {
		if e.Partitions > m {
			m = e.Partitions
		}
	}
	if t.Change != nil && t.Change.Partitions > m {
		m = t.Change.Partitions
	}
	return m
}

// Validate checks the descriptor's internal consistency.
func (t *Topic) Validate() error {
	if err := ValidTopic(t.Name); err != nil {
		return err
	}
	if len(t.Epochs) == 0 {
		return fmt.Errorf("topic %s has no epochs", t.Name)
	}
	for i, e := range t.Epochs {
		if e.Epoch != t.Epochs[0].Epoch+i || e.Partitions < 1 {
			return fmt.Errorf("topic %s: epoch %d is malformed", t.Name, e.Epoch)
		}
		if i < len(t.Epochs)-1 && len(e.Boundaries) != e.Partitions {
			return fmt.Errorf("topic %s: ended epoch %d has %d boundaries for %d partitions", t.Name, e.Epoch, len(e.Boundaries), e.Partitions)
		}
	}
	return nil
}

// Lag is the number of records (not messages: fence markers are not counted, spec/protocol.md
// §6.4) in partition q's stream after a group's committed position and up to end (its last
// sequence): what the group has still to deliver there. It is 0 when the position is at or past
// end.
func (t *Topic) Lag(q int, position, end uint64) uint64 {
	if end <= position {
		return 0
	}
	return end - position - uint64(t.FenceMarkers(q, position, end))
}

// FenceMarkers counts the fence markers in partition q's stream with sequences in (from, to]:
// one right after each ended epoch's boundary of q (spec/protocol.md §7).
func (t *Topic) FenceMarkers(q int, from, to uint64) int {
	n := 0
	for _, e := range t.Epochs {
		if q < len(e.Boundaries) {
			if m := e.Boundaries[q] + 1; m > from && m <= to {
				n++
			}
		}
	}
	return n
}
