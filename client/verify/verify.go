// Package verify is pctl's independent order checker. It knows nothing of brokers, epochs or
// partitioners: it compares what producers say they sent (and which sends were acknowledged)
// with what each consumer group delivered, in delivery order, and reports per-key order
// violations, lost acknowledged records, records delivered with another key than they were
// sent with, records no producer sent, and duplicates (DESIGN.md §4).
//
// The sent logs themselves must be sound: a (producer, sequence) pair that appears twice is a
// defect of the producer (or of the logs) and fails the check; the two records are never merged.
//
// The rules, per consumer group, for every (producer, key):
//   - every acknowledged record is delivered at least once (else: lost);
//   - the first deliveries come in the producer's order with no acknowledged record skipped: when
//     record n is delivered for the first time, every acknowledged record of that producer and
//     key sent before n has been delivered already (else: violation);
//   - a record is delivered with the key it was sent with, and keyless if it was sent keyless
//     (else: wrong key);
//   - a delivered record is one a sent log contains (else: unexpected); one that was sent but
//     not acknowledged may be delivered (the broker may have stored it before the ack was lost);
//   - a record delivered again is a duplicate: allowed after a member crash, counted, and a
//     failure when the caller says no crash happened (Options.NoDuplicates).
//
// A group the caller expects (Options.Groups) is reported even when it delivered nothing: then
// every acknowledged record is lost. Keyless records are checked for loss, key and duplicates
// only: no order is promised for them.
package verify

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Sent is one record a producer sent.
type Sent struct {
	Producer string `json:"producer"`
	PSeq     uint64 `json:"pseq"` // the producer's sequence number, increasing in send order
	Key      []byte `json:"key,omitempty"`
	NoKey    bool   `json:"nokey,omitempty"`
	Acked    bool   `json:"acked"`
}

// Delivered is one delivery to a consumer group member. Order is a global delivery order (a
// shared counter in one process, or a timestamp in nanoseconds across processes).
type Delivered struct {
	Group    string `json:"group"`
	Member   string `json:"member,omitempty"`
	Order    int64  `json:"order"`
	Producer string `json:"producer"`
	PSeq     uint64 `json:"pseq"`
	Key      []byte `json:"key,omitempty"`
	NoKey    bool   `json:"nokey,omitempty"`
}

// Options say what the caller knows about the run.
type Options struct {
	// Groups are the consumer groups that must be reported. A group named here that delivered
	// nothing is reported with every acknowledged record lost. Groups found in the deliveries
	// are reported too.
	Groups []string
	// PartialLogs says that not every producer's log was given: a delivery from a producer that
	// no sent log names is then counted as Unlogged instead of failing as Unexpected. A delivery
	// that a given producer's log does not contain still fails. Default false: the logs of
	// every producer were given.
	PartialLogs bool
	// NoDuplicates makes any duplicate delivery a failure: for runs that injected no crash
	// (duplicates are promised only after one). Default false: duplicates are counted only.
	NoDuplicates bool
	// Compacted checks a compacted topic (spec/protocol.md §10), whose log keeps only the latest
	// record of each key: an acknowledged record that was not delivered is not lost when a later
	// record of the same producer and key was delivered (compacted away, counted as Compacted),
	// and the order rule is that a (producer, key)'s first deliveries come in increasing
	// sequence. Records of one key written by several producers have no order the checker
	// knows: give each key one producer.
	Compacted bool
}

// The failure kinds of Report.Failures and Result.Failures.
const (
	FailNoGroups   = "no-groups"  // Result: nothing to check: no group expected, none delivered
	FailReusedSeq  = "reused-seq" // Result: a (producer, pseq) appears more than once in the sent logs
	FailLost       = "lost"       // an acknowledged record was never delivered
	FailOrder      = "order"      // a per-key order violation
	FailWrongKey   = "wrong-key"  // delivered with another key (or keylessness) than sent
	FailUnexpected = "unexpected" // delivered, but in no sent log
	FailDuplicates = "duplicates" // a duplicate under Options.NoDuplicates
)

// Report is the verdict for one group. Every count is kept, so that scripts can check each one.
type Report struct {
	Group      string `json:"group"`
	Sent       int    `json:"sent"`       // records in the sent logs
	Acked      int    `json:"acked"`      // acknowledged records in the sent logs
	Deliveries int    `json:"deliveries"` // deliveries to this group, duplicates included
	Distinct   int    `json:"distinct"`   // distinct acknowledged records delivered
	Lost       int    `json:"lost"`       // acknowledged, never delivered
	Violations int    `json:"violations"` // per-key order violations
	WrongKey   int    `json:"wrong_key"`  // deliveries whose key or keylessness differs from the sent record's
	Duplicates int    `json:"duplicates"` // deliveries of a record already delivered
	Unacked    int    `json:"unacked"`    // deliveries of a record sent but not acknowledged (allowed)
	Unexpected int    `json:"unexpected"` // deliveries of a record no sent log contains
	Unlogged   int    `json:"unlogged"`   // Options.PartialLogs: deliveries from producers no log names
	Compacted  int    `json:"compacted"`  // Options.Compacted: acknowledged, superseded by a later record of the key that was delivered
	// Failures lists the failure kinds (the Fail constants) found; empty when the group is OK.
	Failures []string `json:"failures"`
	Examples []string `json:"examples,omitempty"`
}

// OK reports whether the group lost nothing, broke no order, delivered every record with its
// own key and delivered nothing unexpected (nor duplicates, under Options.NoDuplicates).
func (r Report) OK() bool { return len(r.Failures) == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("group %s: %d sent, %d acknowledged, %d deliveries (%d distinct), %d lost, %d order violations, %d wrong keys, %d duplicates, %d unexpected, %d unacknowledged delivered",
		r.Group, r.Sent, r.Acked, r.Deliveries, r.Distinct, r.Lost, r.Violations, r.WrongKey, r.Duplicates, r.Unexpected, r.Unacked)
	if r.Unlogged > 0 {
		s += fmt.Sprintf(", %d from producers without a log", r.Unlogged)
	}
	if r.Compacted > 0 {
		s += fmt.Sprintf(", %d compacted away (a later record of the key was delivered)", r.Compacted)
	}
	if len(r.Failures) == 0 {
		return s + ": OK"
	}
	return s + ": FAILED (" + strings.Join(r.Failures, ", ") + ")"
}

// Result is the verdict of a whole check: the sent logs' soundness and one report per group.
type Result struct {
	Sent       int `json:"sent"`
	Acked      int `json:"acked"`
	Producers  int `json:"producers"`
	ReusedSeqs int `json:"reused_seqs"` // (producer, pseq) pairs that appear more than once in the sent logs
	// Failures lists the failure kinds of the whole check: the sent logs' own, and every
	// group's (each once); empty when everything is OK.
	Failures []string `json:"failures"`
	Examples []string `json:"examples,omitempty"` // about the sent logs
	Groups   []Report `json:"groups"`
}

// OK reports whether the sent logs are sound, at least one group was checked, and every group
// is OK.
func (r *Result) OK() bool { return len(r.Failures) == 0 }

// Group returns the report of one group, or nil.
func (r *Result) Group(name string) *Report {
	for i := range r.Groups {
		if r.Groups[i].Group == name {
			return &r.Groups[i]
		}
	}
	return nil
}

func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent logs: %d records of %d producers, %d acknowledged, %d reused (producer, pseq)", r.Sent, r.Producers, r.Acked, r.ReusedSeqs)
	for _, ex := range r.Examples {
		fmt.Fprintf(&b, "\n  %s", ex)
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "\n%s", g)
		for _, ex := range g.Examples {
			fmt.Fprintf(&b, "\n  %s", ex)
		}
	}
	if r.OK() {
		b.WriteString("\nOK")
	} else {
		fmt.Fprintf(&b, "\nFAILED: %s", strings.Join(r.Failures, ", "))
	}
	return b.String()
}

const maxExamples = 10

type id struct {
	producer string
	pseq     uint64
}

type stream struct{ producer, key string }

// sentIndex is the sent logs, checked and indexed once for every group.
type sentIndex struct {
	sent      int
	acked     map[id]Sent
	all       map[id]Sent
	producers map[string]bool
	seqs      map[stream][]uint64 // acknowledged pseqs per (producer, key), sorted
}

// Check checks every group's deliveries against the sent logs. Groups are those named in
// opts.Groups and those present in delivered, sorted by name.
func Check(sent []Sent, delivered []Delivered, opts Options) *Result {
	res := &Result{Sent: len(sent)}
	idx := &sentIndex{sent: len(sent), acked: map[id]Sent{}, all: map[id]Sent{}, producers: map[string]bool{}, seqs: map[stream][]uint64{}}
	reused := map[id]int{}
	for _, s := range sent {
		i := id{s.Producer, s.PSeq}
		idx.producers[s.Producer] = true
		if first, dup := idx.all[i]; dup {
			// Never merged: the first record stands for the group checks, and the run fails.
			if reused[i]++; reused[i] == 1 {
				res.ReusedSeqs++
				if len(res.Examples) < maxExamples {
					res.Examples = append(res.Examples, fmt.Sprintf("producer %s used sequence %d for more than one record (keys %s and %s): a producer must never reuse a sequence number (or the same log was given twice)",
						s.Producer, s.PSeq, keyText(first.Key, first.NoKey), keyText(s.Key, s.NoKey)))
				}
			}
			continue
		}
		idx.all[i] = s
		if !s.Acked {
			continue
		}
		res.Acked++
		idx.acked[i] = s
		if !s.NoKey {
			k := stream{s.Producer, string(s.Key)}
			idx.seqs[k] = append(idx.seqs[k], s.PSeq)
		}
	}
	res.Producers = len(idx.producers)
	for k := range idx.seqs {
		sort.Slice(idx.seqs[k], func(i, j int) bool { return idx.seqs[k][i] < idx.seqs[k][j] })
	}
	if res.ReusedSeqs > 0 {
		res.Failures = append(res.Failures, FailReusedSeq)
	}

	groups := map[string][]Delivered{}
	for _, g := range opts.Groups {
		if _, ok := groups[g]; !ok {
			groups[g] = nil // reported even if it delivered nothing
		}
	}
	for _, d := range delivered {
		groups[d.Group] = append(groups[d.Group], d)
	}
	var names []string
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	if len(names) == 0 {
		res.Failures = append(res.Failures, FailNoGroups)
	}
	seen := map[string]bool{}
	for _, g := range names {
		rep := idx.checkGroup(g, groups[g], opts)
		for _, f := range rep.Failures {
			if !seen[f] {
				seen[f] = true
				res.Failures = append(res.Failures, f)
			}
		}
		res.Groups = append(res.Groups, rep)
	}
	if res.Failures == nil {
		res.Failures = []string{}
	}
	return res
}

func keyText(key []byte, noKey bool) string {
	if noKey {
		return "(none)"
	}
	return fmt.Sprintf("%q", key)
}

// checkGroup checks one group's deliveries.
func (idx *sentIndex) checkGroup(group string, delivered []Delivered, opts Options) Report {
	r := Report{Group: group, Sent: idx.sent, Acked: len(idx.acked), Deliveries: len(delivered)}
	example := func(format string, args ...any) {
		if len(r.Examples) < maxExamples {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}
	ds := append([]Delivered(nil), delivered...)
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].Order < ds[j].Order })
	seen := map[id]bool{}
	next := map[stream]int{} // index in seqs of the next acknowledged record expected first
	overtaken := map[id]bool{}
	maxFirst := map[stream]uint64{} // Compacted: the highest sequence delivered per (producer, key)
	for _, d := range ds {
		i := id{d.Producer, d.PSeq}
		s, ok := idx.acked[i]
		if !ok {
			switch _, sentUnacked := idx.all[i]; {
			case sentUnacked:
				r.Unacked++
			case opts.PartialLogs && !idx.producers[d.Producer]:
				r.Unlogged++
			default:
				r.Unexpected++
				example("record %d of producer %s (key %s) was delivered, but no sent log contains it", d.PSeq, d.Producer, keyText(d.Key, d.NoKey))
			}
			continue
		}
		if d.NoKey != s.NoKey || !bytes.Equal(d.Key, s.Key) {
			r.WrongKey++
			example("record %d of producer %s was sent with key %s and delivered with key %s", d.PSeq, d.Producer, keyText(s.Key, s.NoKey), keyText(d.Key, d.NoKey))
		}
		if seen[i] {
			r.Duplicates++
			if opts.NoDuplicates {
				example("record %d of producer %s (key %s) was delivered again, and no crash was injected", d.PSeq, d.Producer, keyText(s.Key, s.NoKey))
			}
			continue
		}
		seen[i] = true
		r.Distinct++
		if s.NoKey || overtaken[i] {
			continue // keyless: no order promised; overtaken: counted when a later record overtook it
		}
		k := stream{d.Producer, string(s.Key)}
		if opts.Compacted {
			if d.PSeq < maxFirst[k] {
				r.Violations++
				example("key %q of producer %s: record %d delivered after record %d", s.Key, d.Producer, d.PSeq, maxFirst[k])
				continue
			}
			maxFirst[k] = d.PSeq
			continue
		}
		list, n := idx.seqs[k], next[k]
		if n < len(list) && list[n] == d.PSeq {
			next[k] = n + 1
			continue
		}
		// Delivered for the first time while an earlier acknowledged record of the same key and
		// producer was not delivered yet.
		r.Violations++
		example("key %q of producer %s: record %d delivered before record %d", s.Key, d.Producer, d.PSeq, list[n])
		// Resynchronise past this record so one inversion is counted once.
		for n < len(list) && list[n] != d.PSeq {
			overtaken[id{d.Producer, list[n]}] = true
			n++
		}
		next[k] = n + 1
	}
	var lost []Sent
	for i, s := range idx.acked {
		if !seen[i] {
			if opts.Compacted && !s.NoKey && maxFirst[stream{s.Producer, string(s.Key)}] > s.PSeq {
				r.Compacted++
				continue
			}
			lost = append(lost, s)
		}
	}
	r.Lost = len(lost)
	sort.Slice(lost, func(i, j int) bool {
		if lost[i].Producer != lost[j].Producer {
			return lost[i].Producer < lost[j].Producer
		}
		return lost[i].PSeq < lost[j].PSeq
	})
	if len(delivered) == 0 && len(lost) > 0 {
		example("the group delivered nothing: every one of the %d acknowledged records is lost", len(lost))
	}
	for _, s := range lost {
		example("acknowledged record %d of producer %s (key %s) was never delivered", s.PSeq, s.Producer, keyText(s.Key, s.NoKey))
	}
	r.Failures = []string{}
	for _, f := range []struct {
		kind string
		bad  bool
	}{
		{FailLost, r.Lost > 0},
		{FailOrder, r.Violations > 0},
		{FailWrongKey, r.WrongKey > 0},
		{FailUnexpected, r.Unexpected > 0},
		{FailDuplicates, opts.NoDuplicates && r.Duplicates > 0},
	} {
		if f.bad {
			r.Failures = append(r.Failures, f.kind)
		}
	}
	return r
}

// ReadSent reads JSON lines of Sent.
func ReadSent(r io.Reader) ([]Sent, error) { return readLines[Sent](r) }

// ReadDelivered reads JSON lines of Delivered.
func ReadDelivered(r io.Reader) ([]Delivered, error) { return readLines[Delivered](r) }

func readLines[T any](r io.Reader) ([]T, error) {
	var out []T
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}
