// Package testkit is the test support every package shares: Poll, which
// retries a check until it passes (nats-server's checkFor), and Main and Run,
// a TestMain that fails a passing run when goroutines started by its tests
// outlive them, with Running and Snapshot.Leaks for the same check inside one
// test; and Race, whether the binary runs under the race detector.
//
// It imports only the standard library so that every layer may use it,
// models/ included (nothing in models/ imports anything above it, tests
// too). Support that needs a library lives below it (redistest: a real
// redis-server, one per test binary with its Main; promtest: metrics read
// back from a registry); support tied to one component builds on it beside
// that component (queue/queuetest: an in-process NATS server;
// models/refdatatest: the reference data).
//
// It is test support: the product must never import it.
package testkit
