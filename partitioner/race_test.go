//go:build race

package partitioner_test

// Under the race detector every Go instruction is instrumented and the million-key agreement
// test would take many minutes; scripts/test.sh runs it in full without -race, and the race run
// keeps a smaller sample to check the concurrent paths.
const raceEnabled = true
