package export

import (
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
