package usage

import (
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Source is where usage is read from; billing/ledger.Ledger implements it.
type Source interface {
	Query(ctx context.Context, q ledger.Query) (*ledger.Report, error)
	Recent(ctx context.Context, tenant string, limit int, cursor string) ([]queue.UsageEvent, string, error)
	DayMicro(ctx context.Context, tenant string, t time.Time) (int64, error)
}

var _ Source = (*ledger.Ledger)(nil)

// ErrConfig reports a Config that cannot serve.
var ErrConfig = errors.New("usage: invalid config")

// QueryError is a query parameter that cannot be used; it wraps
// ledger.ErrQuery. Param names it as the client wrote it.
type QueryError struct {
	Param string
	Msg   string
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ledger.ErrQuery, e.Param, e.Msg)
}
func (e *QueryError) Unwrap() error { return ledger.ErrQuery }

// Request limits of the recent-requests list.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// Config configures a Handler.
type Config struct {
	// Authorize returns the tenant a request may read, or the error to
	// refuse it with. Required.
	Authorize func(r *http.Request) (tenant string, err error)
	// WriteError renders a refusal. Required.
	WriteError func(w http.ResponseWriter, r *http.Request, err error)
	// AuthorizeWrite returns the tenant whose API key policies a request
	// may change, or the error to refuse it with; nil: none may be
	// changed.
	AuthorizeWrite func(r *http.Request) (tenant string, err error)
	// CheckWebhook admits a key policy's alert webhook (allowed host,
	// public address); nil admits any the policy's own checks pass.
	CheckWebhook func(ctx context.Context, w *queue.Webhook) error
	// DailyNeurons is the daily budget reported beside today's use; 0 means
	// unlimited.
	DailyNeurons float64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Handler serves the usage API.
type Handler struct {
	src Source
	cfg Config
}

// New validates cfg and returns a Handler over src.
func New(src Source, cfg Config) (*Handler, error) {
	switch {
	case src == nil:
		return nil, fmt.Errorf("%w: Source is nil", ErrConfig)
	case cfg.Authorize == nil || cfg.WriteError == nil:
		return nil, fmt.Errorf("%w: Authorize and WriteError are required", ErrConfig)
	case cfg.DailyNeurons < 0:
		return nil, fmt.Errorf("%w: DailyNeurons %v", ErrConfig, cfg.DailyNeurons)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Handler{src: src, cfg: cfg}, nil
}

// Totals is usage summed, as the API shows it.
type Totals struct {
	Requests         int64            `json:"requests"`
	PromptTokens     int64            `json:"prompt_tokens"`
	CachedTokens     int64            `json:"cached_tokens"`
	CompletionTokens int64            `json:"completion_tokens"`
	Neurons          float64          `json:"neurons"`
	Outcomes         map[string]int64 `json:"outcomes"`
}

func totals(t ledger.Totals) Totals {
	out := Totals{Requests: t.Requests, PromptTokens: t.PromptTokens, CachedTokens: t.CachedTokens,
		CompletionTokens: t.CompletionTokens, Neurons: price.Neurons(t.MicroNeurons), Outcomes: map[string]int64{}}
	for _, o := range queue.Outcomes() {
		out.Outcomes[o] = t.Outcomes[o]
	}
	return out
}

// Point is one model's usage in one bucket.
type Point struct {
	Start time.Time `json:"start"`
	Model string    `json:"model"`
	Totals
}

// Percentiles are latency percentiles in milliseconds: each the upper bound
// of the histogram bucket holding it (ledger.LatencyBounds).
type Percentiles struct {
	P50 int64 `json:"p50"`
	P90 int64 `json:"p90"`
	P99 int64 `json:"p99"`
}

func percentiles(h ledger.Histogram) *Percentiles {
	p50, ok := h.Percentile(50)
	if !ok {
		return nil
	}
	p90, _ := h.Percentile(90)
	p99, _ := h.Percentile(99)
	return &Percentiles{P50: p50, P90: p90, P99: p99}
}

// Today is the tenant's neurons on the current UTC day against its budget.
type Today struct {
	Date        string   `json:"date"` // UTC
	Neurons     float64  `json:"neurons"`
	DailyBudget *float64 `json:"daily_budget"` // null: unlimited
	Remaining   *float64 `json:"remaining"`    // null: unlimited
	ResetsAt    string   `json:"resets_at"`
}

// Report is the answer of GET .../ai/usage.
type Report struct {
	AccountID   string         `json:"account_id"`
	From        time.Time      `json:"from"`
	To          time.Time      `json:"to"`
	Granularity string         `json:"granularity"`
	Model       string         `json:"model,omitempty"`
	Totals      Totals         `json:"totals"`
	Series      []Point        `json:"series"`
	Models      []string       `json:"models"`
	Latency     map[string]any `json:"latency_ms"` // ttft and total: Percentiles or null
	Today       Today          `json:"today"`
	// GroupBy and Groups, with ?group_by=key or tag: the range's usage by
	// API key ("" for requests without one) or by metadata tag
	// ("name=value"), all models together, most neurons first.
	GroupBy string  `json:"group_by"`
	Groups  []Group `json:"groups,omitempty"`
}

// Group is the usage of one API key or metadata tag over a report's range.
type Group struct {
	Name             string  `json:"name"`
	Requests         int64   `json:"requests"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	Neurons          float64 `json:"neurons"`
	micro            int64
}

// groups lists by's tallies, most spend first (then by name).
func groups(by map[string]ledger.Totals) []Group {
	out := make([]Group, 0, len(by))
	for name, t := range by {
		out = append(out, Group{Name: name, Requests: t.Requests, PromptTokens: t.PromptTokens, CachedTokens: t.CachedTokens,
			CompletionTokens: t.CompletionTokens, Neurons: price.Neurons(t.MicroNeurons), micro: t.MicroNeurons})
	}
	slices.SortFunc(out, func(a, b Group) int {
		if c := cmp.Compare(b.micro, a.micro); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Group-by values of the usage API.
const (
	GroupByModel = "model" // the default: Series per model
	GroupByKey   = "key"
	GroupByTag   = "tag"
)

// envelope is the Workers AI response envelope.
type envelope struct {
	Result   any      `json:"result"`
	Success  bool     `json:"success"`
	Errors   []string `json:"errors"`
	Messages []string `json:"messages"`
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(envelope{Result: v, Success: true, Errors: []string{}, Messages: []string{}})
	if err != nil {
		http.Error(w, `{"success":false}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// parseTime reads an RFC 3339 time or a YYYY-MM-DD date (UTC midnight).
func parseTime(param, v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, &QueryError{Param: param, Msg: fmt.Sprintf("%q is not an RFC 3339 time or a YYYY-MM-DD date", v)}
}

// query reads the usage query of r for tenant.
func (h *Handler) query(r *http.Request, tenant string) (ledger.Query, error) {
	v := r.URL.Query()
	q := ledger.Query{Tenant: tenant, Granularity: ledger.Granularity(v.Get("granularity")), Model: v.Get("model")}
	if q.Granularity == "" {
		q.Granularity = ledger.Hour
	}
	if q.Granularity != ledger.Hour && q.Granularity != ledger.Day {
		return q, &QueryError{Param: "granularity", Msg: fmt.Sprintf("%q (want hour or day)", q.Granularity)}
	}
	q.To = h.cfg.Now()
	if s := v.Get("to"); s != "" {
		t, err := parseTime("to", s)
		if err != nil {
			return q, err
		}
		q.To = t
	}
	q.From = q.To.Add(-24 * time.Hour)
	if q.Granularity == ledger.Day {
		q.From = q.To.AddDate(0, 0, -30)
	}
	if s := v.Get("from"); s != "" {
		t, err := parseTime("from", s)
		if err != nil {
			return q, err
		}
		q.From = t
	}
	if !q.To.After(q.From) {
		return q, &QueryError{Param: "from", Msg: "must be before to"}
	}
	switch g := v.Get("group_by"); g {
	case "", GroupByModel:
	case GroupByKey, GroupByTag:
		if q.Model != "" {
			return q, &QueryError{Param: "model", Msg: "cannot be combined with group_by " + g + " (keys and tags are counted over all models)"}
		}
	default:
		return q, &QueryError{Param: "group_by", Msg: fmt.Sprintf("%q (want model, key or tag)", g)}
	}
	return q, nil
}

// groupBy is the request's group_by, defaulted.
func groupBy(r *http.Request) string {
	if g := r.URL.Query().Get("group_by"); g != "" {
		return g
	}
	return GroupByModel
}

// Usage serves GET .../ai/usage?from=&to=&granularity=hour|day&model=, as
// JSON or, with Accept: text/csv, as CSV (one row per bucket and model).
func (h *Handler) Usage(w http.ResponseWriter, r *http.Request) {
	tenant, err := h.cfg.Authorize(r)
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	q, err := h.query(r, tenant)
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	rep, err := h.src.Query(r.Context(), q)
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	by := groupBy(r)
	if strings.Contains(r.Header.Get("Accept"), "text/csv") {
		if by != GroupByModel {
			h.writeGroupCSV(w, tenant, q, by, rep)
			return
		}
		h.writeCSV(w, tenant, q, rep)
		return
	}
	today, err := h.today(r.Context(), tenant)
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	out := Report{
		AccountID: tenant, From: q.From.UTC(), To: q.To.UTC(), Granularity: string(q.Granularity), Model: q.Model,
		Totals: totals(rep.Totals), Series: make([]Point, 0, len(rep.Series)), Models: rep.Models,
		Latency: map[string]any{"ttft": percentiles(rep.TTFT), "total": percentiles(rep.Total)},
		Today:   today, GroupBy: by,
	}
	switch by {
	case GroupByKey:
		out.Groups = groups(rep.Keys)
	case GroupByTag:
		out.Groups = groups(rep.Tags)
	}
	if out.Models == nil {
		out.Models = []string{}
	}
	for _, p := range rep.Series {
		out.Series = append(out.Series, Point{Start: p.Start, Model: p.Model, Totals: totals(p.Totals)})
	}
	writeJSON(w, out)
}

func (h *Handler) today(ctx context.Context, tenant string) (Today, error) {
	now := h.cfg.Now().UTC()
	micro, err := h.src.DayMicro(ctx, tenant, now)
	if err != nil {
		return Today{}, err
	}
	next := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	t := Today{Date: now.Format(time.DateOnly), Neurons: price.Neurons(micro), ResetsAt: next.Format(time.RFC3339)}
	if h.cfg.DailyNeurons > 0 {
		budget := h.cfg.DailyNeurons
		left := price.Neurons(max(price.ToMicro(budget)-micro, 0))
		t.DailyBudget, t.Remaining = &budget, &left
	}
	return t, nil
}

// CSVHeader is the header row of the CSV form.
func CSVHeader() []string {
	return append([]string{"start", "model", "requests", "prompt_tokens", "cached_tokens", "completion_tokens", "neurons"},
		queue.Outcomes()...)
}

// CSVText makes a text cell safe to open in a spreadsheet (OWASP's CSV
// injection rule): a cell that starts with =, +, -, @, a tab or a carriage
// return, which a spreadsheet would read as a formula, gets a leading
// single quote, and is read back as text. Every Workers AI model name starts
// with @. Number cells are written by strconv and need none of this.
func CSVText(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

func (h *Handler) writeCSV(w http.ResponseWriter, tenant string, q ledger.Query, rep *ledger.Report) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="usage-%s-%s-%s.csv"`,
		tenant, q.From.UTC().Format("20060102T1504"), q.Granularity))
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader())
	for _, p := range rep.Series {
		row := []string{p.Start.UTC().Format(time.RFC3339), CSVText(p.Model), strconv.FormatInt(p.Requests, 10),
			strconv.FormatInt(p.PromptTokens, 10), strconv.FormatInt(p.CachedTokens, 10),
			strconv.FormatInt(p.CompletionTokens, 10), strconv.FormatFloat(price.Neurons(p.MicroNeurons), 'f', 6, 64)}
		for _, o := range queue.Outcomes() {
			row = append(row, strconv.FormatInt(p.Outcomes[o], 10))
		}
		_ = cw.Write(row)
	}
	cw.Flush()
}

// writeGroupCSV writes the usage by key or tag: a row per key or tag.
func (h *Handler) writeGroupCSV(w http.ResponseWriter, tenant string, q ledger.Query, by string, rep *ledger.Report) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="usage-%s-%s-by-%s.csv"`,
		tenant, q.From.UTC().Format("20060102T1504"), by))
	src := rep.Keys
	if by == GroupByTag {
		src = rep.Tags
	}
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{by, "requests", "prompt_tokens", "cached_tokens", "completion_tokens", "neurons"})
	for _, g := range groups(src) {
		_ = cw.Write([]string{CSVText(g.Name), strconv.FormatInt(g.Requests, 10), strconv.FormatInt(g.PromptTokens, 10),
			strconv.FormatInt(g.CachedTokens, 10), strconv.FormatInt(g.CompletionTokens, 10), strconv.FormatFloat(g.Neurons, 'f', 6, 64)})
	}
	cw.Flush()
}

// Request is one finished request in the recent list.
type Request struct {
	ID               string    `json:"id"`
	Time             time.Time `json:"time"`
	Model            string    `json:"model"`
	Outcome          string    `json:"outcome"`
	PromptTokens     int       `json:"prompt_tokens"`
	CachedTokens     int       `json:"cached_tokens"`
	CompletionTokens int       `json:"completion_tokens"`
	Neurons          float64   `json:"neurons"`
	QueueMs          int64     `json:"queue_ms"`
	TTFTMs           int64     `json:"ttft_ms"`
	TotalMs          int64     `json:"total_ms"`
	WorkerID         string    `json:"worker_id"`
	// Metadata is what the request carried in its metadata field.
	Metadata map[string]string `json:"metadata,omitempty"`
	// User is the request's end user, as it named them (user).
	User string `json:"user,omitempty"`
	// Key is the tenant's API key the request came with (the token's key
	// claim).
	Key string `json:"key,omitempty"`
	// LoRA and LoRAName name the finetune (LoRA adapter) the request ran
	// with: its id and name.
	LoRA     string `json:"lora,omitempty"`
	LoRAName string `json:"lora_name,omitempty"`
}

// Requests is the answer of GET .../ai/usage/requests.
type Requests struct {
	Requests []Request `json:"requests"`
	Cursor   string    `json:"cursor,omitempty"` // pass back as ?cursor= for the next page
}

// Requests serves GET .../ai/usage/requests?limit=&cursor=: the most recent
// requests first, limit per page (default 50, at most 200).
func (h *Handler) Requests(w http.ResponseWriter, r *http.Request) {
	tenant, err := h.cfg.Authorize(r)
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	limit := DefaultLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			h.cfg.WriteError(w, r, &QueryError{Param: "limit", Msg: fmt.Sprintf("%q (want 1 to %d)", s, MaxLimit)})
			return
		}
		limit = n
	}
	cursor := r.URL.Query().Get("cursor")
	if _, err := strconv.ParseInt(cursor, 10, 64); cursor != "" && err != nil {
		h.cfg.WriteError(w, r, &QueryError{Param: "cursor", Msg: "not a cursor this API returned"})
		return
	}
	evs, next, err := h.src.Recent(r.Context(), tenant, limit, cursor)
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	out := Requests{Requests: make([]Request, 0, len(evs)), Cursor: next}
	for _, ev := range evs {
		out.Requests = append(out.Requests, Request{
			ID: ev.RequestID, Time: ev.Time, Model: ev.Model, Outcome: ev.Finish,
			PromptTokens: ev.PromptTokens, CachedTokens: ev.CachedTokens, CompletionTokens: ev.CompletionTokens,
			Neurons: price.Neurons(ev.MicroNeurons), QueueMs: ev.QueueMs, TTFTMs: ev.TTFTMs, TotalMs: ev.TotalMs,
			WorkerID: ev.WorkerID, Metadata: ev.Metadata, User: ev.User, Key: ev.Key,
			LoRA: ev.LoRA, LoRAName: ev.LoRAName,
		})
	}
	writeJSON(w, out)
}
