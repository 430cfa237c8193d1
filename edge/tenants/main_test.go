package tenants

import (
	"testing"

	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

func TestMain(m *testing.M) { queuetest.Main(m) }
