package ledger

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/edge/quota/redistest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

var redisAddr string

func TestMain(m *testing.M) {
	srv, err := redistest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger tests:", err)
		os.Exit(1)
	}
	redisAddr = srv.Addr()
	code := testkit.Run(m)
	srv.Stop()
	os.Exit(code)
}

// newRedis returns a client on database db of the shared server, emptied.
func newRedis(t testing.TB, db int) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, DB: db, PoolSize: 32})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb
}
