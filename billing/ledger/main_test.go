package ledger

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/models/testkit/redistest"
)

// redisAddr is the address of the redis-server TestMain starts.
var redisAddr string

func TestMain(m *testing.M) { redistest.Main(m, &redisAddr) }

// newRedis returns a client on database db of the shared server, emptied.
func newRedis(t testing.TB, db int) *redis.Client {
	t.Helper()
	return redistest.Client(t, redisAddr, db)
}
