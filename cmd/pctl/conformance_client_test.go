package main

import (
	"context"
	"testing"
)

// TestConformanceClientUsage: 'pctl conformance client' says how to write a client for it, and
// refuses bad usage with exit 2 before it starts anything (the harness itself runs in
// conformance/clientconf's tests).
func TestConformanceClientUsage(t *testing.T) {
	ctx := context.Background()
	expect(t, runCLI(ctx, nil, nil, "conformance", "client", "--help"), exitOK,
		"PRODUCER --server URL --creds FILE --topic T --producer-id ID", "CONSUMER --server URL", "Writing a client for it", "member-crash", "compacted", "--from current-epoch")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no consumer", []string{"--producer", "conformance/clientconf/go/produce"}, "give both --producer CMD and --consumer CMD"},
		{"a stray argument", []string{"kafka-murmur2", "--producer", "a", "--consumer", "b"}, "unexpected argument"},
		{"seed 0", []string{"--producer", "a", "--consumer", "b", "--seed", "0"}, "--seed 0"},
		{"missing command", []string{"--producer", "/nonexistent/produce", "--consumer", "/nonexistent/consume"}, "/nonexistent/produce"},
		{"unknown scenario", []string{"--producer", "../../conformance/clientconf/go/produce", "--consumer", "../../conformance/clientconf/go/consume", "--scenario", "nope"}, "no scenario \"nope\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, runCLI(ctx, nil, nil, append([]string{"conformance", "client"}, tc.args...)...), exitUsage, tc.want)
		})
	}
}
