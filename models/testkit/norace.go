//go:build !race

package testkit

// Race reports whether the test binary runs under the race detector, for the
// few tests that leave their slowest instrumented variant to make test's run
// without it (and say so).
const Race = false
