package testkit

import (
	"fmt"
	"testing"
	"time"
)

// maxPollGap is the longest Poll sleeps between two checks.
const maxPollGap = 20 * time.Millisecond

// Poll calls check until it returns nil, and fails t with check's last error
// when within has passed first. It sleeps between calls, 1 ms at first and
// doubling up to 20 ms, so a condition that is about to hold costs little
// and one that takes seconds costs few calls. Call it from the test's own
// goroutine (it ends the test with t.Fatalf).
func Poll(t testing.TB, within time.Duration, check func() error) {
	t.Helper()
	if err := poll(within, check); err != nil {
		t.Fatalf("%v (gave up after %v)", err, within)
	}
}

// Cond turns a boolean condition into a check for Poll: its error says
// "waiting for what".
func Cond(what string, cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("waiting for %s", what)
	}
}

// poll calls check until it returns nil or within has passed, and returns
// check's last error in the second case.
func poll(within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	gap := time.Millisecond
	for {
		err := check()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(min(gap, time.Until(deadline)))
		gap = min(2*gap, maxPollGap)
	}
}
