package encoder

import (
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestMain fails the run if goroutines outlive the tests.
func TestMain(m *testing.M) { testkit.Main(m) }
