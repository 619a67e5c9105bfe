package main

import (
	"slices"
	"strings"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/graph"
)

// checkGraphFormat validates a --graph value before anything is done.
func checkGraphFormat(e *env, cmd, format string, asJSON bool) int {
	switch {
	case format == "":
		return -1
	case asJSON:
		return usageErr(e, cmd, "--graph and --json exclude each other")
	case !slices.Contains(graph.Formats, format):
		return usageErr(e, cmd, "--graph %q: give %s", format, strings.Join(graph.Formats, ", "))
	}
	return -1
}

// writeGraph prints a topic's ancestry graph (internal/graph, the renderer the status page uses).
func writeGraph(e *env, cmd string, t *wire.Topic, format string) int {
	if err := graph.Render(e.stdout, graph.Build(t, graph.Options{}), format); err != nil {
		return failErr(e, cmd, err)
	}
	return exitOK
}
