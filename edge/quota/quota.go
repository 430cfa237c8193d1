package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/queue"
)

var (
	// ErrRateLimited: the tenant used its requests for the last minute (429).
	ErrRateLimited = errors.New("quota: rate limited")
	// ErrConcurrency: the tenant has MaxConcurrent requests in flight (429).
	ErrConcurrency = errors.New("quota: too many concurrent requests")
	// ErrQueueBound: the tenant holds its class's Jobs.MaxQueued jobs
	// queued or running (429).
	ErrQueueBound = errors.New("quota: the tenant's queued jobs reached its class's bound")
	// ErrAsyncRecords: the tenant's async results kept in the results
	// store reached Jobs.MaxRecords (429).
	ErrAsyncRecords = errors.New("quota: the tenant's async results reached its bound")
	// ErrBudgetExhausted: the tenant used its daily neurons (429).
	ErrBudgetExhausted = errors.New("quota: daily neuron budget exhausted")
	// ErrUnavailable: Redis could not be asked and FailOpen is off (503).
	ErrUnavailable = errors.New("quota: quota store unavailable")
	// ErrInvalidTenant: the tenant id is empty or has characters that do not
	// belong in a key. Tenants come from verified tokens, so this is a bug.
	ErrInvalidTenant = errors.New("quota: invalid tenant")
	// ErrConfig reports limits that cannot run.
	ErrConfig = errors.New("quota: config")
)

// LimitError is a refusal with its retry hint. It unwraps to ErrRateLimited,
// ErrConcurrency, ErrQueueBound, ErrAsyncRecords or ErrBudgetExhausted.
type LimitError struct {
	Err        error         // one of the sentinels above
	Limit      float64       // the limit that was hit
	RetryAfter time.Duration // when a retry may succeed; 0 when unknown
	InUse      int           // what the limit counted already (requests or jobs); 0 for the budget
	Requested  int           // what the refused request asked for (its jobs)
	// Key is the API key whose own limit (its KeyPolicy) was hit; "" for
	// the tenant's. Period is the budget's: queue.PeriodDay or PeriodMonth.
	Key    string
	Period string
}

func (e *LimitError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%v (limit %v, retry after %v)", e.Err, e.Limit, e.RetryAfter.Round(time.Second))
	}
	return fmt.Sprintf("%v (limit %v)", e.Err, e.Limit)
}

func (e *LimitError) Unwrap() error { return e.Err }

// Usage is what a finished request consumed. RequestID, when set, makes
// the charge idempotent and shared with billing: the day total the budget is
// checked against is the ledger's (billing/ledger.DayNeuronsKey), and a
// request is added to it once, by whichever of this release and the
// ledger's count of its usage event comes first.
type Usage struct {
	Neurons   float64
	RequestID string
}

const (
	// DefaultLeaseTTL is how long a concurrency slot lives if it is never
	// released (an edge crashed). It must exceed the longest request.
	DefaultLeaseTTL = 15 * time.Minute
	// DefaultTimeout bounds each Redis round trip.
	DefaultTimeout = 2 * time.Second
	// QueueRetryAfter is the retry hint of ErrQueueBound: jobs end within
	// seconds as a rule, so a slot is likely free again by then.
	QueueRetryAfter = time.Second
	// MaxJobsPerCall bounds Jobs.IDs (an async batch is far smaller).
	MaxJobsPerCall = 1024
	// KeyPrefix starts every key this package writes.
	KeyPrefix = "bulkhead:quota:"

	rateWindow = time.Minute
	// dayGrace keeps a day's neuron key a little after midnight, so a request
	// admitted just before midnight can still add to it and it can be read.
	dayGrace = time.Hour
)

// Config sets the per-tenant limits. A zero limit means unlimited.
type Config struct {
	RequestsPerMinute int     // requests admitted in any sliding 60 s window
	MaxConcurrent     int     // requests in flight
	DailyNeurons      float64 // neurons per UTC day; checked at admission, charged at release
	// FailOpen admits requests (and logs) when Redis cannot be reached;
	// false (the default) refuses them with ErrUnavailable.
	FailOpen bool
	// LeaseTTL is how long an unreleased concurrency slot lives: 0 means
	// DefaultLeaseTTL. Keep it above the edge's request timeout.
	LeaseTTL time.Duration
	// Timeout bounds each Redis call: 0 means DefaultTimeout.
	Timeout time.Duration
	// Now is the clock (tests inject one); nil means time.Now.
	Now func() time.Time
}

// Validate reports the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.RequestsPerMinute < 0:
		return fmt.Errorf("%w: RequestsPerMinute %d is negative", ErrConfig, c.RequestsPerMinute)
	case c.MaxConcurrent < 0:
		return fmt.Errorf("%w: MaxConcurrent %d is negative", ErrConfig, c.MaxConcurrent)
	case c.DailyNeurons < 0 || math.IsNaN(c.DailyNeurons) || math.IsInf(c.DailyNeurons, 0):
		return fmt.Errorf("%w: DailyNeurons %v is negative or not finite", ErrConfig, c.DailyNeurons)
	case c.LeaseTTL < 0:
		return fmt.Errorf("%w: LeaseTTL %v is negative", ErrConfig, c.LeaseTTL)
	case c.LeaseTTL > 0 && c.LeaseTTL < time.Second:
		return fmt.Errorf("%w: LeaseTTL %v is under a second", ErrConfig, c.LeaseTTL)
	case c.Timeout < 0:
		return fmt.Errorf("%w: Timeout %v is negative", ErrConfig, c.Timeout)
	}
	return nil
}

// Quota checks and records per-tenant limits. It is safe for concurrent use.
type Quota struct {
	rdb        redis.UniversalClient
	cfg        Config
	now        func() time.Time
	log        *slog.Logger
	leaseTTL   time.Duration
	timeout    time.Duration
	acquireScr *redis.Script // acquireLua
	releaseScr *redis.Script // releaseLua
	jobsScr    *redis.Script // releaseJobsLua
	reserveScr *redis.Script // reserveLua
}

// New validates cfg and returns a Quota over rdb (not contacted here). log
// receives fail-open and release errors; nil discards them.
func New(log *slog.Logger, rdb redis.UniversalClient, cfg Config) (*Quota, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rdb == nil && cfg.limited() {
		return nil, errors.New("quota: a Redis client is required when any limit is set")
	}
	q := &Quota{rdb: rdb, cfg: cfg, now: cfg.Now, log: log, leaseTTL: cfg.LeaseTTL, timeout: cfg.Timeout,
		acquireScr: redis.NewScript(acquireLua), releaseScr: redis.NewScript(releaseLua),
		jobsScr: redis.NewScript(releaseJobsLua), reserveScr: redis.NewScript(reserveLua)}
	if q.now == nil {
		q.now = time.Now
	}
	if q.log == nil {
		q.log = slog.New(slog.DiscardHandler)
	}
	if q.leaseTTL == 0 {
		q.leaseTTL = DefaultLeaseTTL
	}
	if q.timeout == 0 {
		q.timeout = DefaultTimeout
	}
	return q, nil
}

func (c *Config) limited() bool {
	return c.RequestsPerMinute > 0 || c.MaxConcurrent > 0 || c.DailyNeurons > 0
}

// keys for a tenant; the {tenant} hash tag keeps them in one cluster slot so
// one script may touch them all.
func rateKey(tenant string) string  { return KeyPrefix + "{" + tenant + "}:rpm" }
func leaseKey(tenant string) string { return KeyPrefix + "{" + tenant + "}:inflight" }

// recordsKey holds tenant's async records still kept in the results store,
// each scored by when it expires.
func recordsKey(tenant string) string { return KeyPrefix + "{" + tenant + "}:records" }

// reservedKey holds tenant's jobs' budget reservations (Reserve).
func reservedKey(tenant string) string { return KeyPrefix + "{" + tenant + "}:reserved" }

// An API key's rate window and lease set, and the hash naming each job's
// key lease set (so a job ended by id gives its key's lease back).
func keyRateKey(tenant, key string) string { return KeyPrefix + "{" + tenant + "}:key:" + key + ":rpm" }
func keyLeaseKey(tenant, key string) string {
	return KeyPrefix + "{" + tenant + "}:key:" + key + ":inflight"
}
func leaseKeysKey(tenant string) string { return KeyPrefix + "{" + tenant + "}:leasekeys" }

// flag is a script's "1"/"0" argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// neuronKey is the ledger's day total, in micro-neurons: what the
// dashboard shows is what the budget enforces.
func neuronKey(tenant string, day time.Time) string { return ledger.DayNeuronsKey(tenant, day) }

// Acquire admits one request of tenant or refuses it: AcquireJobs for one
// job under a fresh lease id, with no queue bound.
func (q *Quota) Acquire(ctx context.Context, tenant string) (release func(Usage), err error) {
	id, err := newID()
	if err != nil {
		return nil, fmt.Errorf("quota: request id: %w", err)
	}
	return q.AcquireJobs(ctx, tenant, Jobs{IDs: []string{id}})
}

// Jobs is what one request queues, for AcquireJobs.
type Jobs struct {
	// IDs name the request's jobs, one lease each: a synchronous request's
	// one job, or every job of an async batch. Each counts as one request
	// in the rate window and one slot of the concurrency limit and of
	// MaxQueued while its lease lives. Unique, non-empty, at most
	// MaxJobsPerCall.
	IDs []string
	// LeaseTTL is how long the leases live unreleased: 0 means
	// Config.LeaseTTL. An async job's lease is released by ReleaseJobs
	// when its record says it ended; the TTL (its deadline and a margin)
	// frees it if nobody saw it end.
	LeaseTTL time.Duration
	// MaxQueued is the tenant class's bound on its leases (jobs queued or
	// running); 0: none. Counted only when a Redis client is configured.
	MaxQueued int
	// MaxRecords bounds the tenant's async results kept in the results
	// store: each job takes an entry that lives RecordTTL (the store's
	// TTL); 0: none. A release (the batch was not queued) removes the
	// entries again. Counted only when a Redis client is configured.
	MaxRecords int
	RecordTTL  time.Duration
	// Key is the API key the request was made with (the token's "key"
	// claim, queue.ValidKey), or "": with one, the key's own policy
	// (billing/ledger.KeyPolicy) is checked too.
	Key string
	// Soft says MaxQueued and MaxRecords are the platform's default bounds
	// rather than limits someone configured for the tenant: when Redis
	// cannot be asked and no Config limit is set either, the request is
	// admitted (logged), as an edge without quotas always was; the jobs
	// stream's per-model bound still holds.
	Soft bool
}

func (j *Jobs) validate() error {
	switch {
	case len(j.IDs) == 0 || len(j.IDs) > MaxJobsPerCall:
		return fmt.Errorf("quota: %d job ids, want 1 to %d", len(j.IDs), MaxJobsPerCall)
	case j.LeaseTTL < 0 || j.MaxQueued < 0 || j.MaxRecords < 0:
		return fmt.Errorf("quota: negative LeaseTTL %v, MaxQueued %d or MaxRecords %d", j.LeaseTTL, j.MaxQueued, j.MaxRecords)
	case j.MaxRecords > 0 && j.RecordTTL < time.Millisecond:
		return fmt.Errorf("quota: MaxRecords %d needs a RecordTTL, not %v", j.MaxRecords, j.RecordTTL)
	case j.Key != "" && !queue.ValidKey(j.Key):
		return fmt.Errorf("quota: API key %q", j.Key)
	}
	seen := make(map[string]bool, len(j.IDs))
	for _, id := range j.IDs {
		if id == "" || seen[id] {
			return fmt.Errorf("quota: job id %q empty or repeated", id)
		}
		seen[id] = true
	}
	return nil
}

// AcquireJobs admits a request of tenant queueing len(jobs.IDs) jobs, all of
// them or none: every limit is checked for all of them at once and, only if
// all pass, each job takes a rate-window entry and a lease. On success the
// caller must call release exactly once (later calls do nothing), passing
// what the request consumed; it gives back every lease that ReleaseJobs did
// not give back already. Refusals are *LimitError (wrapping ErrRateLimited,
// ErrConcurrency, ErrQueueBound or ErrBudgetExhausted), ErrUnavailable when
// Redis cannot be asked and FailOpen is off, or ctx's error.
func (q *Quota) AcquireJobs(ctx context.Context, tenant string, jobs Jobs) (release func(Usage), err error) {
	if !queue.ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	if err := jobs.validate(); err != nil {
		return nil, err
	}
	maxq, maxr := jobs.MaxQueued, jobs.MaxRecords
	if q.rdb == nil {
		maxq, maxr = 0, 0 // no store to count in: the stream's per-tenant bound applies alone
	}
	if !q.cfg.limited() && maxq == 0 && maxr == 0 && (jobs.Key == "" || q.rdb == nil) {
		return func(Usage) {}, nil
	}
	ttl := jobs.LeaseTTL
	if ttl == 0 {
		ttl = q.leaseTTL
	}
	now := q.now()
	day := now.UTC()
	key := jobs.Key
	keys := []string{rateKey(tenant), leaseKey(tenant), neuronKey(tenant, day), recordsKey(tenant), reservedKey(tenant),
		keyRateKey(tenant, key), keyLeaseKey(tenant, key), ledger.KeyPolicyKey(tenant, key),
		ledger.KeyDayNeuronsKey(tenant, key, day), ledger.KeyMonthNeuronsKey(tenant, key, day), leaseKeysKey(tenant)}
	args := []any{
		now.UnixMilli(),
		q.cfg.RequestsPerMinute, rateWindow.Milliseconds(),
		q.cfg.MaxConcurrent, ttl.Milliseconds(),
		price.ToMicro(q.cfg.DailyNeurons),
		maxq, maxr, jobs.RecordTTL.Milliseconds(),
		time.Now().Add(q.timeout + clockSkew).UnixMilli(), // the real clock, as Redis's TIME
		flag(key != ""),
	}
	for _, id := range jobs.IDs {
		args = append(args, id)
	}
	cctx, cancel := context.WithTimeout(ctx, q.timeout)
	res, err := q.acquireScr.Run(cctx, q.rdb, keys, args...).Int64Slice()
	cancel()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if q.cfg.FailOpen || jobs.Soft && !q.cfg.limited() {
			q.log.Warn("quota: Redis unavailable, admitting request (fail open)", "tenant", tenant, "err", err)
			return q.releaser(tenant, "", nil, false, day), nil
		}
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return q.verdict(res, tenant, jobs, maxq, maxr, day)
}

// verdict turns the acquire script's reply into a release func or a
// refusal.
func (q *Quota) verdict(res []int64, tenant string, jobs Jobs, maxq, maxr int, day time.Time) (func(Usage), error) {
	n, inUse := len(jobs.IDs), int(res[2])
	switch res[0] {
	case resOK:
		var leases []string // taken only under a concurrency limit, a queue bound, a records bound, a budget or a key
		if q.cfg.MaxConcurrent > 0 || maxq > 0 || maxr > 0 || q.cfg.DailyNeurons > 0 || jobs.Key != "" {
			leases = jobs.IDs
		}
		return q.releaser(tenant, jobs.Key, leases, maxr > 0, day), nil
	case resKeyDayBudget, resKeyMonthBudget:
		period, retry := queue.PeriodDay, untilMidnight(day)
		if res[0] == resKeyMonthBudget {
			period, retry = queue.PeriodMonth, untilMonthEnd(day)
		}
		return nil, &LimitError{Err: ErrBudgetExhausted, RetryAfter: retry, Requested: n, Key: jobs.Key, Period: period}
	case resKeyConcurrency:
		return nil, &LimitError{Err: ErrConcurrency, InUse: inUse, Requested: n, Key: jobs.Key}
	case resKeyRate:
		retry := max(time.Duration(res[1])*time.Millisecond, time.Millisecond)
		if res[1] < 0 {
			retry = 0
		}
		return nil, &LimitError{Err: ErrRateLimited, RetryAfter: retry, InUse: inUse, Requested: n, Key: jobs.Key}
	case resLate:
		return nil, fmt.Errorf("%w: the quota script ran after its deadline", ErrUnavailable)
	case resRecords:
		retry := max(time.Duration(res[1])*time.Millisecond, time.Millisecond)
		if res[1] < 0 {
			retry = 0 // more jobs than the bound: no wait helps
		}
		return nil, &LimitError{Err: ErrAsyncRecords, Limit: float64(maxr), RetryAfter: retry, InUse: inUse, Requested: n}
	case resBudget:
		return nil, &LimitError{Err: ErrBudgetExhausted, Limit: q.cfg.DailyNeurons, RetryAfter: untilMidnight(day), Requested: n, Period: queue.PeriodDay}
	case resConcurrency:
		return nil, &LimitError{Err: ErrConcurrency, Limit: float64(q.cfg.MaxConcurrent), InUse: inUse, Requested: n}
	case resQueued:
		return nil, &LimitError{Err: ErrQueueBound, Limit: float64(jobs.MaxQueued), RetryAfter: QueueRetryAfter, InUse: inUse, Requested: n}
	case resRate:
		retry := max(time.Duration(res[1])*time.Millisecond, time.Millisecond)
		if res[1] < 0 {
			retry = 0 // more jobs than the limit: no wait helps
		}
		return nil, &LimitError{Err: ErrRateLimited, Limit: float64(q.cfg.RequestsPerMinute),
			RetryAfter: retry, InUse: inUse, Requested: n}
	default:
		return nil, fmt.Errorf("%w: unexpected script result %d", ErrUnavailable, res[0])
	}
}

// Reserve reserves against tenant's daily budget, and the hard budgets of
// its API key (key; "" for none), the worst case of each job of an
// admitted request (ids as given to AcquireJobs; worst in micro-neurons:
// its prompt and max_tokens at the model's rates), atomically with the
// check: ErrBudgetExhausted (a *LimitError) when the neurons charged and
// reserved already, plus the worst cases of all the jobs but the costliest,
// reach a budget. So concurrent requests and batches overspend each by at
// most one job's worst case. A reservation is given back with its job's
// lease (the release func, ReleaseJobs, or the lease's expiry), and the
// job's real cost is charged as before. Without a budget or a Redis client
// it does nothing.
func (q *Quota) Reserve(ctx context.Context, tenant, key string, ids []string, worst []int64) error {
	if !queue.ValidTenant(tenant) {
		return fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	if len(ids) != len(worst) || len(ids) > MaxJobsPerCall || key != "" && !queue.ValidKey(key) {
		return fmt.Errorf("quota: %d job ids and %d worst cases, key %q", len(ids), len(worst), key)
	}
	if q.rdb == nil || q.cfg.DailyNeurons == 0 && key == "" || len(ids) == 0 {
		return nil
	}
	day := q.now().UTC()
	args := []any{price.ToMicro(q.cfg.DailyNeurons), (untilMidnight(day) + dayGrace).Milliseconds(), reservedTTL.Milliseconds(),
		flag(key != ""), ledger.KeyMonthTTL.Milliseconds()}
	for i, id := range ids {
		if worst[i] < 0 {
			return fmt.Errorf("quota: negative worst case %d for %s", worst[i], id)
		}
		args = append(args, id, worst[i])
	}
	cctx, cancel := context.WithTimeout(ctx, q.timeout)
	keys := []string{neuronKey(tenant, day), reservedKey(tenant), ledger.KeyPolicyKey(tenant, key),
		ledger.KeyDayNeuronsKey(tenant, key, day), ledger.KeyMonthNeuronsKey(tenant, key, day)}
	res, err := q.reserveScr.Run(cctx, q.rdb, keys, args...).Int64Slice()
	cancel()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil && q.cfg.FailOpen:
		q.log.Warn("quota: Redis unavailable, admitting request without a budget reservation (fail open)", "tenant", tenant, "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	case res[0] == 1:
		return &LimitError{Err: ErrBudgetExhausted, Limit: q.cfg.DailyNeurons, RetryAfter: untilMidnight(day), Requested: len(ids), Period: queue.PeriodDay}
	case res[0] == 2:
		return &LimitError{Err: ErrBudgetExhausted, RetryAfter: untilMidnight(day), Requested: len(ids), Key: key, Period: queue.PeriodDay}
	case res[0] != resOK:
		return &LimitError{Err: ErrBudgetExhausted, RetryAfter: untilMonthEnd(day), Requested: len(ids), Key: key, Period: queue.PeriodMonth}
	}
	return nil
}

// reservedTTL bounds how long the reservations hash outlives its last
// write: a reservation is never older than a job's deadline.
const reservedTTL = 48 * time.Hour

// ReleaseJobs gives back the leases of tenant's jobs ids (an async job that
// ended), charging nothing: billing counts its usage event. Ids without a
// lease are skipped, so every edge may release every ended job.
func (q *Quota) ReleaseJobs(ctx context.Context, tenant string, ids ...string) error {
	if !queue.ValidTenant(tenant) {
		return fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	if q.rdb == nil || len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	cctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	if err := q.jobsScr.Run(cctx, q.rdb, []string{leaseKey(tenant), reservedKey(tenant), leaseKeysKey(tenant)}, members...).Err(); err != nil {
		return fmt.Errorf("%w: releasing %d job(s) of %s: %v", ErrUnavailable, len(ids), tenant, err)
	}
	return nil
}

// releaser returns the release func of one admitted request, which gives
// back the leases ids (nil: it took none), and their record entries when
// records is set, and charges the neurons to the UTC day (and, with an API
// key, month) the request was admitted on.
func (q *Quota) releaser(tenant, key string, ids []string, records bool, day time.Time) func(Usage) {
	var once sync.Once
	return func(u Usage) {
		once.Do(func() { q.release(tenant, key, ids, records, day, u) })
	}
}

func (q *Quota) release(tenant, key string, ids []string, records bool, day time.Time, u Usage) {
	n := u.Neurons
	if n < 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		q.log.Error("quota: release with invalid neurons, charging none", "tenant", tenant, "neurons", n)
		n = 0
	}
	counted := q.cfg.DailyNeurons > 0 || key != "" // a budget may read the charge
	if len(ids) == 0 && (!counted || n == 0) {
		return // nothing to give back or charge
	}
	ttl := untilMidnight(day) + dayGrace
	if !counted {
		n = 0 // unlimited: no need to count
	}
	ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
	defer cancel()
	claim, take := leaseKey(tenant), "0" // no request id: an unclaimed charge (KEYS[3] unused)
	if u.RequestID != "" {
		claim, take = ledger.ChargedKey(tenant, u.RequestID), "1"
	}
	dropRecords := "0"
	if records {
		dropRecords = "1"
	}
	keys := []string{leaseKey(tenant), neuronKey(tenant, day), claim, recordsKey(tenant), reservedKey(tenant),
		leaseKeysKey(tenant), ledger.KeyDayNeuronsKey(tenant, key, day), ledger.KeyMonthNeuronsKey(tenant, key, day)}
	args := []any{price.ToMicro(n), ttl.Milliseconds(), take, ledger.ChargeTTL.Milliseconds(), dropRecords,
		flag(key != ""), ledger.KeyMonthTTL.Milliseconds()}
	for _, id := range ids {
		args = append(args, id)
	}
	if err := q.releaseScr.Run(ctx, q.rdb, keys, args...).Err(); err != nil {
		// The lease expires by itself after its TTL; the neurons are lost to
		// the quota (billing counts them from usage events, not from here).
		q.log.Error("quota: release failed", "tenant", tenant, "neurons", n, "err", err)
	}
}

// Used returns the neurons tenant has been charged on the UTC day of t.
func (q *Quota) Used(ctx context.Context, tenant string, t time.Time) (float64, error) {
	if !queue.ValidTenant(tenant) {
		return 0, fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	if q.rdb == nil {
		return 0, nil
	}
	cctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	micro, err := q.rdb.Get(cctx, neuronKey(tenant, t)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return price.Neurons(micro), nil
}

// untilMonthEnd is the time from t to the first of the next month, 00:00
// UTC.
func untilMonthEnd(t time.Time) time.Duration {
	t = t.UTC()
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC).Sub(t)
}

// untilMidnight is the time from t to the next 00:00 UTC (never zero).
func untilMidnight(t time.Time) time.Duration {
	t = t.UTC()
	next := time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
	return next.Sub(t)
}

func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
