//go:build !race

package conformance_test

const hostsRace = false
