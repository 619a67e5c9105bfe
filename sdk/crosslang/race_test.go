//go:build race

package crosslang

// raceEnabled: under the race detector the in-process broker is several times slower, so the
// second pass sends every fourth key only (the first pass still sends all 20,000).
const raceEnabled = true
