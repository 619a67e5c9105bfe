package wire_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner"
)

// BenchmarkDescriptorSize measures the topic descriptor (the KV value every step of an epoch
// change writes, and every producer and member reads on each topic event) of a jump topic grown
// 1,024 -> 2,048 -> 8,192 -> 16,384 partitions (issue 17 item 4), with realistic boundaries
// (sequence numbers of six to seven digits) and the declared ancestry jump gives: the size during
// each change (state "fenced": the change's Boundaries filled) and after it, and the same
// descriptors in the format written before issue 17 (every ancestry as a list per child, the
// change's "fenced" list of one flag per old partition) as the baseline. It measures; it asserts
// nothing about the sizes.
//
//	go test -run '^$' -bench DescriptorSize ./broker/wire/
func BenchmarkDescriptorSize(b *testing.B) {
	jump, err := partitioner.Native("jump")
	if err != nil {
		b.Fatal(err)
	}
	p := wire.Partitioner{Name: "jump", Digest: jump.Digest()}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	t := &wire.Topic{Name: "big", ID: "0123456789abcdef0123456789abcdef", Created: now,
		Epochs: []wire.Epoch{{Epoch: 1, Partitioner: p, Partitions: 1024, Started: now}}}
	boundaries := func(n int) []uint64 {
		bs := make([]uint64, n)
		for q := range bs {
			bs[q] = 1_000_000 + uint64(q)*7919%1_000_000
		}
		return bs
	}
	var line []string
	for _, to := range []int{2048, 8192, 16384} {
		cur := t.Current()
		anc := &wire.Ancestry{Source: "declared", Parents: make([][][2]int, to)}
		for c := 0; c < to; c++ {
			rs, err := jump.Ancestry(int32(cur.Partitions), int32(to), int32(c))
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range rs {
				anc.Parents[c] = append(anc.Parents[c], [2]int{int(r.Lo), int(r.Hi)})
			}
		}
		t.Change = &wire.Change{To: cur.Epoch + 1, Partitions: to, Partition: p, State: "fenced",
			Boundaries: boundaries(cur.Partitions), Started: now, FenceToken: "0123456789abcdef0123456789abcdef"}
		during, err := json.Marshal(t)
		if err != nil {
			b.Fatal(err)
		}
		duringOld := oldFormat(b, t)
		cur.Boundaries = t.Change.Boundaries
		t.Epochs = append(t.Epochs, wire.Epoch{Epoch: cur.Epoch + 1, Partitioner: p, Partitions: to, Started: now, Ancestry: anc})
		t.Change = nil
		after, err := json.Marshal(t)
		if err != nil {
			b.Fatal(err)
		}
		afterOld := oldFormat(b, t)
		ancBytes, _ := json.Marshal(anc)
		b.ReportMetric(float64(len(after))/1024, fmt.Sprintf("KiB-after-%d", to))
		b.ReportMetric(float64(len(afterOld))/1024, fmt.Sprintf("KiB-after-%d-old-format", to))
		line = append(line, fmt.Sprintf("-> %d: %.0f KiB during the change (%.0f KiB in the old format), %.0f KiB after (%.0f KiB; its ancestry %.1f KiB)",
			to, float64(len(during))/1024, float64(len(duringOld))/1024, float64(len(after))/1024, float64(len(afterOld))/1024, float64(len(ancBytes))/1024))
	}
	b.Logf("descriptor of a jump topic grown from 1,024 partitions: %s", strings.Join(line, "; "))
	for i := 0; i < b.N; i++ {
		if _, err := json.Marshal(t); err != nil {
			b.Fatal(err)
		}
	}
}

// oldFormat is the JSON the descriptor had before issue 17: each ancestry a list per child, the
// change with a "fenced" flag per old partition (all true once fenced).
func oldFormat(b *testing.B, t *wire.Topic) []byte {
	body, err := json.Marshal(t)
	if err != nil {
		b.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		b.Fatal(err)
	}
	type list struct {
		Source  string     `json:"source"`
		Parents [][][2]int `json:"parents"`
	}
	for i, e := range m["epochs"].([]any) {
		if a := t.Epochs[i].Ancestry; a != nil {
			e.(map[string]any)["ancestry"] = list{Source: a.Source, Parents: a.Parents}
		}
	}
	if ch := t.Change; ch != nil {
		fenced := make([]bool, t.Current().Partitions)
		for q := range fenced {
			fenced[q] = ch.State == "fenced"
		}
		m["change"].(map[string]any)["fenced"] = fenced
	}
	out, err := json.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	return out
}
