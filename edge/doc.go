// Package edge is Bulkhead's HTTP face: the Cloudflare Workers AI native API
// (/ai/run, /ai/models/search and their /client/v4/accounts/{id}/ai/ forms)
// and the OpenAI-compatible API (/v1/chat/completions, /v1/completions,
// /v1/models). It owns the request flow in front of the queue: authenticate,
// check the account and the model, decode and validate the body, take a quota
// slot, render the chat template and count prompt tokens (admission), publish
// the job, and turn the worker's reply frames into JSON or server-sent events.
//
// Observability (observe.go, metrics.go): every response carries its request
// id (X-Request-Id, and request_id in error bodies); with a tracer provider
// in Config each request is a server span, continuing an incoming
// traceparent and named in the response's, with auth, quota, admission,
// enqueue and reply spans below it; Metrics counts requests, latencies,
// tokens and refusals, never by tenant. Neither ever holds prompt text.
//
// It owns the capacity-following policy too (capacity.go): an edge
// advertises and admits by no more than the smallest window its live workers
// publish, and refuses at once a model no worker serves or loads (after
// LiveGrace); jobs for a model a worker is loading are queued.
//
// It owns what every node's HTTP listener is, too: the limits on a client's
// connection (harden.go), refusing conflicting framing (framing.go), and
// /healthz, /readyz and /metrics (health.go).
//
// Finetunes (finetunes.go): the tenant's LoRA adapters in Workers AI's
// shape (/ai/finetunes: create, list, get, delete, and finetune-assets
// uploads, each checked with models/lora before it is stored), and a
// request's lora (or OpenAI's "<model>:<finetune>"), resolved among the
// caller's own finetunes only into the job (queue.Job.LoRA); another
// tenant's is answered exactly as one nobody holds.
//
// It also owns the one table of stable error codes (errors.go): every refusal
// a client can see is a row of it, rendered in the native envelope or in
// OpenAI's error shape, and one function maps Go errors to rows.
//
// The edge must never: trust a tenant from the request body (the tenant comes
// from the verified principal), enqueue a request that admission refused,
// present a partial or failed generation as a success, reveal whether another
// tenant's request id exists, or run a model itself. It does not import
// workers/.
package edge
