//go:build race

package scenario

// Under the race detector every run is several times slower; scripts/test.sh runs all 30 seeds
// without it, and the race run keeps a few to check the concurrent code.
const raceEnabled = true
