//go:build !flood

package main

// floodMeasured says TestFloodFairness judges latency (flood_test.go).
const floodMeasured = false
