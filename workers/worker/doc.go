// Package worker is the worker process's job loop: it pulls jobs for the
// models it serves from the jobs stream (one durable pull consumer per model,
// shared by every worker process), checks admission again with the model's own
// tokenizer, runs each job on that model's engine (which batches all running
// jobs together), and streams reply frames, async results and usage events.
//
// Roles (Config.Role). A unified worker runs whole requests. A prefill worker
// takes jobs.<model>, admits them exactly as a unified one (an over-long
// prompt is refused, never truncated or replaced by a placeholder), runs the
// prompt (engine.Prefill), exports every KV page, builds the handoff manifest,
// offers the pages (handoff.NewSender, subscribed before anything is
// published), publishes a queue.Handover on decode.<model>.<tenant> and serves the
// transfer; the prompt's pages go back to its pool however that ends. A
// decode worker takes hand-overs tenant by tenant (queue.OpenDecodeQueues,
// the same fair pull as jobs), tokenizes the prompt itself, verifies
// the manifest against what it knows (request, tenant, model, weights digest,
// its own tokens and pool layout) before it allocates anything, reserves
// exactly prompt + max_tokens in its tenant's turn (engine.Reserve), pulls every page through handoff.Fetch into
// the sequence (each checked against its CRC-64 on import), and only after
// Fetch returned nil resumes the request and streams it through the same
// event-to-frame loop as a unified worker. A failed, partial or refused
// hand-over ends the request with an error frame ("KV handoff failed: ...")
// and frees the pages on both sides; it never reaches engine.Resume. Both
// sides share the job's record in the results bucket and fail it only while
// their claim is current (queue.Replier.FailIfHeld), so the client gets one
// stream: tokens then a final frame, or one error frame.
//
// Prefix cache. A job with CachePrefix runs with engine.Request.CachePrefix
// on unified and prefill workers: the engine reuses the prompt's leading full
// pages from the cache of the job's tenant (never another's) and publishes
// them for the tenant's later jobs; the final frame's usage says how many
// prompt tokens came from the cache. A decode worker neither looks up nor
// publishes; it reports the prefill side's count, which the hand-over
// carries, bounded to the prompt it tokenized.
//
// LoRA adapters (adapters.go). A job naming an adapter (queue.Job.LoRA)
// runs with it on every role: the worker fetches its files from the job's
// tenant's objects only, checks their sha256, loads them with
// engine.LoadAdapter and keeps them in an LRU bounded by Config.LoRAMemory;
// a fetch or load that fails ends that job (queue.ErrKindAdapter or
// ErrKindUnavailable), never the worker. Hand-over manifests carry the
// adapter's key, and a decode worker refuses KV computed under another.
//
// Redelivery rule: a job runs again only if no frame of it reached the reply
// subject; a job that already finished is acked and not rerun; a job whose
// earlier worker died after sending frames ends with ErrKindInternal ("worker
// lost mid-stream"). See queue.Results.Claim. Only decode workers stream in
// disaggregated serving, so a prefill delivery that finds its job streamed,
// or its hand-over a duplicate (an earlier delivery published it, and its
// ack was lost), leaves the job to the decode side. An async job's record is
// its only answer: a worker whose write of the job's end fails keeps the
// message in progress and writes it again (delivery.settleEnded) before it
// acks.
//
// Cancellation: the edge records a cancel in the results bucket and then
// publishes it on the job's cancel subject. Claim treats a cancelled job as
// finished (acked, never run); once claimed, every role subscribes to the
// cancel subject and then reads the marker again before any engine work, so
// a cancel that landed between the claim and the subscription ends the job
// with an aborted frame instead of running it for nobody.
//
// Each delivery of a message is a delivery (delivery.go): the job, its
// reply stream (queue.Replier), its engine and its outcome, with one method
// per step (claim, admit, begin, run or prefill or decode, stream, fail,
// requeue). One refusal switch (delivery.refuse) ends a job its engine did
// not take; one cascade (ended) classifies a job whose context ended, with
// each role's own cases on top (classify, decodeFailure, handOverFailure).
//
// Observability (trace.go, metrics.go): each delivery continues the trace
// its message headers carry, with queue.wait, worker.job, engine.prefill,
// engine.decode and handoff.send/receive spans (a decode worker's spans sit
// below the prefill worker's handoff.send); Metrics (one per process, given
// to every worker) counts jobs by outcome, queue waits, tokens, batch sizes,
// KV pool and hand-over figures. Tracing off (no TracerProvider) costs
// nothing per job; no span or metric holds prompt or completion text.
//
// It never decides tenants or prices (the tenant comes in the job from the
// edge's verified token), never truncates a prompt, and never reports a partial
// answer as success. It does not own the engines: their Run loops belong to
// the caller.
package worker
