// Package worker is the worker process's job loop: it pulls jobs for the
// models it serves from the jobs stream (one durable pull consumer per model,
// shared by every worker process), checks admission again with the model's own
// tokenizer, runs each job on that model's engine (which batches all running
// jobs together), and streams reply frames, async results and usage events.
//
// Redelivery rule: a job runs again only if no frame of it reached the reply
// subject; a job that already finished is acked and not rerun; a job whose
// earlier worker died after sending frames ends with ErrKindInternal ("worker
// lost mid-stream"). See queue.Results.Claim.
//
// It never decides tenants or prices (the tenant comes in the job from the
// edge's verified token), never truncates a prompt, and never reports a partial
// answer as success. It does not own the engines: their Run loops belong to
// the caller.
package worker
