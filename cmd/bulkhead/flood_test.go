//go:build flood

package main

// floodMeasured says TestFloodFairness judges tenant B's latency under the
// flood and runs every variant: make test-flood builds with the tag, on a
// machine that runs nothing else (noflood_test.go).
const floodMeasured = true
