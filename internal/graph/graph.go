// Package graph draws a topic's ancestry graph: its epochs as columns of partitions, and an edge
// from each partition of an epoch to every partition of the next that its keys may now be in
// (wire.Ancestry), sized by the distinct keys on that edge where the broker observed them.
//
// One model (Build) and three renderers: Text (lines for a terminal), DOT (Graphviz) and SVG (the
// status page of 'pctl serve --http' and 'pctl topic describe --graph svg'). Large epochs are
// summarised: an epoch with more partitions than Options.MaxNodes is drawn as runs of partitions
// ("0-15"), and the edges between runs add up, so a 16,384-partition topic stays a picture of a
// few dozen boxes. Rendering is deterministic: the same descriptor gives the same bytes.
package graph

import (
	"fmt"
	"sort"

	"pctl.dev/pctl/broker/wire"
)

// Options configures Build. Zero values mean defaults.
type Options struct {
	// MaxNodes is the most boxes drawn per epoch; a larger epoch is drawn as runs of
	// ceil(partitions/MaxNodes) partitions. Default 64.
	MaxNodes int
	// LastEpochs is how many epochs are drawn, the newest ones (with the change in progress, if
	// any, as one more). Default 8.
	LastEpochs int
}

func (o Options) withDefaults() Options {
	if o.MaxNodes <= 0 {
		o.MaxNodes = 64
	}
	if o.LastEpochs <= 0 {
		o.LastEpochs = 8
	}
	return o
}

// Graph is the drawable model of a topic's ancestry.
type Graph struct {
	Topic   string
	Columns []Column // oldest first
	Edges   []Edge
	// Omitted counts the older epochs left out (Options.LastEpochs).
	Omitted int
}

// Column is one epoch.
type Column struct {
	Epoch       int
	Partitioner string
	Partitions  int
	// Source is how the ancestry into this epoch is known ("declared", "observed", "pending",
	// "all", "identity"; "" for the first column drawn); Planned marks the epoch of a change in
	// progress (State is its step: planned, created, fenced).
	Source  string
	Planned bool
	State   string
	Current bool
	Nodes   []Node
	// Run is the number of partitions per node (1 unless the epoch is summarised).
	Run int
	// Keys is the number of distinct keys observed into this epoch (-1: not observed).
	Keys int64
}

// Node is a run of partitions [Lo, Hi) of one epoch.
type Node struct {
	Lo, Hi int
	Keys   int64 // distinct keys observed on its edges (into it, or out of it for the first epoch); -1 unknown
}

// Label is "7" or "0-15".
func (n Node) Label() string {
	if n.Hi-n.Lo == 1 {
		return fmt.Sprint(n.Lo)
	}
	return fmt.Sprintf("%d-%d", n.Lo, n.Hi-1)
}

// Edge feeds node To of column Col+1 from node From of column Col.
type Edge struct {
	Col      int // index of the parent's column in Graph.Columns
	From, To int // node indices
	Keys     int64
	// Unknown is true when the edge is possible but unmeasured (declared, all, pending), so
	// Keys is meaningless.
	Unknown bool
}

// Build makes the model of t's ancestry.
func Build(t *wire.Topic, opts Options) Graph {
	opts = opts.withDefaults()
	g := Graph{Topic: t.Name}
	type ep struct {
		epoch, partitions int
		name              string
		anc               *wire.Ancestry
		planned           bool
		state             string
	}
	var eps []ep
	for _, e := range t.Epochs {
		eps = append(eps, ep{epoch: e.Epoch, partitions: e.Partitions, name: e.Partitioner.Name, anc: e.Ancestry})
	}
	if ch := t.Change; ch != nil {
		// The ancestry of a change in progress is not known yet: every old partition may feed
		// every new one until the broker says otherwise.
		eps = append(eps, ep{epoch: ch.To, partitions: ch.Partitions, name: ch.Partition.Name, planned: true, state: ch.State,
			anc: &wire.Ancestry{Source: "pending"}})
	}
	if len(eps) > opts.LastEpochs {
		g.Omitted = len(eps) - opts.LastEpochs
		eps = eps[g.Omitted:]
	}
	for i, e := range eps {
		c := Column{Epoch: e.epoch, Partitioner: e.name, Partitions: e.partitions, Planned: e.planned, State: e.state, Keys: -1,
			Current: !e.planned && e.epoch == t.Current().Epoch}
		if i > 0 && e.anc != nil {
			c.Source = e.anc.Source
		} else if i > 0 {
			c.Source = "all"
		}
		c.Run = (e.partitions + opts.MaxNodes - 1) / opts.MaxNodes
		for lo := 0; lo < e.partitions; lo += c.Run {
			c.Nodes = append(c.Nodes, Node{Lo: lo, Hi: min(lo+c.Run, e.partitions), Keys: -1})
		}
		g.Columns = append(g.Columns, c)
	}
	for i := 1; i < len(g.Columns); i++ {
		g.Edges = append(g.Edges, edges(&g.Columns[i-1], &g.Columns[i], i-1, eps[i].anc)...)
	}
	return g
}

// edges aggregates one epoch transition's ancestry onto the two columns' runs.
func edges(prev, next *Column, col int, anc *wire.Ancestry) []Edge {
	type pair struct{ from, to int }
	keys := map[pair]int64{}
	known := anc != nil && anc.Keys != nil && len(anc.Keys) == next.Partitions
	parents := func(child int) [][2]int {
		if anc == nil || anc.Source == "pending" || child >= len(anc.Parents) {
			return [][2]int{{0, prev.Partitions}}
		}
		return anc.Parents[child]
	}
	if known {
		next.Keys = 0
		for child, ps := range anc.Keys {
			to := child / next.Run
			for _, pk := range ps {
				p, n := int(pk[0]), pk[1]
				if p < 0 || p >= prev.Partitions {
					continue
				}
				keys[pair{p / prev.Run, to}] += n
				next.Keys += n
				addKeys(&next.Nodes[to], n)
				if col == 0 || prev.Keys < 0 {
					addKeys(&prev.Nodes[p/prev.Run], n) // the first column drawn: keys out of it
				}
			}
		}
	} else {
		for child := 0; child < next.Partitions; child++ {
			to := child / next.Run
			for _, r := range parents(child) {
				lo, hi := max(r[0], 0), min(r[1], prev.Partitions)
				for b := lo / prev.Run; lo < hi && b <= (hi-1)/prev.Run; b++ {
					keys[pair{b, to}] += 0
				}
			}
		}
	}
	out := make([]Edge, 0, len(keys))
	for p, n := range keys {
		out = append(out, Edge{Col: col, From: p.from, To: p.to, Keys: n, Unknown: !known})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].From != out[j].From {
			return out[i].From < out[j].From
		}
		return out[i].To < out[j].To
	})
	return out
}

func addKeys(n *Node, k int64) {
	if n.Keys < 0 {
		n.Keys = 0
	}
	n.Keys += k
}

// sourceText words an ancestry source for a caption.
func sourceText(c Column) string {
	switch {
	case c.Planned:
		return "change in progress: " + c.State
	case c.Source == "observed" && c.Keys >= 0:
		return fmt.Sprintf("observed, %d keys", c.Keys)
	case c.Source == "":
		return ""
	}
	return c.Source
}
