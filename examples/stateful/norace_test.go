//go:build !race

package stateful_test

const raceEnabled = false
