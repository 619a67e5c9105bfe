//go:build !race

package crosslang

const raceEnabled = false
