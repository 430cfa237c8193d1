// Package client is the Go SDK for Bulkhead's HTTP API: the Workers AI native
// routes (Run, RunStream, RunAsync, Poll) and OpenAI's chat completions.
//
// It owns the wire shapes as a client sees them and turns every refusal into
// an *APIError carrying the HTTP status and the stable error code of the
// edge's error table. It must never retry on its own, hide a refusal, or
// return a partial stream as complete: a stream that ends without [DONE], or
// with an error event, is an error.
package client
