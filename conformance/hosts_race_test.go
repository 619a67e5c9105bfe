//go:build race

package conformance_test

// hostsRace: under the race detector the wazero interpreter (Go code) is instrumented too, so
// TestHosts gives it a sample of the random keys, and the hosts in other languages (processes
// the race detector cannot see) are set up but not run: the run without -race runs them all.
const hostsRace = true
