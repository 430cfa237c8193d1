// Package canarytest plants leaks for the canary's tests: a real edge
// (edge.New, with real token verification and admission) over an in-process
// NATS server, answered by a deliberately wrong worker or fronted by a lying
// listing, one Fault at a time, so a test can show that the canary reports
// each one.
//
// It is test support: product code must never import it, and it must never
// serve anything but the test that started it.
package canarytest
