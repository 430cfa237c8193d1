package queuetest

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

func TestServerServesJetStream(t *testing.T) {
	srv := Server(t)
	nc, js := JetStream(t, srv.ClientURL())
	if !nc.IsConnected() {
		t.Fatalf("connection to %s is not connected", srv.ClientURL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream account info: %v", err)
	}
	other := Conn(t, srv.ClientURL())
	if !other.IsConnected() {
		t.Fatal("second connection is not connected")
	}
}

func TestWaitGoroutines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leak   bool
		wantOK bool
	}{
		{"none left", false, true},
		{"one left", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := settled(t)
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { <-stop; close(done) }()
			if !tc.leak {
				close(stop)
				<-done
			}
			err := WaitGoroutines(before, 100*time.Millisecond)
			if tc.leak {
				close(stop)
				<-done
			}
			if (err == nil) != tc.wantOK {
				t.Fatalf("WaitGoroutines = %v, want ok=%v", err, tc.wantOK)
			}
			if err != nil && !strings.Contains(err.Error(), "goroutine leak") {
				t.Errorf("error %q does not say goroutine leak", err)
			}
		})
	}
}

// settled returns the goroutine count once it has stopped changing, so
// goroutines still winding down from an earlier test (a NATS server's) cannot
// hide the one this test leaves behind.
func settled(t *testing.T) int {
	t.Helper()
	n, same := Goroutines(), 0
	for deadline := time.Now().Add(10 * time.Second); same < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("goroutine count never settled (last %d)", n)
		}
		time.Sleep(20 * time.Millisecond)
		m := Goroutines()
		if m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}
