//go:build race

package engine

// raceEnabled says the race detector is on: its instrumentation makes a few
// allocations of its own, which allocation counts then include.
const raceEnabled = true
