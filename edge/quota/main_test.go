package quota

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisAddr is the address of the redis-server TestMain starts.
var redisAddr string

func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	srv, err := startRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quota tests:", err)
		os.Exit(1)
	}
	redisAddr = srv.addr
	code := m.Run()
	srv.stop()
	if code == 0 {
		if err := checkGoroutines(before); err != nil {
			fmt.Fprintln(os.Stderr, "quota tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// redisServer is a redis-server subprocess.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis runs redis-server on a free loopback port, without persistence,
// and waits until it answers PING.
func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH; these tests need a real Redis: apt-get install -y redis-server")
	}
	port, err := freePort()
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
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{})}
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
			s.stop()
			return nil, fmt.Errorf("redis-server on port %d not ready: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server and waits for it; idempotent.
func (s *redisServer) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// checkGoroutines polls until the goroutine count is back to the baseline.
func checkGoroutines(base int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			return fmt.Errorf("%d goroutines leaked:\n%s", n-base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newRedis returns a client of the shared server with an empty database.
func newRedis(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHDB on %s: %v", redisAddr, err)
	}
	return rdb
}
