package quota

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/edge/quota/redistest"
)

// redisAddr is the address of the redis-server TestMain starts.
var redisAddr string

func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	srv, err := redistest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quota tests:", err)
		os.Exit(1)
	}
	redisAddr = srv.Addr()
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := checkGoroutines(before); err != nil {
			fmt.Fprintln(os.Stderr, "quota tests:", err)
			code = 1
		}
	}
	os.Exit(code)
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
