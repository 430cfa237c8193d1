// Package queue is the wire between Bulkhead's nodes: NATS subjects, the job
// and reply-frame codecs, JetStream stream and consumer setup, the embedded
// NATS server, the results bucket (async results, the per-job marker that
// stops a job running twice, and the cancel marker that stops a cancelled job
// running at all), cancellation, usage-event subjects, trace-context
// headers (InjectTrace/ExtractTrace: OpenTelemetry's global propagator over
// HeaderCarrier) and the fleet (RegisterNode, ListFleet: NATS micro services).
//
// Edge side: Client.Submit subscribes to a job's reply subject, then publishes
// the job (Nats-Msg-Id = job id) on its model's and tenant's subject, then
// rings that tenant's doorbell (ReadySubject); Replies returns the frames in
// seq order and reports gaps and silent streams. Worker side: TenantQueues
// (one durable consumer per model and tenant; the worker chooses whose queue
// to read next), Results.Claim and Replier; EnsureConsumer reads a model's
// every job in stream order (tools and tests). Disaggregated serving: a
// prefill worker publishes a Handover (the job and its KV manifest, opaque
// here) on DecodeSubject with PublishHandover, and decode workers take it
// through EnsureDecodeConsumer; both claim the same job record, and
// Replier.FailIfHeld lets either end it only while its claim is current.
// Billing: PublishUsage puts a request's one usage event on the usage
// stream (Nats-Msg-Id = request id) and EnsureUsageConsumer is the durable
// consumer billing counts them with. Routing (route.go): workers announce
// WorkerStatus and PrefixNotice (PrefixKeys) on core NATS; a job routed to
// a worker (Job.Route) waits on that worker's queue of its tenant
// (RouteSubject), which TenantQueues lets the other workers read once the
// worker drains or falls silent; Backlog lists a model's tenants by jobs.
// Finetunes (finetunes.go): tenants' LoRA adapters, their records in the
// finetunes bucket (one compare-and-set key per tenant, at most
// MaxFinetunes) and their files in the adapters object store under the
// tenant, finetune and sha256 (AdapterObject); ReadAdapterFile is a
// worker's checked fetch.
// Every queue is bounded: the jobs and decode streams refuse new messages
// when full (ErrQueueFull), reply subscriptions cap their pending frames, the results bucket has a size and a TTL.
//
// The bus is authenticated (auth.go): every connection is one role's nkey
// user (edge, worker, billing, operator) with only the subject permissions
// RolePermissions lists, so a job's tenant was set by an edge. Records of
// synchronous jobs live only as long as redelivery needs them (bounds.go);
// a full bucket is ErrStoreFull at once. Workers send heartbeat frames while
// they hold a job, and Replies reports ErrWorkerLost when they stop.
//
// It carries data; it never decides policy (admission, quotas, scheduling) and
// never imports edge/ or workers/.
package queue
