// Package protovec holds pctl's protocol trace vectors (spec/vectors/protocol/*.jsonl,
// spec/vectors/README.md): hand-written traces, each pinning one rule of spec/protocol.md with
// the expected decisions written from the rule's text, not from the code; their serialisation
// (the generator ./internal/proto/gen only writes what Files returns); and a replayer that runs
// the JSONL files against an implementation of the rules (Core), as every SDK's replay test does
// against its own.
package protovec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"pctl.dev/pctl/internal/proto"
)

// Format names the file format in every header line.
const Format = "pctl-protocol-trace/1"

// File is one spec/vectors/protocol/<Rule>.jsonl: a header line, then one line per trace.
type File struct {
	Rule    string  `json:"rule"`
	Role    string  `json:"role"`    // "consumer" or "producer"
	Section string  `json:"section"` // of spec/protocol.md, e.g. "6.5"
	Title   string  `json:"title"`
	Doc     string  `json:"doc"`
	Format  string  `json:"format"`
	Traces  []Trace `json:"-"`
}

// Topic is the part of a topic descriptor the rules read (spec/protocol.md §4).
type Topic struct {
	Epochs []Epoch `json:"epochs"`
}

// Epoch is one epoch of a Topic; Boundaries is absent for the current epoch.
type Epoch struct {
	Epoch      int      `json:"epoch"`
	Partitions int      `json:"partitions"`
	Boundaries []uint64 `json:"boundaries,omitempty"`
}

// F is one value of the partition function: f_epoch(key, N_epoch) = partition. A trace lists
// every value its events need, so a replay runs no partitioner.
type F struct {
	Epoch     int    `json:"epoch"`
	KeyHex    string `json:"key_hex"`
	Partition int    `json:"partition"`
}

// Trace is a sequence of events, starting from an initial state, with the decision expected after
// each event that asks for one.
type Trace struct {
	Name      string `json:"trace"`
	Doc       string `json:"doc"`
	Member    string `json:"member,omitempty"`     // the replaying member's id
	SessionMS int64  `json:"session_ms,omitempty"` // the member's session timeout
	Topic     Topic  `json:"topic"`
	F         []F    `json:"f,omitempty"`
	Steps     []Step `json:"steps"`
}

// Step is one event and, for a query, the decision expected (exactly this JSON object).
type Step struct {
	Event  Event `json:"event"`
	Expect any   `json:"expect,omitempty"`
}

// Event is one event; exactly one field is set. State events (Positions, Lease, Now,
// Descriptor) change the replay's state and expect nothing; the others are queries.
type Event struct {
	// Positions sets group positions: partition (decimal string) -> committed position.
	Positions map[string]uint64 `json:"positions,omitempty"`
	// Lease sets what the member knows of a partition's lease (owner "" = none).
	Lease *Lease `json:"lease,omitempty"`
	// Now sets the member's clock, unix milliseconds.
	Now *int64 `json:"now,omitempty"`
	// Descriptor replaces the topic descriptor (a re-read).
	Descriptor *Topic `json:"descriptor,omitempty"`

	// Record: a keyed record read from a partition. Expect GateOut.
	Record *Record `json:"record,omitempty"`
	// DrainedThrough: expect DrainedOut.
	DrainedThrough *struct{} `json:"drained_through,omitempty"`
	// Assignable: expect AssignableOut.
	Assignable *struct{} `json:"assignable,omitempty"`
	// PastBoundary: is the group past this boundary for keys assigned? Expect PastOut.
	PastBoundary *PartitionAt `json:"past_boundary,omitempty"`
	// MaxSkew: the clock-skew bound for the trace's session timeout. Expect SkewOut.
	MaxSkew *struct{} `json:"max_skew,omitempty"`
	// Acquire: may the member take a partition whose key shows this lease? Expect AcquireOut.
	Acquire *Lease `json:"acquire,omitempty"`
	// Deliver: may the holder of a lease ending at LeaseUntil deliver a record now? Expect DeliverOut.
	Deliver *Deliver `json:"deliver,omitempty"`
	// Marker: a fence marker read. Expect MarkerOut; its Revoke steps count as run.
	Marker *MarkerIn `json:"marker,omitempty"`
	// At: the member's position in a partition it owns moved to Position (a record or marker
	// handled, or its start). Expect AtOut; its Revoke steps count as run.
	At *PartitionPos `json:"at,omitempty"`
	// Acquired: the member acquired a partition at Position. Expect AcquiredOut; the Passed
	// steps count as run.
	Acquired *PartitionPos `json:"acquired,omitempty"`

	// FenceResend: a producer's sinks were fenced with these records unacknowledged; the
	// descriptor's current epoch is the new one and f gives its partitions. Expect ResendOut.
	FenceResend *FenceResend `json:"fence_resend,omitempty"`
	// Search: where a sink's search for a batch's stored prefix reads. Expect SearchOut.
	Search *SearchIn `json:"search,omitempty"`
	// Batches: how a sink's queue is cut into batches. Expect BatchesOut.
	Batches *BatchesIn `json:"batches,omitempty"`

	// The producer's sticky-ambiguity state machine (§5.1.2): each of these is an event to it
	// and expects StickyOut, the actions it returns. The machine starts at the trace's current
	// epoch with no records; f gives every key's partition in every epoch the trace reaches.

	// Produce: the application sends a keyed record (seq, key_hex).
	Produce *ProducerRecord `json:"produce,omitempty"`
	// Acked: a clean acknowledgement covers these records in flight.
	Acked *Seqs `json:"acked,omitempty"`
	// Anomaly: a sink's open batch had an anomaly (also: a timeout while it settles).
	Anomaly *SinkRef `json:"anomaly,omitempty"`
	// Settled: settling the sink's batch decided its ambiguous records: Stored are stored, Failed
	// failed for good (a record in both counts as stored), the others not stored.
	Settled *SettledIn `json:"settled,omitempty"`
	// Drop: the producer failed these records for good before transmitting them (wherever they
	// wait; an ambiguous one is not failed this way).
	Drop *Seqs `json:"drop,omitempty"`
	// NewEpoch: the descriptor shows this epoch current.
	NewEpoch *EpochRef `json:"new_epoch,omitempty"`
	// Close: the producer is closed.
	Close *struct{} `json:"close,omitempty"`
}

// Seqs lists records by Pctl-Seq.
type Seqs struct {
	Seqs []uint64 `json:"seqs"`
}

// SinkRef names a producer's sink: a partition of an epoch.
type SinkRef struct {
	Epoch     int `json:"epoch"`
	Partition int `json:"partition"`
}

// SettledIn is a settling's outcome for a sink's ambiguous records: Stored are stored, Failed
// (absent: none) failed for good, the others not stored.
type SettledIn struct {
	Epoch     int      `json:"epoch"`
	Partition int      `json:"partition"`
	Stored    []uint64 `json:"stored"`
	Failed    []uint64 `json:"failed,omitempty"`
}

// EpochRef names an epoch.
type EpochRef struct {
	Epoch int `json:"epoch"`
}

// Placed is a record to transmit now: its seq, to a partition of an epoch ({seq, epoch,
// partition}).
type Placed = proto.Placed

// StickyOut is the sticky machine's actions after an event ({send, acked, failed}): the records to
// transmit now, in this order; the records acknowledged; the records failed (closed before
// acknowledged, failed for good in settling, dropped). Lists are [] when empty in a vector.
type StickyOut = proto.StickyActions

// ProducerRecord is a record of a producer: its Pctl-Seq and key (or keyless).
type ProducerRecord struct {
	Seq     uint64 `json:"seq,omitempty"`
	KeyHex  string `json:"key_hex"`
	Keyless bool   `json:"keyless,omitempty"`
}

// FenceResend lists the unacknowledged records taken from every fenced sink, sink by sink.
type FenceResend struct {
	Records []ProducerRecord `json:"records"`
}

// ResendOut: Order, every record's seq in re-send order; Partitions, the keyed records' seqs
// in the order each new-epoch partition receives them (partitions ascending, empty ones left
// out; keyless records go to any partition).
type ResendOut struct {
	Order      []uint64        `json:"order"`
	Partitions []PartitionSeqs `json:"partitions"`
}

// PartitionSeqs is what one partition receives.
type PartitionSeqs struct {
	Partition int      `json:"partition"`
	Seqs      []uint64 `json:"seqs"`
}

// SearchIn: the sink's floor, the floors at which the batch's unacknowledged records were first
// sent to this stream, and whether the partition was fenced with which boundary.
type SearchIn struct {
	SinkFloor uint64   `json:"sink_floor"`
	FirstSent []uint64 `json:"first_sent"`
	Fenced    bool     `json:"fenced"`
	Boundary  uint64   `json:"boundary"`
}

// SearchOut: the search reads (Low, Top] backwards; ReadLast: Top is the stream's last sequence
// (read from the server; Top is then 0 here).
type SearchOut struct {
	Low      uint64 `json:"low"`
	Top      uint64 `json:"top"`
	ReadLast bool   `json:"read_last"`
}

// BatchesIn is a sink's queue, whether the per-key rule holds (a cluster) and the batch size.
type BatchesIn struct {
	Records []ProducerRecord `json:"records"`
	PerKey  bool             `json:"per_key"`
	Size    int              `json:"size"`
}

// BatchesOut lists each batch's record indices (into Records).
type BatchesOut struct {
	Batches [][]int `json:"batches"`
}

// Lease is a partition's lease as its key shows it.
type Lease struct {
	Partition int    `json:"partition"`
	Owner     string `json:"owner"`
	LeaseEnd  int64  `json:"lease_end"`
}

// Record is a keyed record of Epoch read from Partition's stream.
type Record struct {
	Epoch     int    `json:"epoch"`
	Partition int    `json:"partition"`
	KeyHex    string `json:"key_hex"`
}

// PartitionAt names a partition's boundary.
type PartitionAt struct {
	Partition int    `json:"partition"`
	Boundary  uint64 `json:"boundary"`
}

// PartitionPos is a member's position in a partition.
type PartitionPos struct {
	Partition int    `json:"partition"`
	Position  uint64 `json:"position"`
}

// Deliver asks whether a holder may deliver.
type Deliver struct {
	LeaseUntil int64 `json:"lease_until"`
}

// MarkerIn is a fence marker `Pctl-Fence: Fence` at stream sequence Seq of Partition.
type MarkerIn struct {
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
	Fence     int    `json:"fence"`
}

// Wait is one unmet gate condition.
type Wait struct {
	Epoch     int    `json:"epoch"`
	Partition int    `json:"partition"`
	Boundary  uint64 `json:"boundary"`
}

// GateOut is the decision for a Record: refresh the descriptor first; or wait for Waits (newest
// epoch first; empty: deliver now); Parent, the key's partition in epoch x-1 (-1 in the first
// epoch); Assigned, the keys-assigned condition when Parent is not the record's partition.
type GateOut struct {
	Refresh  bool   `json:"refresh"`
	Waits    []Wait `json:"waits"`
	Parent   int    `json:"parent"`
	Assigned *Wait  `json:"assigned"`
}

// DrainedOut answers DrainedThrough.
type DrainedOut struct {
	DrainedThrough int `json:"drained_through"`
}

// AssignableOut answers Assignable.
type AssignableOut struct {
	Assignable []int `json:"assignable"`
}

// PastOut answers PastBoundary.
type PastOut struct {
	Past bool `json:"past"`
}

// SkewOut answers MaxSkew.
type SkewOut struct {
	MaxSkewMS int64 `json:"max_skew_ms"`
}

// AcquireOut answers Acquire.
type AcquireOut struct {
	Take bool `json:"take"`
}

// DeliverOut answers Deliver.
type DeliverOut struct {
	Deliver bool `json:"deliver"`
}

// MarkerOut is the decision for a fence marker: refresh the descriptor first; or run keys
// revoked for the epochs in Revoke (oldest first), move the position to Position, commit at once.
type MarkerOut struct {
	Refresh  bool   `json:"refresh"`
	Revoke   []int  `json:"revoke"`
	Position uint64 `json:"position"`
	Commit   bool   `json:"commit"`
}

// AtOut: run keys revoked for Revoke (oldest first), then commit at once when Commit.
type AtOut struct {
	Revoke []int `json:"revoke"`
	Commit bool  `json:"commit"`
}

// AcquiredOut: the keys-revoked steps an earlier owner ran (boundaries below the position).
type AcquiredOut struct {
	Passed []int `json:"passed"`
}

// Marshal writes a file: the header line, then one line per trace.
func (f *File) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b) // one line per value
	enc.SetEscapeHTML(false)
	f.Format = Format
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	for i := range f.Traces {
		t := f.Traces[i]
		if len(t.Topic.Epochs) == 0 {
			return nil, fmt.Errorf("%s: trace %s has no descriptor", f.Rule, t.Name)
		}
		normalise(&t)
		if err := enc.Encode(t); err != nil {
			return nil, fmt.Errorf("%s: trace %s: %w", f.Rule, t.Name, err)
		}
	}
	return b.Bytes(), nil
}

// normalise makes empty lists [] (not null) in expectations, so that every replay compares the
// same JSON.
func normalise(t *Trace) {
	for i := range t.Steps {
		switch e := t.Steps[i].Expect.(type) {
		case GateOut:
			if e.Waits == nil {
				e.Waits = []Wait{}
			}
			t.Steps[i].Expect = e
		case MarkerOut:
			if e.Revoke == nil {
				e.Revoke = []int{}
			}
			t.Steps[i].Expect = e
		case AtOut:
			if e.Revoke == nil {
				e.Revoke = []int{}
			}
			t.Steps[i].Expect = e
		case AcquiredOut:
			if e.Passed == nil {
				e.Passed = []int{}
			}
			t.Steps[i].Expect = e
		case AssignableOut:
			if e.Assignable == nil {
				e.Assignable = []int{}
			}
			t.Steps[i].Expect = e
		case StickyOut:
			t.Steps[i].Expect = normalSticky(e)
		}
	}
}

// normalSticky makes StickyOut's empty lists [].
func normalSticky(o StickyOut) StickyOut {
	if o.Send == nil {
		o.Send = []Placed{}
	}
	if o.Acked == nil {
		o.Acked = []uint64{}
	}
	if o.Failed == nil {
		o.Failed = []uint64{}
	}
	return o
}

// pos builds a Positions event.
func pos(kv ...uint64) Event {
	m := map[string]uint64{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[strconv.FormatUint(kv[i], 10)] = kv[i+1]
	}
	return Event{Positions: m}
}

// sortedKeys is used by the replayer for deterministic iteration.
func sortedKeys(m map[string]uint64) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// Write writes every file to dir/<rule>.jsonl.
func Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	for _, f := range Files() {
		b, err := f.Marshal()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f.Rule+".jsonl"), b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", f.Rule, err)
		}
	}
	return nil
}
