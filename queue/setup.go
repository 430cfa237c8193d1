package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrConfig reports a stream, bucket or consumer setting that cannot be used.
var ErrConfig = errors.New("queue: invalid config")

// StreamConfig bounds the jobs stream and the results bucket. Zero values take
// the defaults noted; negative values are refused.
type StreamConfig struct {
	MaxJobs  int64 // jobs waiting in the stream, all models; default 10000
	MaxBytes int64 // bytes held by the stream; default 256 MiB
	// MaxJobsPerTenant bounds one tenant's jobs per model (its subject,
	// TenantJobSubject): waiting or running, since a job leaves the work
	// queue when its worker acks it at the end. Default MaxJobs/10 (at
	// least 1); it may not exceed MaxJobs. The edge bounds each tenant
	// class more tightly across models (docs/fairness.md); this is the
	// stream's own guarantee that no tenant fills it.
	MaxJobsPerTenant int64
	MaxAge           time.Duration // a job older than this is dropped; default 1h
	Duplicates       time.Duration // Nats-Msg-Id de-duplication window; default 2m
	Memory           bool          // keep jobs and results in memory instead of files
	// Replicas is how many servers of a JetStream cluster hold each
	// stream and bucket (1, or an odd number up to the cluster's size; 3
	// survives the loss of one server); default 1.
	Replicas int

	MaxDecodeJobs  int64 // prefilled jobs waiting for a decode worker, all models; default 1000
	MaxDecodeBytes int64 // bytes held by the decode stream; default 64 MiB

	ResultsTTL      time.Duration // how long async results live; default 24h (sync records: SyncRecordKeep)
	ResultsMaxBytes int64         // bytes held by the results bucket; default 256 MiB (SizeFor derives it from a Load)

	CapacityTTL time.Duration // how long a worker's capacity record lives unrenewed; default DefaultCapacityTTL

	MaxUsageEvents int64         // usage events not yet counted by billing; default 1,000,000
	MaxUsageBytes  int64         // bytes held by the usage stream; default 1 GiB
	UsageMaxAge    time.Duration // an uncounted usage event older than this is dropped; default 7 days

	MaxNotices     int64 // async job notices not yet delivered to their webhooks; default 100,000
	MaxNoticeBytes int64 // bytes held by the notify stream; default 256 MiB

	// The export stream (ExportStream) is a log: its oldest events are
	// dropped past either bound, read by then or not.
	ExportMaxAge   time.Duration // default 7 days
	ExportMaxBytes int64         // default 1 GiB

	// Finetunes (finetunes.go): tenants' finetune records and their
	// adapters' files, replicated as the streams are.
	FinetunesMaxBytes int64 // bytes held by the finetunes bucket; default 64 MiB
	AdaptersMaxBytes  int64 // bytes held by the adapters object store; default 1 GiB
}

// setDefault sets *field to def where it is zero.
func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// maxReplicas is JetStream's own limit on a stream's replicas.
const maxReplicas = 5

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (c *StreamConfig) Validate() error {
	c.setDefaults()
	return c.check()
}

// setDefaults fills the zero fields with their defaults.
func (c *StreamConfig) setDefaults() {
	setDefault(&c.MaxJobs, 10000)
	setDefault(&c.MaxBytes, 256<<20)
	setDefault(&c.MaxJobsPerTenant, max(c.MaxJobs/10, 1))
	setDefault(&c.MaxAge, time.Hour)
	setDefault(&c.Duplicates, 2*time.Minute)
	setDefault(&c.Replicas, 1)
	setDefault(&c.MaxDecodeJobs, 1000)
	setDefault(&c.MaxDecodeBytes, 64<<20)
	setDefault(&c.ResultsTTL, 24*time.Hour)
	setDefault(&c.ResultsMaxBytes, 256<<20)
	setDefault(&c.MaxUsageEvents, 1_000_000)
	setDefault(&c.MaxUsageBytes, 1<<30)
	setDefault(&c.UsageMaxAge, 7*24*time.Hour)
	setDefault(&c.MaxNotices, 100_000)
	setDefault(&c.MaxNoticeBytes, 256<<20)
	setDefault(&c.ExportMaxAge, 7*24*time.Hour)
	setDefault(&c.ExportMaxBytes, 1<<30)
	setDefault(&c.FinetunesMaxBytes, 64<<20)
	setDefault(&c.AdaptersMaxBytes, 1<<30)
}

// check reports the first field out of its range, wrapping ErrConfig.
func (c *StreamConfig) check() error {
	switch {
	case c.MaxJobs < 0:
		return fmt.Errorf("%w: MaxJobs %d", ErrConfig, c.MaxJobs)
	case c.MaxBytes < 0:
		return fmt.Errorf("%w: MaxBytes %d", ErrConfig, c.MaxBytes)
	case c.MaxJobsPerTenant < 0 || c.MaxJobsPerTenant > c.MaxJobs:
		return fmt.Errorf("%w: MaxJobsPerTenant %d must lie in [1, MaxJobs %d]", ErrConfig, c.MaxJobsPerTenant, c.MaxJobs)
	case c.MaxAge < 0:
		return fmt.Errorf("%w: MaxAge %v", ErrConfig, c.MaxAge)
	case c.Duplicates < 0 || c.Duplicates > c.MaxAge:
		return fmt.Errorf("%w: Duplicates %v must lie in [0, MaxAge]", ErrConfig, c.Duplicates)
	case c.Replicas < 0 || c.Replicas > maxReplicas:
		return fmt.Errorf("%w: Replicas %d must lie in [1, %d]", ErrConfig, c.Replicas, maxReplicas)
	case c.MaxDecodeJobs < 0:
		return fmt.Errorf("%w: MaxDecodeJobs %d", ErrConfig, c.MaxDecodeJobs)
	case c.MaxDecodeBytes < 0:
		return fmt.Errorf("%w: MaxDecodeBytes %d", ErrConfig, c.MaxDecodeBytes)
	case c.ResultsTTL < 0:
		return fmt.Errorf("%w: ResultsTTL %v", ErrConfig, c.ResultsTTL)
	case c.ResultsMaxBytes < 0:
		return fmt.Errorf("%w: ResultsMaxBytes %d", ErrConfig, c.ResultsMaxBytes)
	case c.MaxUsageEvents < 0 || c.MaxUsageBytes < 0:
		return fmt.Errorf("%w: MaxUsageEvents %d, MaxUsageBytes %d", ErrConfig, c.MaxUsageEvents, c.MaxUsageBytes)
	case c.UsageMaxAge < c.Duplicates:
		return fmt.Errorf("%w: UsageMaxAge %v is under Duplicates %v", ErrConfig, c.UsageMaxAge, c.Duplicates)
	case c.MaxNotices < 0 || c.MaxNoticeBytes < 0:
		return fmt.Errorf("%w: MaxNotices %d, MaxNoticeBytes %d", ErrConfig, c.MaxNotices, c.MaxNoticeBytes)
	case c.ExportMaxAge < c.Duplicates || c.ExportMaxBytes < 0:
		return fmt.Errorf("%w: ExportMaxAge %v (at least Duplicates %v), ExportMaxBytes %d", ErrConfig, c.ExportMaxAge, c.Duplicates, c.ExportMaxBytes)
	case c.FinetunesMaxBytes < maxFinetunesRecord:
		return fmt.Errorf("%w: FinetunesMaxBytes %d is under one tenant's record (%d)", ErrConfig, c.FinetunesMaxBytes, maxFinetunesRecord)
	case c.AdaptersMaxBytes < MaxAdapterFileBytes:
		return fmt.Errorf("%w: AdaptersMaxBytes %d is under one adapter file's bound (%d)", ErrConfig, c.AdaptersMaxBytes, MaxAdapterFileBytes)
	}
	return nil
}

// Setup creates or updates the jobs stream (work-queue retention on "jobs.>",
// one subject per model and tenant, bounded in all and per subject, refusing
// new jobs when full), the decode hand-over stream (the same on "decode.>"),
// the usage stream, the export stream and the results bucket. It is idempotent: every node may
// call it at start-up.
//
// On an existing jobs stream it never drops a queued job: JetStream deletes
// the oldest messages of a subject above a lowered per-subject limit, so
// while one subject holds more than MaxJobsPerTenant (jobs an older edge
// queued on a model's own subject, JobSubject) the limit is set to that
// count instead, and the next Setup after the workers drained it lowers it.
func Setup(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	streams := cfg.streams()
	perSubject, err := keepQueued(ctx, js, cfg.MaxJobsPerTenant)
	if err != nil {
		return err
	}
	streams[0].MaxMsgsPerSubject = perSubject // the jobs stream
	for _, sc := range streams {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("queue: stream %s: %w", sc.Name, err)
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      ResultsBucket,
		Description: "Bulkhead job status, async results and de-duplication markers",
		History:     1,
		TTL:         cfg.ResultsTTL,
		MaxBytes:    cfg.ResultsMaxBytes,
		Storage:     cfg.storage(),
		Replicas:    cfg.Replicas,
		// Per-record TTLs: synchronous jobs' records live only as long as
		// redelivery needs them (recordTTL), cancel markers CancelMarkerTTL.
		LimitMarkerTTL: time.Second,
	}); err != nil {
		return fmt.Errorf("queue: bucket %s: %w", ResultsBucket, err)
	}
	// Workers publish capacity records and edges watch them, but only the
	// node setting up may create a stream (see RolePermissions).
	if _, err := setupCapacity(ctx, js, cfg.CapacityTTL, cfg.Replicas); err != nil {
		return err
	}
	return setupFinetunes(ctx, js, &cfg)
}

// setupFinetunes creates or updates the finetunes bucket and the adapters
// object store, with the streams' storage and replicas.
func setupFinetunes(ctx context.Context, js jetstream.JetStream, cfg *StreamConfig) error {
	if _, err := js.CreateOrUpdateKeyValue(ctx, finetunesConfig(cfg)); err != nil {
		return fmt.Errorf("queue: bucket %s: %w", FinetunesBucket, err)
	}
	if _, err := js.CreateOrUpdateObjectStore(ctx, adaptersConfig(cfg)); err != nil {
		return fmt.Errorf("queue: object store %s: %w", AdaptersBucket, err)
	}
	for _, stream := range []string{"KV_" + FinetunesBucket, "OBJ_" + AdaptersBucket} {
		if err := leaderReads(ctx, js, stream); err != nil {
			return err
		}
	}
	return nil
}

// leaderReads turns off direct gets on stream, so that its reads go to the
// stream's leader: with replicas, a direct get may be answered by a
// follower that has not applied the latest write yet, and a finetune
// created through one edge would be "no such finetune" for a moment on
// another (deploy/local's TestAdapterOnEveryWorker saw it at once). Reads
// of records and adapter files are rare; read-after-write matters more.
func leaderReads(ctx context.Context, js jetstream.JetStream, name string) error {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("queue: stream %s: %w", name, err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowDirect {
		return nil
	}
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("queue: stream %s: reads from the leader: %w", name, err)
	}
	return nil
}

func finetunesConfig(cfg *StreamConfig) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       FinetunesBucket,
		Description:  "Bulkhead finetunes: one record per tenant, its LoRA adapters",
		History:      1,
		MaxValueSize: maxFinetunesRecord,
		MaxBytes:     cfg.FinetunesMaxBytes,
		Storage:      cfg.storage(),
		Replicas:     cfg.Replicas,
	}
}

func adaptersConfig(cfg *StreamConfig) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      AdaptersBucket,
		Description: "Bulkhead LoRA adapter files, by tenant, finetune and sha256",
		MaxBytes:    cfg.AdaptersMaxBytes,
		Storage:     cfg.storage(),
		Replicas:    cfg.Replicas,
	}
}

func (c *StreamConfig) storage() jetstream.StorageType {
	if c.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// streams are the streams Setup creates: each a bounded work queue that
// refuses new messages when full.
func (c *StreamConfig) streams() []jetstream.StreamConfig {
	workQueue := func(name, description, prefix string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: description,
			Subjects:    []string{prefix + ">"},
			Retention:   jetstream.WorkQueuePolicy,
			Discard:     jetstream.DiscardNew,
			MaxAge:      c.MaxAge,
			Duplicates:  c.Duplicates,
			Storage:     c.storage(),
			Replicas:    c.Replicas,
		}
	}
	jobs := workQueue(JobsStream, "Bulkhead inference jobs, one subject per model and tenant", JobsPrefix)
	jobs.MaxMsgs, jobs.MaxBytes = c.MaxJobs, c.MaxBytes
	jobs.MaxMsgsPerSubject, jobs.DiscardNewPerSubject = c.MaxJobsPerTenant, true
	decode := workQueue(DecodeStream, "Bulkhead prefilled jobs waiting for a decode worker, one subject per model", DecodePrefix)
	decode.MaxMsgs, decode.MaxBytes = c.MaxDecodeJobs, c.MaxDecodeBytes
	// Usage events wait here until billing counted them (work queue: an
	// event leaves the stream when the billing consumer acks it).
	usage := workQueue(UsageStream, "Bulkhead usage events, one per request that reached a worker, for billing", UsagePrefix)
	usage.MaxMsgs, usage.MaxBytes, usage.MaxAge = c.MaxUsageEvents, c.MaxUsageBytes, c.UsageMaxAge
	// Counted usage events as CloudEvents, for readers outside Bulkhead
	// (export.go): a log, never full, its oldest events dropped first.
	export := jetstream.StreamConfig{
		Name:        ExportStream,
		Description: "Bulkhead usage events as CloudEvents, after billing counted them, for external meters",
		Subjects:    []string{ExportPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      c.ExportMaxAge,
		MaxBytes:    c.ExportMaxBytes,
		Duplicates:  c.Duplicates,
		Storage:     c.storage(),
		Replicas:    c.Replicas,
	}
	// Async job notices wait here until an edge delivered them to their
	// webhook (notify.go): a work queue, kept an hour past the retention.
	notify := workQueue(NotifyStream, "Bulkhead async job notices, until an edge delivered them to their webhooks", NotifyPrefix)
	notify.MaxMsgs, notify.MaxBytes, notify.MaxAge = c.MaxNotices, c.MaxNoticeBytes, NoticeRetention+time.Hour
	return []jetstream.StreamConfig{jobs, decode, usage, export, notify} // the jobs stream first (Setup)
}

// keepQueued is the per-subject limit Setup may give an existing jobs
// stream without deleting a queued job: want, or the most jobs one subject
// holds when that is more and the stream's limit is not already as high.
func keepQueued(ctx context.Context, js jetstream.JetStream, want int64) (int64, error) {
	st, err := js.Stream(ctx, JobsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return want, nil
	}
	if err != nil {
		return 0, fmt.Errorf("queue: stream %s: %w", JobsStream, err)
	}
	if cur := st.CachedInfo().Config.MaxMsgsPerSubject; cur > 0 && cur <= want {
		return want, nil // not lowered: nothing is deleted
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(JobsPrefix+">"))
	if err != nil {
		return 0, fmt.Errorf("queue: stream %s: %w", JobsStream, err)
	}
	most := want
	for _, n := range info.State.Subjects {
		most = max(most, int64(n))
	}
	return most, nil
}

// Replicated reports whether every stream and bucket Setup creates exists
// with at least replicas replicas, each with a leader and all its replicas
// current: what a node waits for after Setup on a cluster that is still
// forming, and what tests check after a server is lost.
func Replicated(ctx context.Context, js jetstream.JetStream, replicas int) error {
	for _, name := range streamsAll() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("queue: stream %s: %w", name, err)
		}
		info := s.CachedInfo()
		if info.Config.Replicas < replicas {
			return fmt.Errorf("queue: stream %s has %d replicas, want %d", name, info.Config.Replicas, replicas)
		}
		if replicas <= 1 {
			continue
		}
		c := info.Cluster
		if c == nil || c.Leader == "" {
			return fmt.Errorf("queue: stream %s has no leader", name)
		}
		current := 0
		for _, p := range c.Replicas {
			if p.Current && !p.Offline {
				current++
			}
		}
		if current < replicas-1 {
			return fmt.Errorf("queue: stream %s has %d current followers of %d", name, current, replicas-1)
		}
	}
	return nil
}

// Ensure checks that every stream and bucket Setup creates exists, and runs
// Setup only when one is missing. Nodes whose credentials may not create
// streams (RolePermissions) call it: against a server whose operator set the
// streams up it only reads their configuration.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) error {
	for _, name := range streamsAll() {
		_, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return Setup(ctx, js, cfg)
		}
		if err != nil {
			return fmt.Errorf("queue: stream %s: %w", name, err)
		}
	}
	return CheckStreams(ctx, js)
}

// ErrTampered: a stream's configuration would copy what it holds elsewhere.
var ErrTampered = errors.New("queue: stream configuration changed")

// streamSubjects is the subject filter of each stream Setup creates: one,
// but for the adapters object store's chunks and metadata.
func streamSubjects() map[string][]string {
	return map[string][]string{
		JobsStream:              {JobsPrefix + ">"},
		DecodeStream:            {DecodePrefix + ">"},
		UsageStream:             {UsagePrefix + ">"},
		ExportStream:            {ExportPrefix + ">"},
		NotifyStream:            {NotifyPrefix + ">"},
		"KV_" + ResultsBucket:   {"$KV." + ResultsBucket + ".>"},
		"KV_" + CapacityBucket:  {"$KV." + CapacityBucket + ".>"},
		"KV_" + FinetunesBucket: {"$KV." + FinetunesBucket + ".>"},
		"OBJ_" + AdaptersBucket: {"$O." + AdaptersBucket + ".C.>", "$O." + AdaptersBucket + ".M.>"},
	}
}

// CheckStreams verifies, on every stream Setup creates, what keeps tenants'
// prompts and results where they belong: it captures only its own subjects,
// republishes nothing, and neither mirrors nor sources another stream. A
// stream changed otherwise (by a credential that could update streams) is
// ErrTampered, naming the stream and what changed.
func CheckStreams(ctx context.Context, js jetstream.JetStream) error {
	for name, subjects := range streamSubjects() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("queue: stream %s: %w", name, err)
		}
		cfg := st.CachedInfo().Config
		switch {
		case !slices.Equal(cfg.Subjects, subjects):
			return fmt.Errorf("%w: %s captures %v, not %v alone", ErrTampered, name, cfg.Subjects, subjects)
		case cfg.RePublish != nil:
			return fmt.Errorf("%w: %s republishes to %s", ErrTampered, name, cfg.RePublish.Destination)
		case cfg.Mirror != nil || len(cfg.Sources) > 0:
			return fmt.Errorf("%w: %s mirrors or sources another stream", ErrTampered, name)
		}
	}
	return nil
}

// WatchStreams runs CheckStreams every interval until ctx ends and logs an
// error while a stream is tampered with (once per change, and an info line
// when it is as Setup made it again).
func WatchStreams(ctx context.Context, log *slog.Logger, js jetstream.JetStream, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := CheckStreams(ctx, js)
		switch {
		case errors.Is(err, ErrTampered) && err.Error() != last:
			last = err.Error()
			log.Error("queue: a stream's configuration was changed: tenants' messages may be copied elsewhere; restore it (restart the NATS node) and find who changed it", "err", err)
		case err == nil && last != "":
			last = ""
			log.Info("queue: the streams' configurations are as set up again")
		}
	}
}

// ConsumerConfig configures the durable pull consumer workers share for one
// model. Zero values take the defaults noted.
type ConsumerConfig struct {
	AckWait       time.Duration // redeliver a job whose worker went quiet this long; default 30s
	MaxDeliver    int           // deliveries before a job is dropped; default 3
	MaxAckPending int           // jobs handed out and not yet acked, all workers; default 256
}

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (c *ConsumerConfig) Validate() error {
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 3
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = 256
	}
	switch {
	case c.AckWait < 0:
		return fmt.Errorf("%w: AckWait %v", ErrConfig, c.AckWait)
	case c.MaxDeliver < 0:
		return fmt.Errorf("%w: MaxDeliver %d", ErrConfig, c.MaxDeliver)
	case c.MaxAckPending < 0:
		return fmt.Errorf("%w: MaxAckPending %d", ErrConfig, c.MaxAckPending)
	}
	return nil
}

// ConsumerName is the durable consumer name every worker serving model uses,
// so that several worker processes share its jobs.
func ConsumerName(model string) string { return "worker-" + ModelToken(model) }

// EnsureConsumer creates or updates the durable pull consumer for model's job
// subject (explicit acks) and returns it.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, model string, cfg ConsumerConfig) (jetstream.Consumer, error) {
	return ensureConsumer(ctx, js, durable{stream: JobsStream, model: model, name: ConsumerName(model),
		subjects: JobFilters(model), description: "jobs for " + model}, cfg)
}

// durable is the consumer the workers serving one model share on one
// stream.
type durable struct {
	stream, model, name, description string
	subjects                         []string      // its filter
	idle                             time.Duration // deleted by the server after this long unused; 0: never
}

// ensureConsumer creates or updates durable d: a pull consumer with explicit
// acks on d.stream, filtered to d.subjects. An existing consumer filtered to
// one subject (before per-tenant job subjects) is updated in place and keeps
// its position.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, d durable, cfg ConsumerConfig) (jetstream.Consumer, error) {
	if d.model == "" {
		return nil, fmt.Errorf("%w: empty model name", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cc := jetstream.ConsumerConfig{
		Durable:           d.name,
		Description:       d.description,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           cfg.AckWait,
		MaxDeliver:        cfg.MaxDeliver,
		MaxAckPending:     cfg.MaxAckPending,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: d.idle,
	}
	if len(d.subjects) == 1 {
		cc.FilterSubject = d.subjects[0]
	} else {
		cc.FilterSubjects = d.subjects
	}
	c, err := js.CreateOrUpdateConsumer(ctx, d.stream, cc)
	if err != nil {
		return nil, fmt.Errorf("queue: consumer %s for %s: %w", d.name, d.model, err)
	}
	return c, nil
}

// TenantBound returns the jobs stream's per-tenant bound (a tenant's jobs
// per model, StreamConfig.MaxJobsPerTenant) as the NATS node set it up.
func TenantBound(ctx context.Context, js jetstream.JetStream) (int, error) {
	st, err := js.Stream(ctx, JobsStream)
	if err != nil {
		return 0, fmt.Errorf("queue: stream %s: %w", JobsStream, err)
	}
	return int(max(st.CachedInfo().Config.MaxMsgsPerSubject, 0)), nil
}
