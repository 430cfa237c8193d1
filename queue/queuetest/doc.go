// Package queuetest is test support for packages that talk to the queue: an
// in-process NATS server with JetStream on a random port, storing in
// t.TempDir() and shut down when the test ends, and client connections closed
// when the test ends. Polling and the goroutine-leak TestMain are
// models/testkit's; this package holds only what needs NATS.
//
// It owns no streams or consumers (callers run queue.Setup themselves) and the
// product must never import it.
package queuetest
