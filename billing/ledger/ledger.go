package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/queue"
)

var (
	// ErrUnavailable: Redis could not be asked.
	ErrUnavailable = errors.New("ledger: store unavailable")
	// ErrInvalidTenant: a tenant id that does not belong in a key.
	ErrInvalidTenant = errors.New("ledger: invalid tenant")
	// ErrConfig: a Config field that cannot be used.
	ErrConfig = errors.New("ledger: invalid config")
)

// Defaults for zero Config fields.
const (
	DefaultHourTTL   = 35 * 24 * time.Hour
	DefaultDayTTL    = 400 * 24 * time.Hour
	DefaultSeenTTL   = 8 * 24 * time.Hour // past the usage stream's MaxAge (7 days)
	DefaultRecentMax = 1000
	DefaultTimeout   = 2 * time.Second
)

// Config configures a Ledger. Zero values take the defaults above.
type Config struct {
	HourTTL   time.Duration // how long hourly rollups live
	DayTTL    time.Duration // how long daily rollups live
	SeenTTL   time.Duration // how long a counted request id is remembered; must outlive redeliveries
	RecentMax int           // recent requests kept per tenant
	Timeout   time.Duration // bounds each Redis call
	Now       func() time.Time
}

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (c *Config) Validate() error {
	if c.HourTTL == 0 {
		c.HourTTL = DefaultHourTTL
	}
	if c.DayTTL == 0 {
		c.DayTTL = DefaultDayTTL
	}
	if c.SeenTTL == 0 {
		c.SeenTTL = DefaultSeenTTL
	}
	if c.RecentMax == 0 {
		c.RecentMax = DefaultRecentMax
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case c.HourTTL < time.Hour:
		return fmt.Errorf("%w: HourTTL %v is under an hour", ErrConfig, c.HourTTL)
	case c.DayTTL < 24*time.Hour:
		return fmt.Errorf("%w: DayTTL %v is under a day", ErrConfig, c.DayTTL)
	case c.SeenTTL < ChargeTTL:
		return fmt.Errorf("%w: SeenTTL %v is under %v", ErrConfig, c.SeenTTL, ChargeTTL)
	case c.RecentMax < 1:
		return fmt.Errorf("%w: RecentMax %d", ErrConfig, c.RecentMax)
	case c.Timeout < 0:
		return fmt.Errorf("%w: Timeout %v", ErrConfig, c.Timeout)
	}
	return nil
}

// Ledger records usage events and answers usage queries. It is safe for
// concurrent use.
type Ledger struct {
	rdb     redis.UniversalClient
	cfg     Config
	record  *redis.Script // recordLua
	alerts  *redis.Script // keyAlertsLua
	anomaly *redis.Script // keyAnomalyLua
}

// New validates cfg and returns a Ledger over rdb (not contacted here).
func New(rdb redis.UniversalClient, cfg Config) (*Ledger, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: a Redis client is required", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Ledger{rdb: rdb, cfg: cfg, record: redis.NewScript(recordLua), alerts: redis.NewScript(keyAlertsLua),
		anomaly: redis.NewScript(keyAnomalyLua)}, nil
}

// recordLua counts one usage event once.
//
// KEYS: 1 seen claim, 2 charged claim, 3 day neurons, 4 hour rollup,
// 5 day rollup, 6 recent requests, 7 the API key's day neurons, 8 its
// month neurons
// ARGV: 1 seen ttl ms, 2 charge ttl ms, 3 hour ttl ms, 4 day ttl ms,
// 5 micro-neurons, 6 recent score, 7 event JSON, 8 recent max, 9 month
// ttl ms, 10 "1" when the event has an API key, 11.. field, increment
// pairs for both rollups
// Reply: 1 counted, 0 already counted
const recordLua = `
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  return 0
end
for i = 11, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[4], ARGV[i], ARGV[i+1])
  redis.call('HINCRBY', KEYS[5], ARGV[i], ARGV[i+1])
end
redis.call('PEXPIRE', KEYS[4], ARGV[3])
redis.call('PEXPIRE', KEYS[5], ARGV[4])
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then
  redis.call('INCRBY', KEYS[3], ARGV[5])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  if ARGV[10] == '1' then
    redis.call('INCRBY', KEYS[7], ARGV[5])
    redis.call('PEXPIRE', KEYS[7], ARGV[2])
    redis.call('INCRBY', KEYS[8], ARGV[5])
    redis.call('PEXPIRE', KEYS[8], ARGV[9])
  end
end
redis.call('ZADD', KEYS[6], ARGV[6], ARGV[7])
redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -(tonumber(ARGV[8]) + 1))
return 1
`

// Record counts ev once: the first call for a request id adds it to the
// hour and day rollups of its end time (UTC), to the tenant's day total
// and its API key's day and month totals unless the quota charged it
// already, and to the recent requests; later
// calls for the same id change nothing and report false. ev must be valid
// (queue.UsageEvent.Validate).
func (l *Ledger) Record(ctx context.Context, ev *queue.UsageEvent) (counted bool, err error) {
	if err := ev.Validate(); err != nil {
		return false, err
	}
	if !queue.ValidTenant(ev.Tenant) {
		return false, fmt.Errorf("%w: %q", ErrInvalidTenant, ev.Tenant)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return false, err
	}
	t := ev.Time.UTC()
	keys := []string{
		seenKey(ev.Tenant, ev.RequestID), ChargedKey(ev.Tenant, ev.RequestID), DayNeuronsKey(ev.Tenant, t),
		hourKey(ev.Tenant, t), dayKey(ev.Tenant, t), recentKey(ev.Tenant),
		KeyDayNeuronsKey(ev.Tenant, ev.Key, t), KeyMonthNeuronsKey(ev.Tenant, ev.Key, t),
	}
	hasKey := "0"
	if ev.Key != "" {
		hasKey = "1"
	}
	args := []any{
		l.cfg.SeenTTL.Milliseconds(), ChargeTTL.Milliseconds(), l.cfg.HourTTL.Milliseconds(), l.cfg.DayTTL.Milliseconds(),
		ev.MicroNeurons, strconv.FormatInt(t.UnixMicro(), 10), b, l.cfg.RecentMax, KeyMonthTTL.Milliseconds(), hasKey,
	}
	for _, f := range increments(ev) {
		args = append(args, f.field, f.by)
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	n, err := l.record.Run(cctx, l.rdb, keys, args...).Int64()
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, fmt.Errorf("%w: recording %s: %v", ErrUnavailable, ev.RequestID, err)
	}
	return n == 1, nil
}

// Rollup hash fields are "<metric>|<model>": metric names hold no '|', so
// the model is everything after the first one.
const (
	mRequests   = "requests"
	mPrompt     = "prompt"
	mCached     = "cached"
	mCompletion = "completion"
	mMicro      = "micro"
	mOutcome    = "o."     // + outcome
	mTTFT       = "ttft."  // + bucket index
	mTotal      = "total." // + bucket index
)

// LatencyBounds are the upper bounds, in milliseconds, of the latency
// histogram buckets the rollups keep; a last bucket holds the rest.
var LatencyBounds = []int64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000}

func bucketOf(ms int64) int {
	for i, b := range LatencyBounds {
		if ms <= b {
			return i
		}
	}
	return len(LatencyBounds)
}

type increment struct {
	field string
	by    int64
}

func increments(ev *queue.UsageEvent) []increment {
	m := "|" + ev.Model
	outcome := queue.OutcomeError // an outcome this version does not know
	if slices.Contains(queue.Outcomes(), ev.Finish) {
		outcome = ev.Finish
	}
	inc := []increment{
		{mRequests + m, 1},
		{mPrompt + m, int64(ev.PromptTokens)},
		{mCached + m, int64(ev.CachedTokens)},
		{mCompletion + m, int64(ev.CompletionTokens)},
		{mMicro + m, ev.MicroNeurons},
		{mOutcome + outcome + m, 1},
		{mTotal + strconv.Itoa(bucketOf(ev.TotalMs)) + m, 1},
	}
	if ev.TTFTMs > 0 {
		inc = append(inc, increment{mTTFT + strconv.Itoa(bucketOf(ev.TTFTMs)) + m, 1})
	}
	// Spend by API key ("" for requests without one) and by metadata tag
	// ("name=value"): "<group>|<metric>|<name>" fields (groupMetrics).
	inc = append(inc, groupIncrements(groupKey, ev.Key, ev)...)
	for k, v := range ev.Metadata {
		inc = append(inc, groupIncrements(groupTag, k+"="+v, ev)...)
	}
	return inc
}

// Groups a rollup also tallies by: the request's API key, its metadata tags.
const (
	groupKey = "k"
	groupTag = "t"
)

// groupIncrements are one request's tallies under group name.
func groupIncrements(group, name string, ev *queue.UsageEvent) []increment {
	f := func(metric string) string { return group + "|" + metric + "|" + name }
	return []increment{
		{f(mRequests), 1},
		{f(mPrompt), int64(ev.PromptTokens)},
		{f(mCached), int64(ev.CachedTokens)},
		{f(mCompletion), int64(ev.CompletionTokens)},
		{f(mMicro), ev.MicroNeurons},
	}
}
