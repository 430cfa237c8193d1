//go:build !cluster

package local

import (
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestMain fails the run if goroutines outlive the tests. The cluster fault
// tests (build tag cluster) have a TestMain of their own that starts the
// cluster.
func TestMain(m *testing.M) { testkit.Main(m) }
