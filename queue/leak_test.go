package queue_test

import (
	"testing"

	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// TestMain fails the run if goroutines outlive the tests (servers, clients
// and subscriptions must all be shut down). It sits in the external test
// package because queuetest imports queue.
func TestMain(m *testing.M) { queuetest.Main(m) }
