package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// ErrPolicy: a KeyPolicy that cannot be stored (a bad field, or too many
// keys).
var ErrPolicy = errors.New("ledger: invalid key policy")

// MaxKeyPolicies bounds the API keys of one tenant that have a policy.
const MaxKeyPolicies = 1000

// MaxAlerts is how many of a tenant's most recent budget alerts are kept.
const MaxAlerts = 100

// KeyPolicy is what one API key of a tenant (the token's "key" claim) may
// use, on top of the tenant's own limits. A zero field is no limit.
type KeyPolicy struct {
	RequestsPerMinute int     `json:"requests_per_minute,omitempty"`
	MaxConcurrent     int     `json:"max_concurrent,omitempty"`
	DailyNeurons      float64 `json:"daily_neurons,omitempty"`   // per UTC day
	MonthlyNeurons    float64 `json:"monthly_neurons,omitempty"` // per UTC month
	// Soft budgets only alert; hard ones (the default) refuse the key's
	// requests (3036) once its spend reaches them.
	Soft bool `json:"soft,omitempty"`
	// Webhook, when set, receives the key's budget alerts (at
	// queue.AlertThresholds of each budget) and cost anomalies, signed
	// like async notices; EventSubject, when set, is the tenant's event
	// subject on the bus they are also sent to (queue/events.go).
	Webhook      *queue.Webhook `json:"webhook,omitempty"`
	EventSubject string         `json:"event_subject,omitempty"`
}

// Delivery is where a key's alerts and anomalies go.
type Delivery struct {
	Webhook *queue.Webhook
	Subject string
}

// Any says the delivery names a destination.
func (d Delivery) Any() bool { return d.Webhook != nil || d.Subject != "" }

// delivery is p's Delivery.
func (p *KeyPolicy) delivery() Delivery { return Delivery{Webhook: p.Webhook, Subject: p.EventSubject} }

// Bounds of a KeyPolicy's fields.
const (
	MaxPolicyRPM         = 1_000_000
	MaxPolicyConcurrency = 100_000
	MaxPolicyNeurons     = 1e12
)

// Validate reports the first bad field, wrapping ErrPolicy.
func (p *KeyPolicy) Validate() error {
	neurons := func(v float64) bool { return v >= 0 && v <= MaxPolicyNeurons && !math.IsNaN(v) }
	switch {
	case p.RequestsPerMinute < 0 || p.RequestsPerMinute > MaxPolicyRPM:
		return fmt.Errorf("%w: requests_per_minute %d, want 0 to %d", ErrPolicy, p.RequestsPerMinute, MaxPolicyRPM)
	case p.MaxConcurrent < 0 || p.MaxConcurrent > MaxPolicyConcurrency:
		return fmt.Errorf("%w: max_concurrent %d, want 0 to %d", ErrPolicy, p.MaxConcurrent, MaxPolicyConcurrency)
	case !neurons(p.DailyNeurons):
		return fmt.Errorf("%w: daily_neurons %v, want 0 to %g", ErrPolicy, p.DailyNeurons, float64(MaxPolicyNeurons))
	case !neurons(p.MonthlyNeurons):
		return fmt.Errorf("%w: monthly_neurons %v, want 0 to %g", ErrPolicy, p.MonthlyNeurons, float64(MaxPolicyNeurons))
	}
	if p.Webhook != nil {
		if err := p.Webhook.Validate(); err != nil {
			return fmt.Errorf("%w: webhook: %w", ErrPolicy, err)
		}
	}
	if p.EventSubject != "" && !queue.ValidEventSubject(p.EventSubject) {
		return fmt.Errorf("%w: event_subject %.140q", ErrPolicy, p.EventSubject)
	}
	return nil
}

// KeyState is one key's policy and spend, as the usage API shows it.
type KeyState struct {
	Key    string    `json:"key"`
	Policy KeyPolicy `json:"policy"`
	// Spend in the current UTC day and month, in micro-neurons.
	DayMicro   int64 `json:"day_micro_neurons"`
	MonthMicro int64 `json:"month_micro_neurons"`
}

func (l *Ledger) call(ctx context.Context, what string, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	if err := f(cctx); err != nil && !errors.Is(err, redis.Nil) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
	}
	return nil
}

func checkKey(tenant, key string) error {
	switch {
	case !queue.ValidTenant(tenant):
		return fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	case !queue.ValidKey(key):
		return fmt.Errorf("%w: key %q: want 1 to %d letters, digits, '-' or '_'", ErrPolicy, key, queue.MaxKeyLen)
	}
	return nil
}

// SetKeyPolicy stores p as tenant's key's policy, replacing any other; the
// edges apply it to the key's next request.
func (l *Ledger) SetKeyPolicy(ctx context.Context, tenant, key string, p KeyPolicy) error {
	if err := checkKey(tenant, key); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	var n int64
	err := l.call(ctx, "counting key policies", func(ctx context.Context) error {
		known, err := l.rdb.SIsMember(ctx, keyPoliciesKey(tenant), key).Result()
		if err == nil && !known {
			n, err = l.rdb.SCard(ctx, keyPoliciesKey(tenant)).Result()
		}
		return err
	})
	if err != nil {
		return err
	}
	if n >= MaxKeyPolicies {
		return fmt.Errorf("%w: the tenant has %d key policies, the most there may be", ErrPolicy, n)
	}
	hook := ""
	if p.Webhook != nil {
		b, err := json.Marshal(p.Webhook)
		if err != nil {
			return err
		}
		hook = string(b)
	}
	soft := "0"
	if p.Soft {
		soft = "1"
	}
	return l.call(ctx, "storing a key policy", func(ctx context.Context) error {
		_, err := l.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
			k := KeyPolicyKey(tenant, key)
			tx.Del(ctx, k)
			tx.HSet(ctx, k, "rpm", p.RequestsPerMinute, "concurrency", p.MaxConcurrent,
				"daily", price.ToMicro(p.DailyNeurons), "monthly", price.ToMicro(p.MonthlyNeurons),
				"soft", soft, "webhook", hook, "subject", p.EventSubject)
			tx.SAdd(ctx, keyPoliciesKey(tenant), key)
			return nil
		})
		return err
	})
}

// DeleteKeyPolicy removes tenant's key's policy (the key is then limited by
// the tenant's limits only). Removing one that does not exist is no error.
func (l *Ledger) DeleteKeyPolicy(ctx context.Context, tenant, key string) error {
	if err := checkKey(tenant, key); err != nil {
		return err
	}
	return l.call(ctx, "deleting a key policy", func(ctx context.Context) error {
		_, err := l.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
			tx.Del(ctx, KeyPolicyKey(tenant, key))
			tx.SRem(ctx, keyPoliciesKey(tenant), key)
			return nil
		})
		return err
	})
}

// policyOf reads a KeyPolicyKey hash; ok is false when it is empty.
func policyOf(h map[string]string) (p KeyPolicy, ok bool) {
	if len(h) == 0 {
		return p, false
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(h[f], 10, 64); return n }
	p.RequestsPerMinute = int(num("rpm"))
	p.MaxConcurrent = int(num("concurrency"))
	p.DailyNeurons = price.Neurons(num("daily"))
	p.MonthlyNeurons = price.Neurons(num("monthly"))
	p.Soft = h["soft"] == "1"
	p.EventSubject = h["subject"]
	if w := h["webhook"]; w != "" {
		var hook queue.Webhook
		if json.Unmarshal([]byte(w), &hook) == nil {
			p.Webhook = &hook
		}
	}
	return p, true
}

// KeyPolicy returns tenant's key's policy; ok is false when it has none.
func (l *Ledger) KeyPolicy(ctx context.Context, tenant, key string) (p KeyPolicy, ok bool, err error) {
	if err := checkKey(tenant, key); err != nil {
		return p, false, err
	}
	var h map[string]string
	err = l.call(ctx, "reading a key policy", func(ctx context.Context) (err error) {
		h, err = l.rdb.HGetAll(ctx, KeyPolicyKey(tenant, key)).Result()
		return err
	})
	if err != nil {
		return p, false, err
	}
	p, ok = policyOf(h)
	return p, ok, nil
}

// Keys returns the state of each of tenant's keys that has a policy, as of
// now, sorted by key (spend of every key, with a policy or not, is in
// Query's report by key).
func (l *Ledger) Keys(ctx context.Context, tenant string, now time.Time) ([]KeyState, error) {
	if !queue.ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	var names []string
	if err := l.call(ctx, "listing key policies", func(ctx context.Context) (err error) {
		names, err = l.rdb.SMembers(ctx, keyPoliciesKey(tenant)).Result()
		return err
	}); err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]KeyState, 0, len(names))
	for _, key := range names {
		if !queue.ValidKey(key) {
			continue
		}
		var h map[string]string
		var day, month int64
		err := l.call(ctx, "reading a key", func(ctx context.Context) error {
			pipe := l.rdb.Pipeline()
			hc := pipe.HGetAll(ctx, KeyPolicyKey(tenant, key))
			dc := pipe.Get(ctx, KeyDayNeuronsKey(tenant, key, now))
			mc := pipe.Get(ctx, KeyMonthNeuronsKey(tenant, key, now))
			_, err := pipe.Exec(ctx)
			h, _ = hc.Result()
			day, _ = dc.Int64()
			month, _ = mc.Int64()
			return err
		})
		if err != nil {
			return nil, err
		}
		p, ok := policyOf(h)
		if !ok {
			continue // deleted meanwhile
		}
		out = append(out, KeyState{Key: key, Policy: p, DayMicro: day, MonthMicro: month})
	}
	return out, nil
}

// keyAlertsLua raises the budget alerts an API key's spend has reached:
// for each budget of its policy and each threshold its total has reached,
// the first request to see it sets the threshold's mark to its id and
// lists the alert; the reply holds the alerts whose mark is this
// request's, new or not, so a redelivered usage event reports them again
// (their notices share an id, so they are delivered once).
//
// KEYS: 1 policy hash, 2 day total, 3 month total, 4 alerts list, 5-7 the
// day's marks (one per queue.AlertThresholds), 8-10 the month's
// ARGV: 1 request id, 2 day mark ttl ms, 3 month mark ttl ms, 4 alerts
// kept, 5 the key, 6 day start, 7 month start, 8.. the thresholds
// Reply: flat {period, start, threshold, used micro, budget micro, soft}
const keyAlertsLua = `
local p = redis.call('HMGET', KEYS[1], 'daily', 'monthly', 'soft')
local soft = p[3] == '1'
local out = {}
local periods = {
  {'day', tonumber(p[1] or '0') or 0, KEYS[2], 5, ARGV[2], ARGV[6]},
  {'month', tonumber(p[2] or '0') or 0, KEYS[3], 8, ARGV[3], ARGV[7]},
}
for _, per in ipairs(periods) do
  local budget = per[2]
  if budget > 0 then
    local used = tonumber(redis.call('GET', per[3]) or '0')
    for i = 8, #ARGV do
      local th = tonumber(ARGV[i])
      if used * 100 >= budget * th then
        local mark = KEYS[per[4] + i - 8]
        local new = redis.call('SET', mark, ARGV[1], 'NX', 'PX', per[5])
        if new then
          redis.call('LPUSH', KEYS[4], cjson.encode({key = ARGV[5], period = per[1], start = per[6],
            threshold = th, used_micro = used, budget_micro = budget, soft = soft, request_id = ARGV[1]}))
          redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[4]) - 1)
        end
        if new or redis.call('GET', mark) == ARGV[1] then
          for _, v in ipairs({per[1], per[6], th, used, budget, soft and 1 or 0}) do table.insert(out, v) end
        end
      end
    end
  end
end
return out
`

// KeyAlerts raises the budget alerts that ev's API key has reached now
// that ev is counted (call it after Record), and returns those raised by
// ev's request: each alert is raised once per key, period and threshold,
// by the first request to see its total there; and where the key's alerts
// go. An event without a key raises none.
func (l *Ledger) KeyAlerts(ctx context.Context, ev *queue.UsageEvent) (alerts []queue.BudgetAlert, to Delivery, err error) {
	if ev.Key == "" {
		return nil, to, nil
	}
	if err := checkKey(ev.Tenant, ev.Key); err != nil {
		return nil, to, err
	}
	t := ev.Time.UTC()
	day, month := t.Format(dayLayout), t.Format(monthLayout)
	keys := []string{KeyPolicyKey(ev.Tenant, ev.Key), KeyDayNeuronsKey(ev.Tenant, ev.Key, t),
		KeyMonthNeuronsKey(ev.Tenant, ev.Key, t), alertsKey(ev.Tenant)}
	for _, start := range []string{day, month} {
		for _, th := range queue.AlertThresholds {
			keys = append(keys, alertMarkKey(ev.Tenant, ev.Key, start, th))
		}
	}
	args := []any{ev.RequestID, ChargeTTL.Milliseconds(), KeyMonthTTL.Milliseconds(), MaxAlerts, ev.Key, day, month}
	for _, th := range queue.AlertThresholds {
		args = append(args, th)
	}
	var res []any
	if err := l.call(ctx, "raising key alerts", func(ctx context.Context) (err error) {
		res, err = l.alerts.Run(ctx, l.rdb, keys, args...).Slice()
		return err
	}); err != nil {
		return nil, to, err
	}
	for i := 0; i+5 < len(res); i += 6 {
		period, _ := res[i].(string)
		start, _ := res[i+1].(string)
		th, _ := res[i+2].(int64)
		used, _ := res[i+3].(int64)
		budget, _ := res[i+4].(int64)
		soft, _ := res[i+5].(int64)
		alerts = append(alerts, queue.BudgetAlert{Key: ev.Key, Period: period, Start: start, Threshold: int(th),
			Used: price.Neurons(used), Budget: price.Neurons(budget), Soft: soft == 1, RequestID: ev.RequestID})
	}
	if len(alerts) > 0 {
		p, _, err := l.KeyPolicy(ctx, ev.Tenant, ev.Key)
		if err != nil {
			return nil, to, err
		}
		to = p.delivery()
	}
	return alerts, to, nil
}

// Alert is one raised budget alert, as Alerts lists it.
type Alert struct {
	Key         string `json:"key"`
	Period      string `json:"period"`
	Start       string `json:"start"`
	Threshold   int    `json:"threshold"`
	UsedMicro   int64  `json:"used_micro"`
	BudgetMicro int64  `json:"budget_micro"`
	Soft        bool   `json:"soft"`
	RequestID   string `json:"request_id"`
}

// Alerts returns tenant's most recent budget alerts, newest first, at most
// limit (MaxAlerts are kept).
func (l *Ledger) Alerts(ctx context.Context, tenant string, limit int) ([]Alert, error) {
	if !queue.ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	if limit <= 0 || limit > MaxAlerts {
		limit = MaxAlerts
	}
	var raw []string
	if err := l.call(ctx, "reading alerts", func(ctx context.Context) (err error) {
		raw, err = l.rdb.LRange(ctx, alertsKey(tenant), 0, int64(limit-1)).Result()
		return err
	}); err != nil {
		return nil, err
	}
	out := make([]Alert, 0, len(raw))
	for _, s := range raw {
		var a Alert
		if json.Unmarshal([]byte(s), &a) == nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// Cost anomalies (queue.CostAnomaly): each request of an API key is
// compared with the key's and the tenant's costs this UTC month, kept as
// histograms of quarter-octave buckets of micro-neurons.
const (
	// AnomalyMinRequests is how many requests the key and the tenant must
	// have this month before a request is compared with them.
	AnomalyMinRequests      = 20
	anomalyBucketsPerOctave = 4
)

// costBucket is the histogram bucket of a cost of micro > 0 micro-neurons.
func costBucket(micro int64) int {
	return int(math.Floor(math.Log2(float64(micro)) * anomalyBucketsPerOctave))
}

// bucketTop is the upper bound, in micro-neurons, of bucket b.
func bucketTop(b int64) float64 {
	return math.Exp2(float64(b+1) / anomalyBucketsPerOctave)
}

func keyCostsKey(tenant, key string, t time.Time) string {
	return tenantPrefix(tenant) + "costs:" + t.UTC().Format(monthLayout) + ":k:" + key
}
func tenantCostsKey(tenant string, t time.Time) string {
	return tenantPrefix(tenant) + "costs:" + t.UTC().Format(monthLayout)
}
func costSeenKey(tenant, id string) string { return tenantPrefix(tenant) + "costseen:" + id }
func anomaliesKey(tenant string) string    { return tenantPrefix(tenant) + "anomalies" }

// keyAnomalyLua compares one request's cost with the histograms of its key
// and tenant (before adding it), then adds it to both, once per request: a
// redelivery gets the first answer again.
//
// KEYS: 1 key histogram, 2 tenant histogram, 3 the request's seen mark,
// 4 anomalies list
// ARGV: 1 the cost's bucket, 2 histogram ttl ms, 3 mark ttl ms, 4 min
// requests, 5 factor, 6 anomalies kept, 7 the cost (micro), 8 the
// anomaly's JSON without its percentiles, 9 buckets per octave
// Reply: {flagged 0/1, key p95 bucket, tenant p99 bucket} (-1: too few)
const keyAnomalyLua = `
local seen = redis.call('GET', KEYS[3])
if seen then
  local a, b, c = string.match(seen, '^(-?%d+)|(-?%d+)|(-?%d+)$')
  return {tonumber(a), tonumber(b), tonumber(c)}
end
local function pct(key, p)
  local h = redis.call('HGETALL', key)
  local n, bs, counts = 0, {}, {}
  for i = 1, #h, 2 do
    local b, c = tonumber(h[i]), tonumber(h[i + 1])
    table.insert(bs, b)
    counts[b] = c
    n = n + c
  end
  if n < tonumber(ARGV[4]) then return -1 end
  table.sort(bs)
  local cum = 0
  for _, b in ipairs(bs) do
    cum = cum + counts[b]
    if cum * 100 >= n * p then return b end
  end
  return bs[#bs]
end
local kp, tp = pct(KEYS[1], 95), pct(KEYS[2], 99)
local flagged = 0
local per = tonumber(ARGV[9])
local cost = tonumber(ARGV[7])
if kp >= 0 and tp >= 0 and cost > tonumber(ARGV[5]) * 2 ^ ((kp + 1) / per) and cost > 2 ^ ((tp + 1) / per) then
  flagged = 1
  redis.call('LPUSH', KEYS[4], ARGV[8])
  redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[6]) - 1)
end
for i = 1, 2 do
  redis.call('HINCRBY', KEYS[i], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
redis.call('SET', KEYS[3], flagged .. '|' .. kp .. '|' .. tp, 'PX', ARGV[3])
return {flagged, kp, tp}
`

// KeyAnomaly compares ev's cost with its API key's and its tenant's this
// month (call it after Record): an anomaly when it is over
// queue.AnomalyFactor times the key's 95th percentile and over the
// tenant's 99th, each known from at least AnomalyMinRequests requests.
// The request then joins both. Each request is compared once; a redelivery
// gets the same answer. to is where the key's alerts go. Events without a
// key or cost are not compared.
func (l *Ledger) KeyAnomaly(ctx context.Context, ev *queue.UsageEvent) (a *queue.CostAnomaly, to Delivery, err error) {
	if ev.Key == "" || ev.MicroNeurons <= 0 {
		return nil, to, nil
	}
	if err := checkKey(ev.Tenant, ev.Key); err != nil {
		return nil, to, err
	}
	anomaly := queue.CostAnomaly{Key: ev.Key, RequestID: ev.RequestID, Model: ev.Model, Neurons: price.Neurons(ev.MicroNeurons)}
	listed, err := json.Marshal(anomaly)
	if err != nil {
		return nil, to, err
	}
	t := ev.Time.UTC()
	keys := []string{keyCostsKey(ev.Tenant, ev.Key, t), tenantCostsKey(ev.Tenant, t), costSeenKey(ev.Tenant, ev.RequestID), anomaliesKey(ev.Tenant)}
	args := []any{costBucket(ev.MicroNeurons), KeyMonthTTL.Milliseconds(), l.cfg.SeenTTL.Milliseconds(), AnomalyMinRequests,
		queue.AnomalyFactor, MaxAlerts, ev.MicroNeurons, listed, anomalyBucketsPerOctave}
	var res []int64
	if err := l.call(ctx, "comparing a request's cost", func(ctx context.Context) (err error) {
		res, err = l.anomaly.Run(ctx, l.rdb, keys, args...).Int64Slice()
		return err
	}); err != nil {
		return nil, to, err
	}
	if len(res) != 3 || res[0] != 1 {
		return nil, to, nil
	}
	anomaly.KeyP95, anomaly.TenantP99 = price.Neurons(int64(bucketTop(res[1]))), price.Neurons(int64(bucketTop(res[2])))
	p, _, err := l.KeyPolicy(ctx, ev.Tenant, ev.Key)
	if err != nil {
		return nil, to, err
	}
	return &anomaly, p.delivery(), nil
}

// Anomalies returns tenant's most recent cost anomalies, newest first, at
// most limit (MaxAlerts are kept).
func (l *Ledger) Anomalies(ctx context.Context, tenant string, limit int) ([]queue.CostAnomaly, error) {
	if !queue.ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	if limit <= 0 || limit > MaxAlerts {
		limit = MaxAlerts
	}
	var raw []string
	if err := l.call(ctx, "reading anomalies", func(ctx context.Context) (err error) {
		raw, err = l.rdb.LRange(ctx, anomaliesKey(tenant), 0, int64(limit-1)).Result()
		return err
	}); err != nil {
		return nil, err
	}
	out := make([]queue.CostAnomaly, 0, len(raw))
	for _, s := range raw {
		var a queue.CostAnomaly
		if json.Unmarshal([]byte(s), &a) == nil {
			out = append(out, a)
		}
	}
	return out, nil
}
