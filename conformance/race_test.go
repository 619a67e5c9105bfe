//go:build race

package conformance_test

// Under the race detector every Go instruction of the host side (the checker, the runtime,
// wazero's compiler) is instrumented; the tests use fewer random keys there and keep the full
// count for the ordinary run (as partitioner/race_test.go does).
const raceEnabled = true
