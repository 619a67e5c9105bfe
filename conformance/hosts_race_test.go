//go:build race

package conformance_test

// hostsRace: under the race detector the wazero interpreter (Go code) is instrumented too, so
// TestHosts gives it a sample of the random keys; the compiler and the hosts get them all.
const hostsRace = true
