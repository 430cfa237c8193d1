package queue

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMain fails the run if goroutines outlive the tests (servers, clients
// and subscriptions must all be shut down).
func TestMain(m *testing.M) {
	before := liveGoroutines()
	code := m.Run()
	if code == 0 {
		if err := waitGoroutines(before, 10*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func waitGoroutines(want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n := liveGoroutines()
		if n <= want {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			return fmt.Errorf("goroutine leak: %d running, %d before the tests\n%s", n, want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkFor polls f until it returns nil or the time runs out.
func checkFor(t testing.TB, within time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type testEnv struct {
	srv *Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

// startEnv runs an embedded server on a random port with the stream and
// bucket set up by cfg, and a client connection; all closed at cleanup.
func startEnv(t testing.TB, cfg StreamConfig) *testEnv {
	t.Helper()
	srv, err := StartServer(ServerConfig{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Setup(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	return &testEnv{srv: srv, nc: nc, js: js}
}

func testJob(id string) *Job {
	return &Job{
		ID: id, Tenant: "tenant-a", Model: "@cf/test/model", Prompt: "Once upon a time",
		MaxTokens: 8, Reply: ReplySubject(id), Deadline: time.Now().Add(time.Minute),
	}
}

// liveGoroutines counts goroutines, leaving out the signal watcher the fuzzing
// engine starts (it lives for the whole process).
func liveGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && !strings.Contains(g, "os/signal.signal_recv") {
			count++
		}
	}
	return count
}
