//go:build !race

package engine

// raceEnabled says the race detector is on (race_test.go).
const raceEnabled = false
