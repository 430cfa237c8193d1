package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/edge/tenants"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/store"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/worker"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// catalogFlags choose the models a node serves.
type catalogFlags struct {
	models   listFlag
	catalog  string
	modelDir string
}

func (c *catalogFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.models, "model", "serve a model: NAME=PATH.gguf, or the NAME of a model pulled with `bulkhead models pull` (repeatable)")
	fs.StringVar(&c.catalog, "catalog", "", "model catalog file (YAML; see models/catalog.yaml)")
	fs.StringVar(&c.modelDir, "model-dir", "", "where --model NAME finds pulled models (default $XDG_DATA_HOME/bulkhead/models, else ~/.local/share/bulkhead/models)")
}

// load builds the catalog; with neither flag it returns nil, nil. A --model
// without "=PATH" is looked up in the model directory.
func (c *catalogFlags) load() (*catalog.Catalog, error) {
	switch {
	case c.catalog != "" && len(c.models) > 0:
		return nil, fmt.Errorf("%w: give --catalog or --model, not both", errUsage)
	case c.catalog != "":
		return catalog.Load(c.catalog)
	case len(c.models) > 0:
		specs, err := c.resolveNames()
		if err != nil {
			return nil, err
		}
		return catalog.FromFlags(specs)
	}
	return nil, nil
}

// resolveNames rewrites each bare NAME in --model to NAME=PATH from the model
// directory, which is opened only when one is given.
func (c *catalogFlags) resolveNames() ([]string, error) {
	specs := append([]string(nil), c.models...)
	var st *store.Store
	for i, spec := range specs {
		if strings.Contains(spec, "=") || spec == "" {
			continue
		}
		if st == nil {
			var err error
			if st, err = openStore(c.modelDir); err != nil {
				return nil, err
			}
		}
		_, path, err := st.Lookup(spec)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("%w: --model %s: %v (pull it with `bulkhead models pull`, or give --model %s=PATH.gguf)", errUsage, spec, err, spec)
			}
			return nil, fmt.Errorf("--model %s: %w", spec, err)
		}
		specs[i] = spec + "=" + path
	}
	return specs, nil
}

// engineFlags size each model's engine on a worker.
type engineFlags struct {
	threads     int
	kvTokens    int
	context     int
	clamp       bool
	maxBatch    int
	queueSize   int
	concurrency int
	poison      bool
	scrub       string

	// onStep, when set, gives each model's engine its OnStep hook (metrics).
	onStep func(model string) func(int)
}

func (e *engineFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&e.threads, "threads", 0, "kernel threads per model (0: all cores)")
	fs.IntVar(&e.kvTokens, "kv-pool-tokens", 0, "KV pool size in tokens per model (0: the catalog's, else one full context window)")
	fs.IntVar(&e.context, "context", 0, "context window to advertise for every model (0: the catalog's)")
	fs.BoolVar(&e.clamp, "clamp-context", false, "when a model's KV pool cannot hold one request at its context window, advertise the pool's size instead of refusing to start")
	fs.IntVar(&e.maxBatch, "max-batch", 16, "sequences decoded together per model")
	fs.IntVar(&e.queueSize, "engine-queue", 64, "requests waiting for a batch slot per model")
	fs.IntVar(&e.concurrency, "concurrency", 32, "jobs a worker runs at once, all models")
	fs.BoolVar(&e.poison, "kv-poison", false, "debug: fill free KV pages with NaN so stale reads show")
	fs.StringVar(&e.scrub, "kv-scrub", "on-free", "zero KV pages when freed: on-free or never")
}

// applyContext sets the advertised context window on every catalog model.
func (e *engineFlags) applyContext(cat *catalog.Catalog) error {
	if e.context <= 0 {
		return nil
	}
	for _, m := range cat.Models() {
		if e.context > m.TrainedContext {
			return fmt.Errorf("%w: --context %d is larger than %s's trained context of %d", errUsage, e.context, m.Name, m.TrainedContext)
		}
		if err := cat.Clamp(m.Name, e.context); err != nil {
			return err
		}
	}
	return nil
}

// engines loads every catalog model and runs an engine for each until ctx
// ends. stop closes them and waits. A model whose KV pool cannot hold one
// request at its advertised context window is refused (a *poolError naming the
// numbers), or with --clamp-context its window is clamped in cat to the pool's
// size, so that everything built on cat advertises the window served.
func (e *engineFlags) engines(ctx context.Context, log *slog.Logger, cat *catalog.Catalog) (map[string]*engine.Engine, func(), error) {
	var scrub kvcache.ScrubMode
	switch e.scrub {
	case "on-free":
		scrub = kvcache.ScrubOnFree
	case "never":
		scrub = kvcache.ScrubNever
	default:
		return nil, nil, fmt.Errorf("%w: --kv-scrub %q (want on-free or never)", errUsage, e.scrub)
	}
	var (
		wg     sync.WaitGroup
		out    = map[string]*engine.Engine{}
		models []*engine.Model
	)
	stop := func() {
		for _, en := range out {
			en.Close()
		}
		wg.Wait()
		for _, m := range models {
			m.Close()
		}
	}
	for _, cm := range cat.Models() {
		m, err := engine.Load(cm.Path)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("model %s: %w", cm.Name, err)
		}
		models = append(models, m)
		window, err := e.fitContext(log, cat, cm, m.Hyper)
		if err != nil {
			stop()
			return nil, nil, err
		}
		cfg := engine.Config{
			Threads: e.threads, Context: window, PageSize: pageSize, MaxBatch: e.maxBatch, QueueSize: e.queueSize,
			Poison: e.poison, Scrub: scrub, KVTokens: cm.KVPoolTokens, KVBytes: cm.KVPoolBytes,
		}
		if e.onStep != nil {
			cfg.OnStep = e.onStep(cm.Name)
		}
		if e.kvTokens > 0 {
			cfg.KVTokens, cfg.KVBytes = e.kvTokens, 0
		}
		en, err := engine.New(log.With("model", cm.Name), m, cfg)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("model %s: %w", cm.Name, err)
		}
		out[cm.Name] = en
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := en.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("engine stopped", "model", cm.Name, "err", err)
			}
		}()
		log.Info("model ready", "model", cm.Name, "path", cm.Path, "context", en.Context(),
			"kv_pool_tokens", en.KV().TotalPages()*en.KV().PageSize())
	}
	return out, stop, nil
}

// connect opens a NATS connection (with opts: credentials, TLS) and
// JetStream context and makes sure the streams exist (queue.Ensure: a role
// that may not create them finds them set up by the operator).
func connect(ctx context.Context, log *slog.Logger, url, name string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, append(opts, permissionLogger(log), nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}))...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := queue.Ensure(setupCtx, js, queue.StreamConfig{}); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("setting up JetStream at %s: %w", url, err)
	}
	return nc, js, nil
}

// workerObs is what a worker reports through: its tracer provider (nil:
// tracing off), the process's worker metrics, and its name among them.
type workerObs struct {
	tp      trace.TracerProvider
	metrics *worker.Metrics
	name    string
}

// runWorker serves jobs for the engines in role until ctx ends, then drains.
// It registers the worker with the fleet meanwhile.
func runWorker(ctx context.Context, log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, engines map[string]*engine.Engine, concurrency int, role worker.Role, obs workerObs) error {
	w, err := worker.New(log.With("node", "worker"), nc, js, worker.Config{Role: role, Models: engines, Concurrency: concurrency,
		TracerProvider: obs.tp, Metrics: obs.metrics})
	if err != nil {
		return err
	}
	obs.metrics.AddEngines(obs.name, role, engines)
	unregister := registerWorker(log, nc, string(role), engines, w.JobsDone)
	defer unregister()
	return w.Run(ctx)
}

// edgeFlags configure the HTTP edge.
type edgeFlags struct {
	listen         string
	redisURL       string
	jwks           string
	algorithms     string
	hs256Secret    string
	audience       string
	issuer         string
	rpm            int
	maxConcurrent  int
	dailyNeurons   float64
	failOpen       bool
	requestTimeout time.Duration
	maxBody        int64
	http           edge.HTTPLimits
	classes        string // --tenant-classes
	members        string // --tenant-class
	maxTokens      int    // --default-max-tokens
}

func (e *edgeFlags) register(fs *flag.FlagSet, withRedis bool) {
	fs.StringVar(&e.listen, "listen", "127.0.0.1:8787", "HTTP listen address")
	if withRedis {
		fs.StringVar(&e.redisURL, "redis", "", "Redis URL for quotas, e.g. redis://127.0.0.1:6379/0")
	}
	fs.StringVar(&e.jwks, "jwks", "", "JWKS file with the keys that sign tenant tokens")
	fs.StringVar(&e.algorithms, "jwt-algorithms", "EdDSA,ES256,RS256", "accepted JWT algorithms (HS256 needs --jwt-hs256-secret)")
	fs.StringVar(&e.hs256Secret, "jwt-hs256-secret", "", "shared secret for HS256 tokens (at least 32 bytes; off when empty)")
	fs.StringVar(&e.audience, "jwt-audience", "", "required JWT aud (unchecked when empty)")
	fs.StringVar(&e.issuer, "jwt-issuer", "", "required JWT iss (unchecked when empty)")
	fs.IntVar(&e.rpm, "quota-rpm", 0, "requests per minute per tenant (0: unlimited)")
	fs.IntVar(&e.maxConcurrent, "quota-concurrent", 0, "concurrent requests per tenant (0: unlimited)")
	fs.Float64Var(&e.dailyNeurons, "quota-daily-neurons", 0, "neurons per tenant per UTC day (0: unlimited)")
	fs.BoolVar(&e.failOpen, "quota-fail-open", false, "admit requests when Redis is unreachable (default: refuse with 503)")
	fs.DurationVar(&e.requestTimeout, "request-timeout", 2*time.Minute, "a request's deadline from acceptance")
	fs.Int64Var(&e.maxBody, "max-body-bytes", 1<<20, "largest request body accepted")
	fs.StringVar(&e.classes, "tenant-classes", "", "tenant classes, e.g. \"free:max_queued=32;pro:max_queued=512,weight=4\": max_queued bounds a tenant's jobs queued or running across models (counted in Redis; 0: only --jobs-per-tenant of the jobs stream), weight its share of a worker; the class \"default\" (max_queued=0, weight=1 unless listed) holds every tenant not in --tenant-class (docs/fairness.md)")
	fs.StringVar(&e.members, "tenant-class", "", "tenants' classes from their token's tenant id, e.g. \"acme=pro,globex=free\"")
	fs.IntVar(&e.maxTokens, "default-max-tokens", edge.DefaultMaxTokens, "max_tokens of a request that gives none, both APIs (an OpenAI request gets at most the rest of the window; the catalog property default_max_tokens overrides it per model)")
	fs.DurationVar(&e.http.ReadHeaderTimeout, "http-header-timeout", edge.DefaultReadHeaderTimeout, "a request's line and headers must arrive within this")
	fs.DurationVar(&e.http.BodyReadTimeout, "http-body-timeout", edge.DefaultBodyReadTimeout, "a request's body must arrive within this of its headers, else 408")
	fs.DurationVar(&e.http.IdleTimeout, "http-idle-timeout", edge.DefaultIdleTimeout, "an idle keep-alive connection is closed after this")
	fs.IntVar(&e.http.MaxHeaderBytes, "http-max-header-bytes", edge.DefaultMaxHeaderBytes, "largest request line and headers")
}

// verifier builds the token verifier: the JWKS file given, else dev's key.
func (e *edgeFlags) verifier(log *slog.Logger, dev *auth.DevKey) (*auth.Verifier, error) {
	cfg := auth.Config{JWKSFile: e.jwks, Audience: e.audience, Issuer: e.issuer}
	if e.jwks == "" {
		if dev == nil {
			return nil, fmt.Errorf("%w: --jwks is required", errUsage)
		}
		cfg = dev.VerifierConfig()
	}
	cfg.Algorithms = strings.Split(e.algorithms, ",")
	if e.hs256Secret != "" {
		cfg.HS256Secret = []byte(e.hs256Secret)
		cfg.Algorithms = append(cfg.Algorithms, auth.AlgHS256)
	}
	return auth.NewVerifier(log.With("node", "edge"), cfg)
}

// tenants builds the tenant class table.
func (e *edgeFlags) tenants() (*tenants.Table, error) {
	classes, err := tenants.ParseClasses(e.classes)
	if err != nil {
		return nil, fmt.Errorf("%w: --tenant-classes: %v", errUsage, err)
	}
	members, err := tenants.ParseMembers(e.members)
	if err != nil {
		return nil, fmt.Errorf("%w: --tenant-class: %v", errUsage, err)
	}
	t, err := tenants.New(tenants.Config{Classes: classes, Members: members})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return t, nil
}

// quota builds the quota limiter over rdb (nil when no limit is set).
func (e *edgeFlags) quota(log *slog.Logger, rdb redis.UniversalClient) (*quota.Quota, error) {
	return quota.New(log, rdb, quota.Config{
		RequestsPerMinute: e.rpm, MaxConcurrent: e.maxConcurrent, DailyNeurons: e.dailyNeurons,
		FailOpen: e.failOpen, LeaseTTL: e.requestTimeout + time.Minute,
	})
}

// serveEdge runs the HTTP edge until ctx ends, then shuts it down gracefully.
// The listener also serves /metrics (reg), /healthz and /readyz (h), without
// auth; h drains once ctx ends. ready, if not nil, receives the bound
// address once listening.
func serveEdge(ctx context.Context, log *slog.Logger, srv *edge.Server, h *health, reg *prometheus.Registry, listen string, ready func(addr string)) error {
	mux := http.NewServeMux()
	opsRoutes(mux, h, reg)
	mux.Handle("/", srv.Handler())
	hs := srv.HTTPServer(mux)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	// Ended async jobs give their quota slots back until the server is shut.
	relCtx, stopRel := context.WithCancel(context.Background())
	relDone := make(chan struct{})
	go func() {
		defer close(relDone)
		if err := srv.ReleaseEnded(relCtx); err != nil {
			log.Warn("edge: no longer watching async jobs end; their quota slots expire by themselves", "error", err)
		}
	}()
	defer func() { stopRel(); <-relDone }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	log.Info("edge listening", "addr", "http://"+ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	h.drain()
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = hs.Shutdown(shutCtx)
	<-errc
	return err
}
