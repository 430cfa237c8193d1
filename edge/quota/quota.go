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
)

var (
	// ErrRateLimited: the tenant used its requests for the last minute (429).
	ErrRateLimited = errors.New("quota: rate limited")
	// ErrConcurrency: the tenant has MaxConcurrent requests in flight (429).
	ErrConcurrency = errors.New("quota: too many concurrent requests")
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
// ErrConcurrency or ErrBudgetExhausted.
type LimitError struct {
	Err        error         // one of the sentinels above
	Limit      float64       // the limit that was hit
	RetryAfter time.Duration // when a retry may succeed; 0 when unknown
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
		acquireScr: redis.NewScript(acquireLua), releaseScr: redis.NewScript(releaseLua)}
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

// neuronKey is the ledger's day total, in micro-neurons: what the
// dashboard shows is what the budget enforces.
func neuronKey(tenant string, day time.Time) string { return ledger.DayNeuronsKey(tenant, day) }

// Script results (first element of the reply).
const (
	resOK = iota
	resBudget
	resConcurrency
	resRate
)

// acquireScript checks every configured limit and, only if all pass, records
// the request in the rate window and takes a concurrency lease.
//
// KEYS: 1 rate zset, 2 lease zset, 3 neurons of the day
// ARGV: 1 now ms, 2 rpm (0 = off), 3 window ms, 4 max concurrent (0 = off),
// 5 lease ttl ms, 6 daily budget (0 = off), 7 request id
// Reply: {code, retry-after ms (rate limit only)}
const acquireLua = `
local now = tonumber(ARGV[1])
local rpm = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local maxc = tonumber(ARGV[4])
local lease = tonumber(ARGV[5])
local budget = tonumber(ARGV[6])
local id = ARGV[7]
if budget > 0 then
  local used = tonumber(redis.call('GET', KEYS[3]) or '0')
  if used >= budget then return {1, 0} end
end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= maxc then
    return {2, 0}
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  if redis.call('ZCARD', KEYS[1]) >= rpm then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {3, tonumber(first[2]) + window - now}
  end
  redis.call('ZADD', KEYS[1], now, id)
  redis.call('PEXPIRE', KEYS[1], window)
end
if maxc > 0 then
  redis.call('ZADD', KEYS[2], now + lease, id)
  redis.call('PEXPIRE', KEYS[2], lease)
end
return {0, 0}
`

// releaseScript gives back a lease and charges the micro-neurons used,
// once per request id when one is given (the claim billing/ledger shares).
//
// KEYS: 1 lease zset, 2 neurons of the admission day, 3 charge claim
// ARGV: 1 lease id, 2 micro-neurons (>= 0), 3 ttl ms of the neuron key,
// 4 "1" when KEYS[3] is a claim to take, 5 ttl ms of the claim
const releaseLua = `
redis.call('ZREM', KEYS[1], ARGV[1])
local n = tonumber(ARGV[2])
if n > 0 then
  if ARGV[4] == '1' and not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[5]) then
    return 0
  end
  redis.call('INCRBY', KEYS[2], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 0
`

// Acquire admits one request of tenant or refuses it. On success the caller
// must call release exactly once when the request ends (later calls do
// nothing), passing what it consumed. Refusals are *LimitError (wrapping
// ErrRateLimited, ErrConcurrency or ErrBudgetExhausted), ErrUnavailable
// when Redis cannot be asked and FailOpen is off, or ctx's error.
func (q *Quota) Acquire(ctx context.Context, tenant string) (release func(Usage), err error) {
	if !validTenant(tenant) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	if !q.cfg.limited() {
		return func(Usage) {}, nil
	}
	now := q.now()
	id, err := newID()
	if err != nil {
		return nil, fmt.Errorf("quota: request id: %w", err)
	}
	day := now.UTC()
	keys := []string{rateKey(tenant), leaseKey(tenant), neuronKey(tenant, day)}
	args := []any{
		now.UnixMilli(),
		q.cfg.RequestsPerMinute, rateWindow.Milliseconds(),
		q.cfg.MaxConcurrent, q.leaseTTL.Milliseconds(),
		price.ToMicro(q.cfg.DailyNeurons),
		id,
	}
	cctx, cancel := context.WithTimeout(ctx, q.timeout)
	res, err := q.acquireScr.Run(cctx, q.rdb, keys, args...).Int64Slice()
	cancel()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if q.cfg.FailOpen {
			q.log.Warn("quota: Redis unavailable, admitting request (fail open)", "tenant", tenant, "err", err)
			return q.releaser(tenant, id, day), nil
		}
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	retry := time.Duration(res[1]) * time.Millisecond
	switch res[0] {
	case resOK:
		return q.releaser(tenant, id, day), nil
	case resBudget:
		return nil, &LimitError{Err: ErrBudgetExhausted, Limit: q.cfg.DailyNeurons, RetryAfter: untilMidnight(day)}
	case resConcurrency:
		return nil, &LimitError{Err: ErrConcurrency, Limit: float64(q.cfg.MaxConcurrent), RetryAfter: 0}
	case resRate:
		return nil, &LimitError{Err: ErrRateLimited, Limit: float64(q.cfg.RequestsPerMinute), RetryAfter: max(retry, time.Millisecond)}
	default:
		return nil, fmt.Errorf("%w: unexpected script result %d", ErrUnavailable, res[0])
	}
}

// releaser returns the release func of one admitted request. The neurons
// are charged to the UTC day the request was admitted on.
func (q *Quota) releaser(tenant, id string, day time.Time) func(Usage) {
	var once sync.Once
	return func(u Usage) {
		once.Do(func() { q.release(tenant, id, day, u) })
	}
}

func (q *Quota) release(tenant, id string, day time.Time, u Usage) {
	n := u.Neurons
	if n < 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		q.log.Error("quota: release with invalid neurons, charging none", "tenant", tenant, "neurons", n)
		n = 0
	}
	if q.cfg.MaxConcurrent == 0 && (q.cfg.DailyNeurons == 0 || n == 0) {
		return // nothing to give back or charge
	}
	ttl := untilMidnight(day) + dayGrace
	if q.cfg.DailyNeurons == 0 {
		n = 0 // unlimited: no need to count
	}
	ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
	defer cancel()
	claim, take := leaseKey(tenant), "0" // no request id: an unclaimed charge (KEYS[3] unused)
	if u.RequestID != "" {
		claim, take = ledger.ChargedKey(tenant, u.RequestID), "1"
	}
	keys := []string{leaseKey(tenant), neuronKey(tenant, day), claim}
	err := q.releaseScr.Run(ctx, q.rdb, keys, id, price.ToMicro(n), ttl.Milliseconds(), take, ledger.ChargeTTL.Milliseconds()).Err()
	if err != nil {
		// The lease expires by itself after LeaseTTL; the neurons are lost to
		// the quota (billing counts them from usage events, not from here).
		q.log.Error("quota: release failed", "tenant", tenant, "neurons", n, "err", err)
	}
}

// Used returns the neurons tenant has been charged on the UTC day of t.
func (q *Quota) Used(ctx context.Context, tenant string, t time.Time) (float64, error) {
	if !validTenant(tenant) {
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

// validTenant: 1-64 ASCII letters, digits, '-' or '_' (the auth package's
// rule for the sub claim), so a tenant can never break out of its hash tag.
func validTenant(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
