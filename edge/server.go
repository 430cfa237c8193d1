package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/edge/router"
	"github.com/bulkhead-ai/bulkhead/edge/tenants"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Authenticator verifies a request's credentials. edge/auth.Verifier
// implements it; errors wrap auth.ErrUnauthenticated or auth.ErrForbidden.
type Authenticator interface {
	Authenticate(r *http.Request) (auth.Principal, error)
}

// Limiter admits a tenant's request, and every job it queues, against its
// quotas and its class's queue bound, and is told what the request cost
// when it ends; ReleaseJobs gives back the slots of async jobs that ended.
// edge/quota.Quota implements it.
type Limiter interface {
	AcquireJobs(ctx context.Context, tenant string, jobs quota.Jobs) (release func(usage quota.Usage), err error)
	// Reserve reserves an admitted request's jobs' worst cases (ids as
	// acquired, micro-neurons) against the tenant's daily budget and its
	// API key's (key; "" for none).
	Reserve(ctx context.Context, tenant, key string, ids []string, worst []int64) error
	ReleaseJobs(ctx context.Context, tenant string, ids ...string) error
}

// Router chooses the worker queue of each job. edge/router.Router
// implements it.
type Router interface {
	Route(model, tenant, session, prompt string) router.Decision
}

// Queue publishes jobs and reads their replies. queue.Client implements it.
type Queue interface {
	Submit(ctx context.Context, job *queue.Job) (*queue.Replies, error)
	Cancel(ctx context.Context, id string) error
	SubmitAsync(ctx context.Context, job *queue.Job) error
	AsyncStatus(ctx context.Context, id string) (*queue.AsyncResult, error)
}

var (
	_ Queue         = (*queue.Client)(nil)
	_ Limiter       = (*quota.Quota)(nil)
	_ Authenticator = (*auth.Verifier)(nil)
	_ Router        = (*router.Router)(nil)
)

// Defaults for zero Config fields.
const (
	DefaultRequestTimeout   = 2 * time.Minute
	DefaultMaxBodyBytes     = 1 << 20
	DefaultMaxTokens        = 256
	DefaultMaxBatchRequests = 32
	// replyGrace is how long past a job's deadline the edge keeps waiting for
	// the worker's own timeout frame before giving up itself.
	replyGrace = 5 * time.Second
	// cancelTimeout bounds recording the cancel of a job whose client is
	// gone.
	cancelTimeout = 5 * time.Second
)

// Config configures a Server. Zero values take the defaults noted.
type Config struct {
	Catalog *catalog.Catalog // required
	Auth    Authenticator    // required
	Quota   Limiter          // required
	Queue   Queue            // required; a *queue.Client

	RequestTimeout   time.Duration // a job's deadline after it is accepted; default 2m
	MaxBodyBytes     int64         // request body limit; default 1 MiB
	DefaultMaxTokens int           // max_tokens when absent, both APIs (catalog property default_max_tokens overrides it); default 256
	MaxBatchRequests int           // requests in one async batch; default 32
	// Webhooks lets async batches name a webhook (webhook.go); nil: refused.
	Webhooks *WebhookConfig
	HTTP     HTTPLimits // limits of the listener HTTPServer builds; zero fields take defaults
	// Tenants maps each verified tenant to its class (queue bound and
	// scheduling weight); nil puts every tenant in tenants.DefaultClass.
	Tenants *tenants.Table
	// TenantQueueBound bounds the jobs (queued or running, across all
	// models) of a tenant whose class sets no max_queued, counted with the
	// quota in Redis; 0: none. The wiring gives it the jobs stream's
	// per-tenant bound (queue.TenantBound), so one tenant holds at most a
	// tenth of the stream whatever number of models it floods.
	TenantQueueBound int
	// AsyncRecordsPerTenant bounds a tenant's async results kept in the
	// results store (each for AsyncRecordTTL, the store's TTL), counted
	// with the quota in Redis; 0: none. The wiring derives it from the
	// store's size (queue.AsyncRecordsPerTenant).
	AsyncRecordsPerTenant int
	AsyncRecordTTL        time.Duration
	// Router routes each job to the worker likely to hold its prefix
	// (docs/routing.md); nil queues every job on its tenant's shared queue.
	Router Router

	// TracerProvider makes the edge's spans; nil (or a no-op provider) turns
	// tracing off, and then the request path does no tracing work.
	TracerProvider trace.TracerProvider
	// ContinueClientTraces makes a request's server span the child of the
	// client's traceparent. Off (the default), the edge starts its own trace
	// for every request, linked to the client's span: a client chooses
	// neither the trace id nor, through its sampled flag, whether the
	// platform samples (the operator's sampler decides). Turn it on only
	// where every client is trusted (an internal caller's own tracing).
	ContinueClientTraces bool
	// TraceAllow lists the keys a client's trace headers may pass through
	// to the request's trace and jobs: baggage members with these keys, and,
	// when client traces are continued, tracestate entries with these vendor
	// keys. Everything else in baggage and tracestate is dropped; empty
	// (the default) drops both headers whole.
	TraceAllow []string
	// Metrics records the edge's Prometheus series; nil records none.
	Metrics *Metrics
	// LogContent logs each admitted prompt at debug level (debugging only:
	// prompts are tenant data; cmd warns at start-up when it is on).
	LogContent bool

	// Ledger, when set, serves the usage API (billing/usage) from billing's
	// rollups; DailyNeurons is the budget it reports (0: unlimited).
	Ledger       *ledger.Ledger
	DailyNeurons float64

	// Finetunes, when set, serves the finetune API (tenants' LoRA
	// adapters, finetunes.go) and resolves the lora of requests; nil: no
	// finetune routes, and a request naming a lora is refused.
	Finetunes FinetuneStore
	// MaxUploads bounds the adapter uploads held in memory at once;
	// default DefaultMaxUploads.
	MaxUploads int
	// UploadTimeout is how long an adapter upload's body may take to
	// arrive (instead of HTTP.BodyReadTimeout); default
	// DefaultUploadTimeout.
	UploadTimeout time.Duration
}

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (c *Config) Validate() error {
	switch {
	case c.Catalog == nil:
		return fmt.Errorf("%w: Catalog is nil", ErrConfig)
	case c.Auth == nil:
		return fmt.Errorf("%w: Auth is nil", ErrConfig)
	case c.Quota == nil:
		return fmt.Errorf("%w: Quota is nil", ErrConfig)
	case c.Queue == nil:
		return fmt.Errorf("%w: Queue is nil", ErrConfig)
	case c.RequestTimeout < 0:
		return fmt.Errorf("%w: RequestTimeout %v is negative", ErrConfig, c.RequestTimeout)
	case c.TenantQueueBound < 0:
		return fmt.Errorf("%w: TenantQueueBound %d is negative", ErrConfig, c.TenantQueueBound)
	case c.AsyncRecordsPerTenant < 0 || c.AsyncRecordsPerTenant > 0 && c.AsyncRecordTTL < time.Second:
		return fmt.Errorf("%w: AsyncRecordsPerTenant %d needs an AsyncRecordTTL of a second or more, not %v",
			ErrConfig, c.AsyncRecordsPerTenant, c.AsyncRecordTTL)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("%w: MaxBodyBytes %d is negative", ErrConfig, c.MaxBodyBytes)
	case c.DefaultMaxTokens < 0:
		return fmt.Errorf("%w: DefaultMaxTokens %d is negative", ErrConfig, c.DefaultMaxTokens)
	case c.MaxBatchRequests < 0:
		return fmt.Errorf("%w: MaxBatchRequests %d is negative", ErrConfig, c.MaxBatchRequests)
	case c.MaxUploads < 0:
		return fmt.Errorf("%w: MaxUploads %d is negative", ErrConfig, c.MaxUploads)
	case c.UploadTimeout < 0:
		return fmt.Errorf("%w: UploadTimeout %v is negative", ErrConfig, c.UploadTimeout)
	}
	if err := c.HTTP.Validate(); err != nil {
		return err
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = DefaultMaxTokens
	}
	if c.MaxBatchRequests == 0 {
		c.MaxBatchRequests = DefaultMaxBatchRequests
	}
	if c.MaxUploads == 0 {
		c.MaxUploads = DefaultMaxUploads
	}
	if c.UploadTimeout == 0 {
		c.UploadTimeout = DefaultUploadTimeout
	}
	if c.Tenants == nil {
		t, err := tenants.New(tenants.Config{})
		if err != nil {
			return err
		}
		c.Tenants = t
	}
	return nil
}

// Server serves the native and OpenAI APIs. It holds no per-request state
// but the count of requests in flight (for Drain); each handler's work ends
// when it returns.
type Server struct {
	log    *slog.Logger
	cfg    Config
	vocabs map[string]*vocab // by catalog name; read-only after New
	mux    *http.ServeMux
	h      http.Handler // mux behind the request-id, tracing and metrics middleware

	tracer  trace.Tracer // from cfg.TracerProvider; used only when tracing
	tracing bool

	drain drainer // requests in flight; refuses new ones once draining

	uploads chan struct{} // a slot per adapter upload in progress (Config.MaxUploads)
}

// New validates cfg and loads every catalog model's tokenizer and chat
// template for admission. A model whose file has no usable tokenizer stops
// startup.
func New(log *slog.Logger, cfg Config) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{log: log, cfg: cfg, vocabs: make(map[string]*vocab), uploads: make(chan struct{}, cfg.MaxUploads)}
	if s.tracing = tracingOn(cfg.TracerProvider); s.tracing {
		s.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	models := cfg.Catalog.Models()
	if len(models) == 0 {
		return nil, fmt.Errorf("%w: the catalog has no models", ErrConfig)
	}
	for _, m := range models {
		if m.ContextWindow <= 0 {
			return nil, fmt.Errorf("%w: model %q has context window %d", ErrConfig, m.Name, m.ContextWindow)
		}
		if _, err := modelMaxTokens(m, cfg.DefaultMaxTokens); err != nil {
			return nil, err
		}
		if err := s.checkEntitlements(m); err != nil {
			return nil, err
		}
		v, err := loadVocab(log, m.Name, m.Path, trustContent(m))
		if err != nil {
			return nil, err
		}
		s.vocabs[m.Name] = v
	}
	s.routes()
	s.h = s.observe(closeAfterChunked(s.gate(s.mux)))
	return s, nil
}

// Handler returns the HTTP handler for every route.
func (s *Server) Handler() http.Handler { return s.h }

const accountPrefix = "/client/v4/accounts/{account_id}"

func (s *Server) routes() {
	mux := http.NewServeMux()
	for _, prefix := range []string{"", accountPrefix} {
		mux.HandleFunc("POST "+prefix+"/ai/run/{model...}", s.handleRun)
		mux.HandleFunc("GET "+prefix+"/ai/models/search", s.handleModelsSearch)
		v1 := "/v1"
		if prefix != "" {
			v1 = prefix + "/ai/v1"
		}
		mux.HandleFunc("POST "+v1+"/chat/completions", s.handleChat)
		mux.HandleFunc("POST "+v1+"/completions", s.handleCompletions)
		mux.HandleFunc("POST "+v1+"/embeddings", s.handleEmbeddings)
		mux.HandleFunc("POST "+v1+"/rerank", s.handleRerank)
		mux.HandleFunc("GET "+v1+"/models", s.handleModels)
	}
	s.billingRoutes(mux)
	s.finetuneRoutes(mux)
	mux.HandleFunc("/", s.handleNoRoute)
	s.mux = mux
}

func (s *Server) handleNoRoute(w http.ResponseWriter, r *http.Request) {
	writeErrorFor(w, r, s.refuse(r, newError(rowNotFound, "No route for "+r.Method+" "+r.URL.Path, nil)))
}

func isOpenAIPath(p string) bool {
	return strings.HasPrefix(p, "/v1/") || strings.Contains(p, "/ai/v1/")
}

// writeErrorFor writes e in the error shape of r's API: OpenAI's for its
// paths, the native envelope for the rest.
func writeErrorFor(w http.ResponseWriter, r *http.Request, e *Error) {
	if isOpenAIPath(r.URL.Path) {
		writeOpenAIError(w, e)
		return
	}
	writeNativeError(w, e)
}

// authenticate verifies the caller, checks that an account id in the path
// names the token's tenant, and that the token grants one of scopes.
func (s *Server) authenticate(r *http.Request, scopes ...string) (auth.Principal, error) {
	_, span := s.startSpan(r.Context(), spanAuth)
	p, err := s.cfg.Auth.Authenticate(r)
	endSpan(span, err)
	if err != nil {
		return auth.Principal{}, err
	}
	infoOf(r).span.SetAttributes(queue.AttrTenant.String(p.Tenant))
	if p.Key != "" {
		infoOf(r).span.SetAttributes(queue.AttrKey.String(p.Key))
	}
	if acct := r.PathValue("account_id"); acct != "" && acct != p.Tenant {
		return auth.Principal{}, ErrAccountMismatch
	}
	for _, sc := range scopes {
		if p.HasScope(sc) {
			return p, nil
		}
	}
	return auth.Principal{}, p.RequireScope(scopes[0])
}

// lookupModel finds a model the principal may use.
func (s *Server) lookupModel(p auth.Principal, name string) (*catalog.Model, *vocab, error) {
	m, ok := s.cfg.Catalog.Lookup(name)
	v := s.vocabs[name]
	if !ok || v == nil {
		return nil, nil, &ModelError{Name: name, Err: ErrUnknownModel}
	}
	if !p.AllowsModel(name) {
		return nil, nil, &ModelError{Name: name, Err: ErrModelForbidden}
	}
	if !s.entitled(p.Tenant, m) {
		return nil, nil, &ModelError{Name: name, Err: ErrModelNotEntitled}
	}
	return m, v, nil
}

// newID returns a fresh request id: 16 random bytes in hex.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
