package queuetest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// LeakWait is how long Main waits for goroutines started by the tests to end.
const LeakWait = 10 * time.Second

// Server starts an in-process NATS server with JetStream on a free port,
// storing in a temporary directory of t, and shuts it down when t ends.
func Server(t testing.TB) *queue.Server {
	t.Helper()
	srv, err := queue.StartServer(queue.ServerConfig{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Conn opens a client connection to url, closed when t ends.
func Conn(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("nats connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream opens a client connection to url, closed when t ends, and a
// JetStream context on it.
func JetStream(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := Conn(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// Main runs the tests of m and exits. A run whose tests pass fails all the
// same when, LeakWait after them, more goroutines are running than before
// them: servers, connections, subscriptions and workers must all be stopped.
func Main(m *testing.M) {
	before := Goroutines()
	code := m.Run()
	if code == 0 {
		if err := WaitGoroutines(before, LeakWait); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// WaitGoroutines polls until at most want goroutines are running (counted as
// Goroutines does), or returns an error holding every goroutine's stack once
// within has passed.
func WaitGoroutines(want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n := Goroutines()
		if n <= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("goroutine leak: %d running, %d before the tests\n%s", n, want, stacks())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Goroutines counts running goroutines, leaving out the signal watcher the
// fuzzing engine starts (it lives as long as the process).
func Goroutines() int {
	count := 0
	for _, g := range strings.Split(stacks(), "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && !strings.Contains(g, "os/signal.signal_recv") {
			count++
		}
	}
	return count
}

// stacks returns the stacks of all goroutines.
func stacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
