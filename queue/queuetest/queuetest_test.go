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
			before := Goroutines()
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
