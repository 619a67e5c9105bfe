// Package verify is pctl's independent order checker. It knows nothing of brokers, epochs or
// partitioners: it compares what producers say they sent (and which sends were acknowledged)
// with what each consumer group delivered, in delivery order, and reports per-key order
// violations, lost acknowledged records and duplicates (DESIGN.md §4).
//
// The rules, per consumer group, for every (producer, key):
//   - every acknowledged record is delivered at least once (else: lost);
//   - the first deliveries come in the producer's order with no acknowledged record skipped: when
//     record n is delivered for the first time, every acknowledged record of that producer and
//     key sent before n has been delivered already (else: violation);
//   - a record delivered again is a duplicate (allowed after a member crash; counted).
//
// Keyless records are checked for loss and duplicates only: no order is promised for them.
package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
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

// Report is the verdict for one group.
type Report struct {
	Group      string   `json:"group"`
	Sent       int      `json:"sent"`
	Acked      int      `json:"acked"`
	Deliveries int      `json:"deliveries"`
	Lost       int      `json:"lost"`
	Duplicates int      `json:"duplicates"`
	Violations int      `json:"violations"`
	Unexpected int      `json:"unexpected"` // delivered but never acknowledged (a send that failed, or unknown)
	Examples   []string `json:"examples,omitempty"`
}

// OK reports whether the group lost nothing and broke no order.
func (r Report) OK() bool { return r.Lost == 0 && r.Violations == 0 }

func (r Report) String() string {
	return fmt.Sprintf("group %s: %d sent, %d acknowledged, %d deliveries, %d lost, %d order violations, %d duplicates, %d unexpected",
		r.Group, r.Sent, r.Acked, r.Deliveries, r.Lost, r.Violations, r.Duplicates, r.Unexpected)
}

type stream struct{ producer, key string }

// Check returns one report per group present in delivered (sorted by group).
func Check(sent []Sent, delivered []Delivered) []Report {
	groups := map[string][]Delivered{}
	for _, d := range delivered {
		groups[d.Group] = append(groups[d.Group], d)
	}
	var names []string
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	var out []Report
	for _, g := range names {
		out = append(out, CheckGroup(g, sent, groups[g]))
	}
	return out
}

// CheckGroup checks one group's deliveries.
func CheckGroup(group string, sent []Sent, delivered []Delivered) Report {
	r := Report{Group: group, Sent: len(sent), Deliveries: len(delivered)}
	example := func(format string, args ...any) {
		if len(r.Examples) < 10 {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}
	type id struct {
		producer string
		pseq     uint64
	}
	acked := map[id]Sent{}
	seqs := map[stream][]uint64{} // acknowledged pseqs per (producer, key), sorted
	for _, s := range sent {
		if !s.Acked {
			continue
		}
		r.Acked++
		acked[id{s.Producer, s.PSeq}] = s
		if !s.NoKey {
			k := stream{s.Producer, string(s.Key)}
			seqs[k] = append(seqs[k], s.PSeq)
		}
	}
	for k := range seqs {
		sort.Slice(seqs[k], func(i, j int) bool { return seqs[k][i] < seqs[k][j] })
	}
	ds := append([]Delivered(nil), delivered...)
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].Order < ds[j].Order })
	seen := map[id]bool{}
	next := map[stream]int{} // index in seqs of the next acknowledged record expected first
	overtaken := map[id]bool{}
	for _, d := range ds {
		i := id{d.Producer, d.PSeq}
		s, ok := acked[i]
		if !ok {
			r.Unexpected++
			continue
		}
		if seen[i] {
			r.Duplicates++
			continue
		}
		seen[i] = true
		if s.NoKey {
			continue
		}
		k := stream{d.Producer, string(s.Key)}
		list, n := seqs[k], next[k]
		if overtaken[i] {
			continue // already counted when a later record overtook it
		}
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
	for i, s := range acked {
		if !seen[i] {
			r.Lost++
			example("acknowledged record %d of producer %s (key %q) was never delivered", s.PSeq, s.Producer, s.Key)
		}
	}
	return r
}

// ReadSent reads JSON lines of Sent.
func ReadSent(r io.Reader) ([]Sent, error) {
	var out []Sent
	return out, readLines(r, func(b []byte) error {
		var s Sent
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	}, &out)
}

// ReadDelivered reads JSON lines of Delivered.
func ReadDelivered(r io.Reader) ([]Delivered, error) {
	var out []Delivered
	return out, readLines(r, func(b []byte) error {
		var d Delivered
		if err := json.Unmarshal(b, &d); err != nil {
			return err
		}
		out = append(out, d)
		return nil
	}, &out)
}

func readLines[T any](r io.Reader, f func([]byte) error, _ *[]T) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := f(sc.Bytes()); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
	}
	return sc.Err()
}
