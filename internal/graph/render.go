package graph

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Formats names the renderers, for flags.
var Formats = []string{"text", "dot", "svg"}

// Render writes g in format ("text", "dot" or "svg").
func Render(w io.Writer, g Graph, format string) error {
	switch format {
	case "text":
		return Text(w, g)
	case "dot":
		return DOT(w, g)
	case "svg":
		return SVG(w, g)
	}
	return fmt.Errorf("graph format %q: give text, dot or svg", format)
}

func columnTitle(c Column) string {
	s := fmt.Sprintf("epoch %d", c.Epoch)
	switch {
	case c.Planned:
		s += " (planned)"
	case c.Current:
		s += " (current)"
	}
	return s
}

func columnSub(c Column) string {
	return fmt.Sprintf("%s, %s", c.Partitioner, plural(int64(c.Partitions), "partition"))
}

func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Text writes one block per epoch transition: "child <- parent (keys), ...", runs of children
// with the same parents merged.
func Text(w io.Writer, g Graph) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "topic %s: ancestry of %d epoch(s)", g.Topic, len(g.Columns))
	if g.Omitted > 0 {
		fmt.Fprintf(bw, " (%d older not shown)", g.Omitted)
	}
	fmt.Fprintln(bw)
	for i, c := range g.Columns {
		fmt.Fprintf(bw, "%s: %s", columnTitle(c), columnSub(c))
		if src := sourceText(c); src != "" {
			fmt.Fprintf(bw, "; ancestry %s", src)
		}
		if c.Run > 1 {
			fmt.Fprintf(bw, "; drawn in runs of %d partitions", c.Run)
		}
		fmt.Fprintln(bw)
		if i == 0 {
			continue
		}
		prev := g.Columns[i-1]
		in := make([][]Edge, len(c.Nodes))
		for _, e := range g.Edges {
			if e.Col == i-1 {
				in[e.To] = append(in[e.To], e)
			}
		}
		lines := 0
		for n := 0; n < len(c.Nodes); {
			end := n + 1
			for end < len(c.Nodes) && sameParents(in[end], in[n]) {
				end++
			}
			if lines == 32 {
				fmt.Fprintf(bw, "  ... (%d more)\n", len(c.Nodes)-n)
				break
			}
			child := c.Nodes[n].Label()
			if end-n > 1 {
				child = (Node{Lo: c.Nodes[n].Lo, Hi: c.Nodes[end-1].Hi}).Label()
			}
			fmt.Fprintf(bw, "  %s <- %s\n", child, parentsText(prev, in[n], end-n > 1))
			lines++
			n = end
		}
	}
	return bw.Flush()
}

func sameParents(a, b []Edge) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].From != b[i].From || a[i].Unknown != b[i].Unknown || (!a[i].Unknown && a[i].Keys != b[i].Keys) {
			return false
		}
	}
	return true
}

func parentsText(prev Column, in []Edge, each bool) string {
	if len(in) == 0 {
		return "none (no keys)"
	}
	var parts []string
	// Merge runs of consecutive parents without key counts ("0-7").
	for i := 0; i < len(in); {
		j := i
		for in[i].Unknown && j+1 < len(in) && in[j+1].Unknown && in[j+1].From == in[j].From+1 {
			j++
		}
		s := (Node{Lo: prev.Nodes[in[i].From].Lo, Hi: prev.Nodes[in[j].From].Hi}).Label()
		if !in[i].Unknown {
			s += " (" + plural(in[i].Keys, "key")
			if each {
				s += " each"
			}
			s += ")"
		}
		parts = append(parts, s)
		i = j + 1
	}
	if len(parts) > 12 {
		parts = append(parts[:12], fmt.Sprintf("... (%d in all)", len(parts)))
	}
	return strings.Join(parts, ", ")
}

// DOT writes a Graphviz digraph: one cluster per epoch, edges labelled and sized by keys.
func DOT(w io.Writer, g Graph) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "digraph %s {\n", strconv.Quote("ancestry "+g.Topic))
	fmt.Fprintln(bw, "  rankdir=LR; ranksep=1.5; node [shape=box, style=rounded, fontname=\"Helvetica\"]; edge [color=\"#4a6fa5\"];")
	for i, c := range g.Columns {
		fmt.Fprintf(bw, "  subgraph cluster_%d {\n    label=%s;\n", i, strconv.Quote(columnTitle(c)+"\n"+columnSub(c)))
		if c.Planned {
			fmt.Fprintln(bw, "    style=dashed;")
		}
		for j, n := range c.Nodes {
			label := n.Label()
			if n.Keys >= 0 {
				label += "\n" + plural(n.Keys, "key")
			}
			fmt.Fprintf(bw, "    e%dn%d [label=%s];\n", c.Epoch, j, strconv.Quote(label))
		}
		fmt.Fprintln(bw, "  }")
	}
	maxKeys := maxEdgeKeys(g)
	for _, e := range g.Edges {
		from, to := g.Columns[e.Col], g.Columns[e.Col+1]
		attrs := "style=dashed"
		if !e.Unknown {
			attrs = fmt.Sprintf("penwidth=%.2f, label=%q", edgeWidth(e.Keys, maxKeys), strconv.FormatInt(e.Keys, 10))
		}
		fmt.Fprintf(bw, "  e%dn%d -> e%dn%d [%s];\n", from.Epoch, e.From, to.Epoch, e.To, attrs)
	}
	fmt.Fprintln(bw, "}")
	return bw.Flush()
}

func maxEdgeKeys(g Graph) int64 {
	var m int64
	for _, e := range g.Edges {
		if !e.Unknown && e.Keys > m {
			m = e.Keys
		}
	}
	return m
}

// edgeWidth maps keys to a stroke width of 1 to 9 (square root: area follows keys).
func edgeWidth(keys, maxKeys int64) float64 {
	if maxKeys <= 0 {
		return 1
	}
	return 1 + 8*math.Sqrt(float64(keys)/float64(maxKeys))
}

// SVG layout constants.
const (
	colWidth  = 240
	nodeWidth = 96
	rowGap    = 6
	topMargin = 64
	minNodeH  = 18
	maxNodeH  = 42
)

// SVG writes a self-contained SVG picture: columns of boxes (height by keys where observed),
// edges as curves whose width follows their keys; dashed where ancestry is only possible (not
// measured). Elements carry data- attributes (epoch, lo, hi, keys, from, to) for scripts and tests.
func SVG(w io.Writer, g Graph) error {
	bw := bufio.NewWriter(w)
	type box struct{ x, y, h float64 }
	boxes := make([][]box, len(g.Columns))
	height := 0.0
	for i, c := range g.Columns {
		var maxKeys int64
		for _, n := range c.Nodes {
			if n.Keys > maxKeys {
				maxKeys = n.Keys
			}
		}
		y := float64(topMargin)
		for _, n := range c.Nodes {
			h := float64(minNodeH)
			if n.Keys >= 0 && maxKeys > 0 {
				h += (maxNodeH - minNodeH) * math.Sqrt(float64(n.Keys)/float64(maxKeys))
			}
			boxes[i] = append(boxes[i], box{x: 24 + float64(i)*colWidth, y: y, h: h})
			y += h + rowGap
		}
		height = math.Max(height, y)
	}
	width := 48 + float64(max(len(g.Columns), 1)-1)*colWidth + 200 // the last column's captions
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" class="ancestry" data-topic="%s" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		esc(g.Topic), width, height+16, width, height+16)
	fmt.Fprintf(bw, "<title>ancestry of topic %s</title>\n", esc(g.Topic))
	maxKeys := maxEdgeKeys(g)
	fmt.Fprintln(bw, `<g class="edges" fill="none">`)
	for _, e := range g.Edges {
		a, b := boxes[e.Col][e.From], boxes[e.Col+1][e.To]
		x1, y1 := a.x+nodeWidth, a.y+a.h/2
		x2, y2 := b.x, b.y+b.h/2
		mx := (x1 + x2) / 2
		from, to := g.Columns[e.Col], g.Columns[e.Col+1]
		style := `stroke="#9aa7b8" stroke-width="1" stroke-dasharray="4 3"`
		title := fmt.Sprintf("epoch %d partition %s may feed epoch %d partition %s", from.Epoch, from.Nodes[e.From].Label(), to.Epoch, to.Nodes[e.To].Label())
		keys := ""
		if !e.Unknown {
			style = fmt.Sprintf(`stroke="#4a6fa5" stroke-opacity="0.75" stroke-width="%.2f"`, edgeWidth(e.Keys, maxKeys))
			title = fmt.Sprintf("%s from epoch %d partition %s to epoch %d partition %s", plural(e.Keys, "key"), from.Epoch, from.Nodes[e.From].Label(), to.Epoch, to.Nodes[e.To].Label())
			keys = fmt.Sprintf(` data-keys="%d"`, e.Keys)
		}
		fmt.Fprintf(bw, `<path class="edge" data-from="%d:%s" data-to="%d:%s"%s d="M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f" %s><title>%s</title></path>`+"\n",
			from.Epoch, from.Nodes[e.From].Label(), to.Epoch, to.Nodes[e.To].Label(), keys, x1, y1, mx, y1, mx, y2, x2, y2, style, esc(title))
	}
	fmt.Fprintln(bw, `</g>`)
	for i, c := range g.Columns {
		cls := "epoch"
		fill, stroke := "#eef3fa", "#4a6fa5"
		switch {
		case c.Planned:
			cls += " planned"
			fill, stroke = "#fff6e5", "#c98a1b"
		case c.Current:
			cls += " current"
			fill = "#e3f1e6"
			stroke = "#3c8c50"
		}
		x := 24 + float64(i)*colWidth
		fmt.Fprintf(bw, `<g class="%s" data-epoch="%d" data-partitions="%d" data-source="%s" data-state="%s">`+"\n", cls, c.Epoch, c.Partitions, esc(c.Source), esc(c.State))
		fmt.Fprintf(bw, `<text class="title" x="%.0f" y="20" font-weight="bold">%s</text>`+"\n", x, esc(columnTitle(c)))
		fmt.Fprintf(bw, `<text x="%.0f" y="36" fill="#555">%s</text>`+"\n", x, esc(columnSub(c)))
		if src := sourceText(c); src != "" {
			fmt.Fprintf(bw, `<text x="%.0f" y="52" fill="#777" font-style="italic">%s</text>`+"\n", x, esc("ancestry: "+src))
		}
		dash := ""
		if c.Planned {
			dash = ` stroke-dasharray="5 3"`
		}
		for j, n := range c.Nodes {
			bx := boxes[i][j]
			keys, title := "", fmt.Sprintf("epoch %d partition %s", c.Epoch, n.Label())
			if n.Keys >= 0 {
				keys = fmt.Sprintf(` data-keys="%d"`, n.Keys)
				title += ": " + plural(n.Keys, "key")
			}
			fmt.Fprintf(bw, `<g class="node" data-epoch="%d" data-lo="%d" data-hi="%d"%s><title>%s</title>`, c.Epoch, n.Lo, n.Hi, keys, esc(title))
			fmt.Fprintf(bw, `<rect x="%.0f" y="%.1f" width="%d" height="%.1f" rx="5" fill="%s" stroke="%s"%s/>`, bx.x, bx.y, nodeWidth, bx.h, fill, stroke, dash)
			fmt.Fprintf(bw, `<text x="%.0f" y="%.1f" text-anchor="middle" dominant-baseline="central">%s</text></g>`+"\n", bx.x+nodeWidth/2, bx.y+bx.h/2, esc(n.Label()))
		}
		fmt.Fprintln(bw, `</g>`)
	}
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

func esc(s string) string { return html.EscapeString(s) }
