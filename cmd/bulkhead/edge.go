package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/edge/router"
	"github.com/bulkhead-ai/bulkhead/edge/tenants"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// edgeCmdFlags are `bulkhead edge`'s flags.
type edgeCmdFlags struct {
	nodeFlags
	window int
	edge   edgeFlags
}

func runEdgeCmd(ctx context.Context, args []string, _, stderr io.Writer) error {
	var f edgeCmdFlags
	fs := newFlags("edge", stderr)
	f.nodeFlags.register(fs, false, true)
	f.edge.register(fs, true)
	fs.IntVar(&f.window, "context", 0, "context window to advertise for every model (0: the catalog's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	return f.run(ctx, stderr)
}

// run starts the edge node and serves until ctx ends.
func (f *edgeCmdFlags) run(ctx context.Context, stderr io.Writer) error {
	log, tel, err := f.obs.startNode(ctx, stderr, "bulkhead-edge", "edge")
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	cat, err := f.catalog.loadRequired()
	if err != nil {
		return err
	}
	if err := (&engineFlags{context: f.window}).applyContext(cat); err != nil {
		return err
	}
	verifier, err := f.edge.verifier(log, nil)
	if err != nil {
		return err
	}
	n := edgeNode{log: log, tel: tel, h: edge.NewHealth(), cat: cat, verifier: verifier, logContent: f.obs.logContent}
	if f.edge.redisURL != "" {
		rdb, err := dialRedis(f.edge.redisURL)
		if err != nil {
			return err
		}
		defer rdb.Close()
		n.rdb = rdb
		n.h.Add("redis", redisCheck(rdb))
	}
	if n.ledger, err = edgeLedger(n.rdb); err != nil {
		return err
	}
	if n.nc, n.js, err = f.nats.connect(ctx, log, f.natsURL, "bulkhead-edge"); err != nil {
		return err
	}
	defer n.nc.Close()
	n.h.Add("nats", natsCheck(n.nc))
	return f.edge.serve(ctx, n)
}

// edgeNode is what an edge is built from besides its flags.
type edgeNode struct {
	log        *slog.Logger
	tel        *telemetry
	h          *edge.Health // the edge adds its jwks check; drained once ctx ends
	nc         *nats.Conn
	js         jetstream.JetStream
	cat        *catalog.Catalog
	verifier   *auth.Verifier
	rdb        redis.UniversalClient // quotas; nil: none that need Redis
	ledger     *ledger.Ledger        // the usage API's; nil: none
	logContent bool
	ready      func(addr string) // if not nil, called with the bound address once listening
}

// serve runs the edge on n until ctx ends, then shuts it down gracefully.
// It advertises and admits by no more than the live workers can hold
// (edge.FollowCapacity) and registers with the fleet meanwhile.
func (e *edgeFlags) serve(ctx context.Context, n edgeNode) error {
	// Not ready once the JWKS file has failed to reload past its keys' grace.
	n.h.Add("jwks", func(context.Context) error { return n.verifier.Ready() })
	q, err := e.quota(n.log, n.rdb)
	if err != nil {
		return err
	}
	em, err := edge.NewMetrics(n.tel.reg)
	if err != nil {
		return err
	}
	followCtx, stopFollow := context.WithCancel(context.Background())
	live, waitFollow, err := edge.FollowCapacity(followCtx, n.log, n.js, n.cat)
	if err != nil {
		stopFollow()
		return err
	}
	defer func() { stopFollow(); waitFollow() }()
	hooks, err := e.webhooks()
	if err != nil {
		return err
	}
	classes, err := e.tenants()
	if err != nil {
		return err
	}
	bound, err := queue.TenantBound(ctx, n.js)
	if err != nil {
		return err
	}
	records, recordTTL, err := queue.AsyncRecordsPerTenant(ctx, n.js)
	if err != nil {
		return err
	}
	if e.asyncRecords > 0 {
		records = e.asyncRecords
	}
	finetunes, err := queue.OpenFinetunes(ctx, n.js)
	if err != nil {
		return err
	}
	var rt edge.Router
	if !e.noRouting {
		r, err := router.New(n.nc, router.Config{})
		if err != nil {
			return fmt.Errorf("routing: %w", err)
		}
		defer r.Close()
		if err := n.tel.reg.Register(r.Collector(catalogNames(n.cat))); err != nil {
			return fmt.Errorf("routing: %w", err)
		}
		rt = r
	}
	srv, err := edge.New(n.log.With("node", "edge"), edge.Config{
		Catalog: n.cat, Auth: n.verifier, Quota: q, Queue: queue.NewClient(n.nc, n.js).WithLiveness(live),
		Ledger: n.ledger, DailyNeurons: e.dailyNeurons,
		RequestTimeout: e.requestTimeout, MaxBodyBytes: e.maxBody, HTTP: e.http, UploadTimeout: e.uploadTimeout, MaxUploads: e.maxUploads,
		Tenants: classes, TenantQueueBound: bound, AsyncRecordsPerTenant: records, AsyncRecordTTL: recordTTL,
		DefaultMaxTokens: e.maxTokens, Router: rt, Webhooks: hooks, Finetunes: finetunes,
		TracerProvider: n.tel.tp, ContinueClientTraces: e.continueTraces, TraceAllow: splitList(e.traceAllow), Metrics: em, LogContent: n.logContent,
	})
	if err != nil {
		return err
	}
	defer registerEdge(n.log, n.nc, catalogNames(n.cat))()
	err = serveEdge(ctx, n, srv, e.listen, e.grace)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// serveEdge serves srv on listen until ctx ends, then drains it
// (edge.Drain, within grace) and shuts the listener down. The listener also
// serves /metrics, /healthz and /readyz without auth; n.h drains once ctx
// ends.
func serveEdge(ctx context.Context, n edgeNode, srv *edge.Server, listen string, grace time.Duration) error {
	mux := http.NewServeMux()
	edge.OpsRoutes(mux, n.h, n.tel.reg)
	mux.Handle("/", srv.Handler())
	hs := srv.HTTPServer(mux)
	ln, err := edge.Listen(listen)
	if err != nil {
		return err
	}
	// Ended async jobs give their quota slots back until the server is shut.
	stopRelease := background(func(ctx context.Context) error {
		srv.ReleaseEnded(ctx) // until ctx ends; a broken watch is started again
		return nil
	})
	defer func() { _ = stopRelease() }()
	// Async notices and key alerts go to their webhooks (with
	// --webhook-hosts) and tenants' event subjects, with the other edges.
	stopHooks := background(func(ctx context.Context) error {
		srv.RunWebhooks(ctx) // until ctx ends
		return nil
	})
	defer func() { _ = stopHooks() }()
	if n.ready != nil {
		n.ready(ln.Addr().String())
	}
	n.log.Info("edge listening", "addr", "http://"+ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Drain: /readyz fails at once (a load balancer stops sending), new
	// requests get 503 draining, and those in flight finish within grace.
	n.h.Drain()
	n.log.Info("edge draining", "in_flight", srv.InFlight(), "grace", grace)
	drainCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Drain(drainCtx); err != nil {
		n.log.Warn("edge drain grace over, requests cut short with a draining error", "grace", grace)
	}
	// Every admitted request has ended by now. What can still hold Shutdown
	// up: a client that is slow to read its last response, or a connection
	// that never sent a request (net/http waits up to 5s for its first
	// one: a client cancelled mid-dial leaves these). Past shutdownGrace
	// they are closed: no request is lost, and the node exits cleanly.
	shutCtx, cancelShut := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancelShut()
	err = hs.Shutdown(shutCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		n.log.Info("edge closing connections that carry no request", "after", shutdownGrace)
		err = hs.Close()
	}
	<-errc
	n.log.Info("edge stopped")
	return err
}

// shutdownGrace bounds the wait, after a drain, for connections to go idle.
const shutdownGrace = 2 * time.Second

// defaultDrainGrace is every node's --drain-grace: what a Kubernetes pod's
// terminationGracePeriodSeconds must exceed.
const defaultDrainGrace = 30 * time.Second

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
	uploadTimeout  time.Duration // --upload-timeout
	maxUploads     int           // --max-uploads
	grace          time.Duration // --drain-grace
	http           edge.HTTPLimits
	classes        string // --tenant-classes
	members        string // --tenant-class
	maxTokens      int    // --default-max-tokens
	noRouting      bool   // --no-routing
	continueTraces bool   // --trace-continue-client
	traceAllow     string // --trace-allow
	asyncRecords   int    // --async-results-per-tenant
	webhookHosts   string // --webhook-hosts
	webhookPrivate bool   // --webhook-allow-private
	webhookCA      string // --webhook-ca
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
	fs.DurationVar(&e.uploadTimeout, "upload-timeout", edge.DefaultUploadTimeout, "how long a LoRA adapter upload's body may take to arrive (instead of --http-body-timeout)")
	fs.IntVar(&e.maxUploads, "max-uploads", edge.DefaultMaxUploads, "LoRA adapter uploads this edge holds in memory at once (each up to 256 MiB); more are refused with 429")
	fs.DurationVar(&e.grace, "drain-grace", defaultDrainGrace, "on SIGTERM, how long requests in flight may run on while new ones get 503 draining")
	fs.StringVar(&e.classes, "tenant-classes", "", "tenant classes, e.g. \"free:max_queued=32,prefix_cache=off;pro:max_queued=512,weight=4\": max_queued bounds a tenant's jobs queued or running across models (counted in Redis; 0: the jobs stream's per-tenant bound, --jobs-per-tenant, across models too), weight its share of a worker, prefix_cache=off keeps its tenants out of the prefix cache (default on); the class \"default\" (max_queued=0, weight=1, prefix_cache=on unless listed) holds every tenant not in --tenant-class (docs/fairness.md)")
	fs.IntVar(&e.asyncRecords, "async-results-per-tenant", 0, "async results one tenant may keep in the results store (each lives its TTL, 24 h by default), counted in Redis; over it a batch gets 429 async_results_full (0: a tenth of what half the store holds at 4 KiB a result, from its size at start)")
	fs.StringVar(&e.webhookHosts, "webhook-hosts", "", "hosts an async batch's webhook may name, comma-separated: \"hooks.example.com\", \"*.example.com\" (any subdomain) or \"*\" (any host); empty: webhooks are refused")
	fs.BoolVar(&e.webhookPrivate, "webhook-allow-private", false, "let webhooks reach loopback, private and link-local addresses (receivers inside your network); by default only public addresses, checked at every connection")
	fs.StringVar(&e.webhookCA, "webhook-ca", "", "PEM file of CAs webhook receivers' certificates are checked against (default: the system's)")
	fs.StringVar(&e.members, "tenant-class", "", "tenants' classes from their token's tenant id, e.g. \"acme=pro,globex=free\"")
	fs.BoolVar(&e.noRouting, "no-routing", false, "queue every job on its tenant's shared queue, for any worker, instead of routing it to the worker of its session or prefix (docs/routing.md)")
	fs.BoolVar(&e.continueTraces, "trace-continue-client", false, "with tracing on, make each request's spans part of the client's trace (its traceparent, sampled flag included) instead of a trace of the edge's own linked to it; only where every client is trusted")
	fs.StringVar(&e.traceAllow, "trace-allow", "", "comma-separated keys a client's trace headers may pass through to its request's trace and jobs: baggage members with these keys and, with --trace-continue-client, tracestate entries with these vendor keys (default: both headers dropped)")
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

// splitList splits a comma-separated flag value into its trimmed, non-empty
// items.
func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// webhooks builds the webhook configuration: nil without --webhook-hosts.
func (e *edgeFlags) webhooks() (*edge.WebhookConfig, error) {
	hosts := splitList(e.webhookHosts)
	if len(hosts) == 0 {
		if e.webhookPrivate || e.webhookCA != "" {
			return nil, fmt.Errorf("%w: --webhook-allow-private and --webhook-ca need --webhook-hosts", errUsage)
		}
		return nil, nil
	}
	cfg := &edge.WebhookConfig{Hosts: hosts, AllowPrivate: e.webhookPrivate}
	if e.webhookCA != "" {
		pem, err := os.ReadFile(e.webhookCA)
		if err != nil {
			return nil, fmt.Errorf("%w: --webhook-ca: %v", errUsage, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --webhook-ca %s holds no PEM certificate", errUsage, e.webhookCA)
		}
	}
	return cfg, nil
}
