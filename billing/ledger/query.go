package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// Granularity is the width of a report's buckets.
type Granularity string

// Granularities.
const (
	Hour Granularity = "hour"
	Day  Granularity = "day" // UTC days
)

// Limits on one query's buckets.
const (
	MaxHourBuckets = 31 * 24
	MaxDayBuckets  = 400
)

// ErrQuery: a query the ledger cannot answer (bad range or granularity).
var ErrQuery = errors.New("ledger: invalid query")

// Query asks for a tenant's usage in [From, To), bucketed by Granularity
// (bucket starts are UTC hours or days), of one Model or all when empty.
type Query struct {
	Tenant      string
	From, To    time.Time
	Granularity Granularity
	Model       string
}

// Totals sums usage.
type Totals struct {
	Requests         int64            `json:"requests"`
	PromptTokens     int64            `json:"prompt_tokens"`
	CachedTokens     int64            `json:"cached_tokens"`
	CompletionTokens int64            `json:"completion_tokens"`
	MicroNeurons     int64            `json:"micro_neurons"`
	Outcomes         map[string]int64 `json:"outcomes"`
}

func (t *Totals) add(o Totals) {
	t.Requests += o.Requests
	t.PromptTokens += o.PromptTokens
	t.CachedTokens += o.CachedTokens
	t.CompletionTokens += o.CompletionTokens
	t.MicroNeurons += o.MicroNeurons
	for k, v := range o.Outcomes {
		if t.Outcomes == nil {
			t.Outcomes = map[string]int64{}
		}
		t.Outcomes[k] += v
	}
}

// Point is one model's usage in one bucket.
type Point struct {
	Start time.Time
	Model string
	Totals
}

// Histogram counts requests per latency bucket (LatencyBounds; the last
// count is above every bound).
type Histogram []int64

// Percentile is the upper bound, in milliseconds, of the bucket holding the
// p-th percentile (0 < p <= 100), and false when there is no sample; above
// every bound it is the last bound.
func (h Histogram) Percentile(p float64) (int64, bool) {
	var n int64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return 0, false
	}
	rank := int64(float64(n)*p/100 + 0.999999)
	rank = min(max(rank, 1), n)
	var seen int64
	for i, c := range h {
		seen += c
		if seen >= rank {
			if i < len(LatencyBounds) {
				return LatencyBounds[i], true
			}
			break
		}
	}
	return LatencyBounds[len(LatencyBounds)-1], true
}

// Report is the answer to a Query. Series has a point per bucket and model
// that saw a request, in time then model order; Totals is their sum.
type Report struct {
	Series []Point
	Totals Totals
	Models []string // models in Series, sorted
	TTFT   Histogram
	Total  Histogram
	// Keys and Tags are the range's usage by API key ("" for requests
	// without one) and by metadata tag ("name=value"), all models
	// together (without Outcomes).
	Keys map[string]Totals
	Tags map[string]Totals
}

// Query answers q from the rollups. From is rounded down and To up to the
// bucket; an empty or inverted range, or more than MaxHourBuckets or
// MaxDayBuckets buckets, is ErrQuery.
func (l *Ledger) Query(ctx context.Context, q Query) (*Report, error) {
	if !queue.ValidTenant(q.Tenant) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidTenant, q.Tenant)
	}
	starts, key, err := q.buckets()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	pipe := l.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(starts))
	for i, s := range starts {
		cmds[i] = pipe.HGetAll(cctx, key(q.Tenant, s))
	}
	if _, err := pipe.Exec(cctx); err != nil && !errors.Is(err, redis.Nil) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	rep := &Report{TTFT: make(Histogram, len(LatencyBounds)+1), Total: make(Histogram, len(LatencyBounds)+1),
		Keys: map[string]Totals{}, Tags: map[string]Totals{}}
	models := map[string]bool{}
	for i, cmd := range cmds {
		points := rep.bucket(starts[i], cmd.Val(), q.Model)
		names := make([]string, 0, len(points))
		for m := range points {
			names = append(names, m)
		}
		slices.Sort(names)
		for _, m := range names {
			rep.Series = append(rep.Series, *points[m])
			rep.Totals.add(points[m].Totals)
			models[m] = true
		}
	}
	if rep.Totals.Outcomes == nil {
		rep.Totals.Outcomes = map[string]int64{}
	}
	for m := range models {
		rep.Models = append(rep.Models, m)
	}
	slices.Sort(rep.Models)
	return rep, nil
}

// buckets lists the starts of the buckets q covers, and the key of a
// tenant's rollup of each.
func (q Query) buckets() ([]time.Time, func(string, time.Time) string, error) {
	var (
		step    time.Duration
		key     func(string, time.Time) string
		maxBkts int
	)
	from, to := q.From.UTC(), q.To.UTC()
	switch q.Granularity {
	case Hour:
		step, key, maxBkts = time.Hour, hourKey, MaxHourBuckets
		from = from.Truncate(time.Hour)
	case Day:
		step, key, maxBkts = 24*time.Hour, dayKey, MaxDayBuckets
		from = time.Date(from.Year(), from.Month(), from.Day(), 0, 0, 0, 0, time.UTC)
	default:
		return nil, nil, fmt.Errorf("%w: granularity %q (want hour or day)", ErrQuery, q.Granularity)
	}
	if !to.After(q.From) {
		return nil, nil, fmt.Errorf("%w: from %s is not before to %s", ErrQuery, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	var starts []time.Time
	for t := from; t.Before(to); t = t.Add(step) {
		if len(starts) == maxBkts {
			return nil, nil, fmt.Errorf("%w: more than %d %s buckets", ErrQuery, maxBkts, q.Granularity)
		}
		starts = append(starts, t)
	}
	return starts, key, nil
}

// bucket reads one bucket's rollup fields ("metric|model": count) into a
// point per model (only model's when it is not empty), and its latencies
// into rep's histograms. Fields it does not know are skipped.
func (rep *Report) bucket(start time.Time, fields map[string]string, model string) map[string]*Point {
	points := map[string]*Point{}
	for field, v := range fields {
		metric, m, ok := strings.Cut(field, "|")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		if metric == groupKey || metric == groupTag {
			rep.group(metric, m, n)
			continue
		}
		if model != "" && m != model {
			continue
		}
		p := points[m]
		if p == nil {
			p = &Point{Start: start, Model: m, Totals: Totals{Outcomes: map[string]int64{}}}
			points[m] = p
		}
		switch {
		case metric == mRequests:
			p.Requests += n
		case metric == mPrompt:
			p.PromptTokens += n
		case metric == mCached:
			p.CachedTokens += n
		case metric == mCompletion:
			p.CompletionTokens += n
		case metric == mMicro:
			p.MicroNeurons += n
		case strings.HasPrefix(metric, mOutcome):
			p.Outcomes[strings.TrimPrefix(metric, mOutcome)] += n
		case strings.HasPrefix(metric, mTTFT):
			addBucket(rep.TTFT, strings.TrimPrefix(metric, mTTFT), n)
		case strings.HasPrefix(metric, mTotal):
			addBucket(rep.Total, strings.TrimPrefix(metric, mTotal), n)
		}
	}
	return points
}

// group adds a "<metric>|<name>" tally of group (groupKey or groupTag).
func (rep *Report) group(group, field string, n int64) {
	metric, name, ok := strings.Cut(field, "|")
	if !ok {
		return
	}
	into := rep.Keys
	if group == groupTag {
		into = rep.Tags
	}
	t := into[name]
	switch metric {
	case mRequests:
		t.Requests += n
	case mPrompt:
		t.PromptTokens += n
	case mCached:
		t.CachedTokens += n
	case mCompletion:
		t.CompletionTokens += n
	case mMicro:
		t.MicroNeurons += n
	default:
		return
	}
	into[name] = t
}

func addBucket(h Histogram, idx string, n int64) {
	if i, err := strconv.Atoi(idx); err == nil && i >= 0 && i < len(h) {
		h[i] += n
	}
}

// Recent returns up to limit of tenant's most recent requests, newest first,
// that ended before the cursor (empty: from the newest), and the cursor of
// the next page ("" when there is none).
func (l *Ledger) Recent(ctx context.Context, tenant string, limit int, cursor string) ([]queue.UsageEvent, string, error) {
	if !queue.ValidTenant(tenant) {
		return nil, "", fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	if limit < 1 {
		return nil, "", fmt.Errorf("%w: limit %d", ErrQuery, limit)
	}
	maxScore := "+inf"
	if cursor != "" {
		if _, err := strconv.ParseInt(cursor, 10, 64); err != nil {
			return nil, "", fmt.Errorf("%w: cursor %q", ErrQuery, cursor)
		}
		maxScore = "(" + cursor
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	vals, err := l.rdb.ZRevRangeByScoreWithScores(cctx, recentKey(tenant), &redis.ZRangeBy{
		Max: maxScore, Min: "-inf", Count: int64(limit) + 1,
	}).Result()
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		return nil, "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	next := ""
	if len(vals) > limit {
		vals = vals[:limit]
		next = strconv.FormatInt(int64(vals[limit-1].Score), 10)
	}
	out := make([]queue.UsageEvent, 0, len(vals))
	for _, z := range vals {
		s, _ := z.Member.(string)
		var ev queue.UsageEvent
		if err := json.Unmarshal([]byte(s), &ev); err != nil {
			continue // written by this package: never happens
		}
		out = append(out, ev)
	}
	return out, next, nil
}

// DayMicro is tenant's micro-neurons on the UTC day of t: what the daily
// budget is checked against.
func (l *Ledger) DayMicro(ctx context.Context, tenant string, t time.Time) (int64, error) {
	if !queue.ValidTenant(tenant) {
		return 0, fmt.Errorf("%w: %q", ErrInvalidTenant, tenant)
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	n, err := l.rdb.Get(cctx, DayNeuronsKey(tenant, t)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, nil
	case err != nil:
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return n, nil
}

// Now is the ledger's clock.
func (l *Ledger) Now() time.Time { return l.cfg.Now() }
