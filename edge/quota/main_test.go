package quota

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/edge/quota/redistest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// redisAddr is the address of the redis-server TestMain starts.
var redisAddr string

func TestMain(m *testing.M) {
	srv, err := redistest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quota tests:", err)
		os.Exit(1)
	}
	redisAddr = srv.Addr()
	code := testkit.Run(m)
	srv.Stop()
	os.Exit(code)
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
