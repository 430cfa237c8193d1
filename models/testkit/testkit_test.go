package testkit

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// recorder is a testing.TB whose Fatalf records the failure instead of
// ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestPoll(t *testing.T) {
	for _, tc := range []struct {
		name     string
		passAt   int32 // the call that first returns nil; 0: never
		wantFail string
	}{
		{"passes at once", 1, ""},
		{"passes on the fifth call", 5, ""},
		{"never passes", 0, "not yet 3 (gave up after 50ms)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			r := &recorder{TB: t}
			Poll(r, 50*time.Millisecond, func() error {
				n := calls.Add(1)
				if tc.passAt != 0 && n >= tc.passAt {
					return nil
				}
				return fmt.Errorf("not yet %d", min(n, 3))
			})
			if tc.wantFail == "" && r.failed != "" {
				t.Fatalf("Poll failed: %s", r.failed)
			}
			if tc.wantFail != "" && !strings.HasPrefix(r.failed, "not yet") {
				t.Fatalf("Poll failure %q, want check's last error", r.failed)
			}
			if tc.passAt != 0 && calls.Load() != tc.passAt {
				t.Fatalf("check called %d times, want %d (Poll stops at the first pass)", calls.Load(), tc.passAt)
			}
		})
	}
}

func TestCond(t *testing.T) {
	if err := Cond("x", func() bool { return true })(); err != nil {
		t.Fatalf("true condition: %v", err)
	}
	if err := Cond("the edge to listen", func() bool { return false })(); err == nil || err.Error() != "waiting for the edge to listen" {
		t.Fatalf("false condition: %v", err)
	}
}

func TestLeaks(t *testing.T) {
	for _, tc := range []struct {
		name string
		leak bool
	}{
		{"none left", false},
		{"one left", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := Running()
			stop, done := make(chan struct{}), make(chan struct{})
			go func() { parkedForTestLeaks(stop); close(done) }()
			if !tc.leak {
				close(stop)
				<-done
			}
			err := before.Leaks(50 * time.Millisecond)
			if tc.leak {
				close(stop)
				<-done
			}
			if (err != nil) != tc.leak {
				t.Fatalf("Leaks = %v, want a leak: %v", err, tc.leak)
			}
			if err != nil && (!strings.Contains(err.Error(), "goroutine leak: 1 goroutines") || !strings.Contains(err.Error(), "parkedForTestLeaks")) {
				t.Fatalf("error does not count and show the leaked goroutine:\n%v", err)
			}
		})
	}
}

// TestLeaksWaitsForEnding: a goroutine that ends a little after the check
// starts is not a leak.
func TestLeaksWaitsForEnding(t *testing.T) {
	before := Running()
	stop := make(chan struct{})
	go parkedForTestLeaks(stop)
	time.AfterFunc(20*time.Millisecond, func() { close(stop) })
	if err := before.Leaks(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// parkedForTestLeaks blocks until stop closes; its name marks its stack.
func parkedForTestLeaks(stop chan struct{}) { <-stop }
