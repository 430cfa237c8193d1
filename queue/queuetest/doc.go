// Package queuetest is test support for packages that talk to the queue: an
// in-process NATS server with JetStream on a random port, storing in
// t.TempDir() and shut down when the test ends; client connections closed when
// the test ends; and a TestMain that fails the run when goroutines outlive the
// tests.
//
// It owns no streams or consumers (callers run queue.Setup themselves) and the
// product must never import it.
package queuetest
