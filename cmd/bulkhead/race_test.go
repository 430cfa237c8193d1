//go:build race

package main

// raceEnabled says the race detector is on: tests that measure the latency
// of nodes sharing this process skip themselves (norace_test.go).
const raceEnabled = true
