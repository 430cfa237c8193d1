package quota

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/models/testkit/redistest"
)

// redisAddr is the address of the redis-server TestMain starts.
var redisAddr string

func TestMain(m *testing.M) { redistest.Main(m, &redisAddr) }

// newRedis returns a client of the shared server with an empty database.
func newRedis(t testing.TB) *redis.Client {
	t.Helper()
	return redistest.Client(t, redisAddr, 0)
}
