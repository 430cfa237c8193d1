package edge

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/edge/tenants"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Fairness at the edge (docs/fairness.md): every job a tenant queues holds
// a slot of its quota (concurrency, rate) and of its class's queue bound
// until it ends, and carries its class's scheduling weight to the worker.

// PropDefaultMaxTokens is the catalog property that sets a model's
// max_tokens for requests that give none, on both APIs (default:
// Config.DefaultMaxTokens). It bounds what one request reserves of a
// worker's KV pool; OpenAI requests get it or the rest of the context
// window, whichever is less.
const PropDefaultMaxTokens = "default_max_tokens"

// asyncLeaseGrace is how long past its deadline an async job's slot lives
// when no edge saw its record end (the edge was down, the job was dropped):
// its worker gives up at the deadline and records the failure within it.
const asyncLeaseGrace = 30 * time.Second

// modelMaxTokens is m's default max_tokens: its PropDefaultMaxTokens, else
// def. A property that is not a positive integer within the context window
// is a configuration error.
func modelMaxTokens(m *catalog.Model, def int) (int, error) {
	v, ok := m.Properties[PropDefaultMaxTokens]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n >= m.ContextWindow {
		return 0, fmt.Errorf("%w: model %q: %s %q must be an integer in [1, %d)", ErrConfig, m.Name,
			PropDefaultMaxTokens, v, m.ContextWindow)
	}
	return n, nil
}

// defaultMaxTokens is m's default max_tokens (checked in New).
func (s *Server) defaultMaxTokens(m *catalog.Model) int {
	n, _ := modelMaxTokens(m, s.cfg.DefaultMaxTokens)
	return n
}

// class is tenant's class; the tenant comes from the verified token.
func (s *Server) class(tenant string) tenants.Class { return s.cfg.Tenants.Of(tenant) }

// acquireSync takes the quota and the class's queue slot of a synchronous
// request: one job, named by the request id, held until the handler ends.
// p is the verified caller: its tenant, and its API key, if any, whose own
// limits apply too.
func (s *Server) acquireSync(ctx context.Context, p auth.Principal, id string) (func(quota.Usage), error) {
	return s.cfg.Quota.AcquireJobs(ctx, p.Tenant, quota.Jobs{IDs: []string{id}, Key: p.Key,
		MaxQueued: s.maxQueued(p.Tenant), Soft: s.softBounds(p.Tenant)})
}

// softBounds says tenant's bounds are the platform's defaults, not its
// class's (quota.Jobs.Soft): they do not make Redis a dependency.
func (s *Server) softBounds(tenant string) bool { return s.class(tenant).MaxQueued == 0 }

// maxQueued is tenant's bound on its jobs queued or running across models:
// its class's max_queued, else Config.TenantQueueBound.
func (s *Server) maxQueued(tenant string) int {
	if n := s.class(tenant).MaxQueued; n > 0 {
		return n
	}
	return s.cfg.TenantQueueBound
}

// acquireAsync takes one slot per job of an async batch, all or none. The
// slots outlive the submitting request: ReleaseEnded gives each back when
// its job's record ends, and a slot nobody saw end lives until the job's
// deadline and asyncLeaseGrace.
func (s *Server) acquireAsync(ctx context.Context, p auth.Principal, jobIDs []string) (func(quota.Usage), error) {
	return s.cfg.Quota.AcquireJobs(ctx, p.Tenant, quota.Jobs{
		IDs: jobIDs, Key: p.Key, MaxQueued: s.maxQueued(p.Tenant), LeaseTTL: s.cfg.RequestTimeout + asyncLeaseGrace,
		MaxRecords: s.cfg.AsyncRecordsPerTenant, RecordTTL: s.cfg.AsyncRecordTTL, Soft: s.softBounds(p.Tenant),
	})
}

// reserve reserves each admitted job's worst case, its prompt and
// max_tokens at the model's rates, against the tenant's daily budget and
// its API key's budgets (Limiter.Reserve): a budget is overspent by at most
// one job's worst case, whatever the number of requests at once.
func (s *Server) reserve(ctx context.Context, p auth.Principal, m *catalog.Model, ids []string, jobs []admitted) error {
	rates := price.Of(m.Prices)
	worst := make([]int64, len(jobs))
	for i, a := range jobs {
		worst[i] = price.Micro(rates, price.Usage{PromptTokens: a.tokens, CompletionTokens: a.maxTokens})
	}
	return s.cfg.Quota.Reserve(ctx, p.Tenant, p.Key, ids, worst)
}

// endWatcher follows job records to their end. queue.Client implements it.
type endWatcher interface {
	WatchEnded(ctx context.Context, fn func(*queue.AsyncResult)) error
}

var _ endWatcher = (*queue.Client)(nil)

// ReleaseEnded gives back the quota slot of every async job whose record
// reaches done or failed, until ctx ends; run it once per edge beside the
// HTTP server (every edge sees every record; giving a slot back twice does
// nothing). A watch that breaks is logged and started again after
// watchRetry; jobs that end meanwhile keep their slots until their leases
// expire. It returns at once when the queue cannot watch records.
func (s *Server) ReleaseEnded(ctx context.Context) {
	w, ok := s.cfg.Queue.(endWatcher)
	if !ok {
		return
	}
	release := func(rec *queue.AsyncResult) {
		if !s.isAsyncJob(rec.ID) {
			return // a synchronous job: its handler releases it
		}
		if err := s.cfg.Quota.ReleaseJobs(ctx, rec.Tenant, rec.ID); err != nil && ctx.Err() == nil {
			s.log.Warn("edge: releasing an ended async job's quota slot; it expires by itself", "job", rec.ID, "error", err)
		}
	}
	for {
		err := w.WatchEnded(ctx, release)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("edge: watching async jobs end; retrying", "error", err, "in", watchRetry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(watchRetry):
		}
	}
}

// watchRetry is how long ReleaseEnded waits before watching again.
const watchRetry = time.Second

// isAsyncJob reports whether id is a job id of an async batch
// ("<request id>-<i>", see jobID).
func (s *Server) isAsyncJob(id string) bool {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return false
	}
	n, ok := s.parseRequestID(id[:i])
	k, err := strconv.Atoi(id[i+1:])
	return ok && err == nil && k >= 0 && k < n
}
