//go:build !race

package partitioner_test

const raceEnabled = false
