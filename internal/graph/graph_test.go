package graph

import (
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"

	"pctl.dev/pctl/broker/wire"
)

// small is a topic written out by hand: 2 partitions, then 4 (observed, with key counts), then 1
// (every old partition feeds it).
func small() *wire.Topic {
	return &wire.Topic{Name: "orders", Epochs: []wire.Epoch{
		{Epoch: 1, Partitioner: wire.Partitioner{Name: "jump"}, Partitions: 2, Boundaries: []uint64{10, 6}},
		{Epoch: 2, Partitioner: wire.Partitioner{Name: "jump"}, Partitions: 4, Boundaries: []uint64{3, 3, 2, 5},
			Ancestry: &wire.Ancestry{Source: "observed",
				Parents: [][][2]int{{{0, 1}}, {{1, 2}}, {{0, 1}}, {{1, 2}}},
				Keys:    [][][2]int64{{{0, 3}}, {{1, 2}}, {{0, 1}}, {{1, 4}}}}},
		{Epoch: 3, Partitioner: wire.Partitioner{Name: "kafka-murmur2"}, Partitions: 1,
			Ancestry: &wire.Ancestry{Source: "all", Parents: [][][2]int{{{0, 4}}}}},
	}}
}

func TestText(t *testing.T) {
	var b bytes.Buffer
	if err := Text(&b, Build(small(), Options{})); err != nil {
		t.Fatal(err)
	}
	want := `topic orders: ancestry of 3 epoch(s)
epoch 1: jump, 2 partitions
epoch 2: jump, 4 partitions; ancestry observed, 10 keys
  0 <- 0 (3 keys)
  1 <- 1 (2 keys)
  2 <- 0 (1 key)
  3 <- 1 (4 keys)
epoch 3 (current): kafka-murmur2, 1 partition; ancestry all
  0 <- 0-3
`
	if b.String() != want {
		t.Fatalf("text:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestChangeInProgress: a planned epoch is drawn after the current one, fed by every partition.
func TestChangeInProgress(t *testing.T) {
	tp := small()
	tp.Change = &wire.Change{To: 4, Partitions: 3, Partition: wire.Partitioner{Name: "jump"}, State: "created"}
	g := Build(tp, Options{})
	last := g.Columns[len(g.Columns)-1]
	if !last.Planned || last.State != "created" || last.Epoch != 4 || g.Columns[2].Current != true {
		t.Fatalf("columns: %+v", g.Columns)
	}
	n := 0
	for _, e := range g.Edges {
		if e.Col == 2 {
			n++
			if !e.Unknown {
				t.Fatalf("edge into a planned epoch has keys: %+v", e)
			}
		}
	}
	if n != 3 {
		t.Fatalf("%d edges into the planned epoch, want 3 (1 old partition x 3 new)", n)
	}
	var b bytes.Buffer
	_ = Text(&b, g)
	if !strings.Contains(b.String(), "epoch 4 (planned): jump, 3 partitions; ancestry change in progress: created\n  0-2 <- 0\n") {
		t.Fatalf("text of a change in progress:\n%s", b.String())
	}
}

func TestDOT(t *testing.T) {
	var b bytes.Buffer
	if err := DOT(&b, Build(small(), Options{})); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{
		`digraph "ancestry orders" {`,
		`e1n0 -> e2n0 [penwidth=`, `label="3"`,
		`e1n1 -> e2n3 [penwidth=9.00, label="4"]`, // the largest edge is the widest
		`e2n3 -> e3n0 [style=dashed]`,
	} {
		if !strings.Contains(s, want) {
			t.Fatalf("dot lacks %q:\n%s", want, s)
		}
	}
	if got := strings.Count(s, "->"); got != 4+4 {
		t.Fatalf("%d edges, want 8 (4 observed, 4 into the last epoch)", got)
	}
}

// svgDoc is what the tests read back from an SVG.
type svgDoc struct {
	Paths []svgEl // the edges
	Epoch []svgGroup
}

type svgGroup struct {
	Epoch string  `xml:"data-epoch,attr"`
	Class string  `xml:"class,attr"`
	Nodes []svgEl `xml:"g"`
	Paths []svgEl `xml:"path"`
}

type svgEl struct {
	Class string `xml:"class,attr"`
	From  string `xml:"data-from,attr"`
	To    string `xml:"data-to,attr"`
	Keys  string `xml:"data-keys,attr"`
	Width string `xml:"stroke-width,attr"`
	Lo    string `xml:"data-lo,attr"`
	Rect  struct {
		Height string `xml:"height,attr"`
	} `xml:"rect"`
}

func parseSVG(t *testing.T, g Graph) svgDoc {
	t.Helper()
	var b bytes.Buffer
	if err := SVG(&b, g); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Groups []svgGroup `xml:"g"`
	}
	if err := xml.Unmarshal(b.Bytes(), &raw); err != nil {
		t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b.String())
	}
	var doc svgDoc
	for _, g := range raw.Groups {
		if g.Class == "edges" {
			doc.Paths = g.Paths
		} else {
			doc.Epoch = append(doc.Epoch, g)
		}
	}
	return doc
}

func TestSVG(t *testing.T) {
	doc := parseSVG(t, Build(small(), Options{}))
	widths := map[string]float64{}
	for _, p := range doc.Paths {
		if p.Keys != "" {
			w, _ := strconv.ParseFloat(p.Width, 64)
			widths[p.Keys] = w
		}
	}
	if len(widths) != 4 || !(widths["1"] < widths["2"] && widths["2"] < widths["3"] && widths["3"] < widths["4"]) {
		t.Fatalf("edge widths do not grow with keys: %v", widths)
	}
	if len(doc.Paths) != 8 {
		t.Fatalf("%d edges, want 8", len(doc.Paths))
	}
	var epochs []string
	for _, e := range doc.Epoch {
		if strings.HasPrefix(e.Class, "epoch") {
			epochs = append(epochs, e.Epoch+":"+e.Class)
		}
	}
	if strings.Join(epochs, ",") != "1:epoch,2:epoch,3:epoch current" {
		t.Fatalf("epoch groups: %v", epochs)
	}
	// Epoch 2's boxes are as tall as their keys: partition 3 (4 keys) is the tallest.
	h := map[string]float64{}
	for _, n := range doc.Epoch[1].Nodes {
		v, _ := strconv.ParseFloat(n.Rect.Height, 64)
		h[n.Lo] = v
	}
	if !(h["3"] > h["0"] && h["0"] > h["1"] && h["1"] > h["2"]) {
		t.Fatalf("node heights do not follow keys (4, 3, 2, 1): %v", h)
	}
}

// TestLargeTopicSummarised: 16,384 partitions growing to 16,384 with "all" ancestry is drawn as
// 64 runs per epoch, and the picture stays small.
func TestLargeTopicSummarised(t *testing.T) {
	n := 16384
	parents := make([][][2]int, n)
	for i := range parents {
		parents[i] = [][2]int{{i / 2, i/2 + 1}} // a halving: child i from parent i/2 of 8192
	}
	tp := &wire.Topic{Name: "big", Epochs: []wire.Epoch{
		{Epoch: 1, Partitioner: wire.Partitioner{Name: "jump"}, Partitions: n / 2},
		{Epoch: 2, Partitioner: wire.Partitioner{Name: "jump"}, Partitions: n, Ancestry: &wire.Ancestry{Source: "declared", Parents: parents}},
	}}
	g := Build(tp, Options{})
	if len(g.Columns[0].Nodes) != 64 || len(g.Columns[1].Nodes) != 64 || g.Columns[1].Run != 256 || g.Columns[0].Run != 128 {
		t.Fatalf("runs: %d nodes of %d, %d nodes of %d", len(g.Columns[0].Nodes), g.Columns[0].Run, len(g.Columns[1].Nodes), g.Columns[1].Run)
	}
	// Run j of the new epoch (children 256j..256j+255) comes from parents 128j..128j+127: run j.
	if len(g.Edges) != 64 {
		t.Fatalf("%d edges, want 64 (run j feeds run j)", len(g.Edges))
	}
	for _, e := range g.Edges {
		if e.From != e.To {
			t.Fatalf("edge %+v, want run j -> run j", e)
		}
	}
	var b bytes.Buffer
	_ = SVG(&b, g)
	if b.Len() > 64<<10 {
		t.Fatalf("SVG of a 16,384-partition topic is %d bytes", b.Len())
	}
	var tb bytes.Buffer
	_ = Text(&tb, g)
	if lines := strings.Count(tb.String(), "\n"); lines > 40 {
		t.Fatalf("text has %d lines:\n%s", lines, tb.String())
	}
}

func TestRenderFormats(t *testing.T) {
	for _, f := range Formats {
		if err := Render(io.Discard, Build(small(), Options{}), f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if err := Render(io.Discard, Graph{}, "png"); err == nil || !strings.Contains(err.Error(), "text, dot or svg") {
		t.Fatalf("unknown format: %v", err)
	}
}
