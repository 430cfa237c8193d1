// Package router chooses, for each job the edge queues, the worker most
// likely to hold its prefix in its KV cache: the worker of the request's
// session (x-session-affinity, scoped to the verified tenant), else the one
// that announced the longest shared prefix of the prompt for this tenant,
// unless it is overloaded or gone; else the least loaded, or the tenant's
// shared queue that any worker with room reads (docs/routing.md).
//
// It owns the edge's routing table, fed only by the workers' announcements
// on NATS (queue.WorkerStatus, queue.PrefixNotice). It must never route by
// a client-chosen tenant: the tenant is the verified principal's, and one
// tenant's session ids and prefixes never match another's. A decision is a
// preference, never a promise: the job stays in the durable jobs stream,
// and a worker that dies leaves its queued jobs to the others.
package router
