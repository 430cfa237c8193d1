// Package redistest runs a real redis-server on a free loopback port for
// tests: one per test binary (Main) or one per test (Own). It is test
// support: nothing in the product imports it.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// Server is a redis-server subprocess without persistence.
type Server struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs redis-server and waits until it answers PING. A missing binary
// is an error that says how to install it.
func Start() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH; these tests need a real Redis: apt-get install -y redis-server (make test does this)")
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	var out bytes.Buffer // redis-server's log; read only after it exits
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &Server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("redis-server on port %d exited early: %v\n%s", port, cmd.ProcessState, out.Bytes())
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d not ready: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Stop kills the server and waits for it. Idempotent.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Pause stops the server's process (SIGSTOP): connections stay open and
// what clients send waits in the sockets, as in a stalled Redis. Resume
// continues it.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// Main is a package's TestMain when its tests share one redis-server: it
// starts the server, sets *addr to its address, runs the tests through
// testkit.Run (which also fails a run that leaks goroutines), stops the
// server and exits with the tests' status.
func Main(m *testing.M, addr *string) {
	srv, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis-server for the tests:", err)
		os.Exit(1)
	}
	*addr = srv.Addr()
	code := testkit.Run(m)
	srv.Stop()
	os.Exit(code)
}

// Client returns a client of the server at addr on database db, emptied
// first, closed when t ends.
func Client(t testing.TB, addr string, db int) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db, PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHDB on %s: %v", addr, err)
	}
	return rdb
}

// Own starts a redis-server for t alone (stopped when t ends) and returns it
// with a client of it.
func Own(t testing.TB) (*Server, *redis.Client) {
	t.Helper()
	srv, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv, Client(t, srv.Addr(), 0)
}
