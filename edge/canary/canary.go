package canary

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/bulkhead-ai/bulkhead/edge/client"
)

// ErrConfig reports a canary configuration that cannot run.
var ErrConfig = errors.New("canary: invalid config")

// Tenant is one canary tenant: its id (the token's subject) and a client
// holding its token.
type Tenant struct {
	ID     string
	Client *client.Client
}

// Config sizes a canary run.
type Config struct {
	Model            string   // model to call; required
	Tenants          []Tenant // at least two
	Requests         int      // requests in the load phase, all tenants; default 400
	Concurrency      int      // requests in flight in the load phase; default 8
	OversizeFraction float64  // share of prompts longer than the context window; default 0.2
	MaxTokens        int      // tokens generated per request; default 24
	Seed             uint64   // makes the prompts reproducible
	// Adapter, when set, is a LoRA adapter file for Model (GGUF): each
	// tenant uploads it as a finetune of its own, and a third of the
	// prompts that fit run twice, with the adapter and without, so KV
	// computed under one would change the other's answer. The tenants'
	// tokens need the finetunes:write scope; the finetunes are deleted
	// at the end.
	Adapter []byte
}

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (c *Config) Validate() error {
	if c.Requests == 0 {
		c.Requests = 400
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 24
	}
	switch {
	case c.Model == "":
		return fmt.Errorf("%w: Model is required", ErrConfig)
	case len(c.Tenants) < 2:
		return fmt.Errorf("%w: need at least two tenants, have %d", ErrConfig, len(c.Tenants))
	case c.Requests < len(c.Tenants) || c.Requests > 100000:
		return fmt.Errorf("%w: Requests %d (at least one per tenant, at most 100000)", ErrConfig, c.Requests)
	case c.Concurrency < 1 || c.Concurrency > 256:
		return fmt.Errorf("%w: Concurrency %d (1 to 256)", ErrConfig, c.Concurrency)
	case c.OversizeFraction < 0 || c.OversizeFraction > 1:
		return fmt.Errorf("%w: OversizeFraction %v (0 to 1)", ErrConfig, c.OversizeFraction)
	case c.MaxTokens < 1:
		return fmt.Errorf("%w: MaxTokens %d", ErrConfig, c.MaxTokens)
	}
	seen := map[string]bool{}
	for _, t := range c.Tenants {
		if t.ID == "" || t.Client == nil || seen[t.ID] {
			return fmt.Errorf("%w: tenants need distinct ids and a client", ErrConfig)
		}
		seen[t.ID] = true
	}
	return nil
}

// TenantReport is what one tenant saw.
type TenantReport struct {
	Tenant          string   `json:"tenant"`
	Checked         int      `json:"responses_checked"`  // load-phase responses compared with their reference
	Differ          int      `json:"responses_differ"`   // ... that were not identical
	Oversize        int      `json:"oversize_sent"`      // over-long prompts sent
	OversizeRefused int      `json:"oversize_refused"`   // ... refused with the prompt-too-long error
	Leaks           int      `json:"foreign_text"`       // responses holding another tenant's marker
	AdapterPairs    int      `json:"adapter_pairs"`      // prompts run with the tenant's adapter and without (Config.Adapter)
	AdapterSame     int      `json:"adapter_same"`       // ... whose two quiet answers were the same
	Errors          int      `json:"unexpected_errors"`  // other failures
	Problems        []string `json:"problems,omitempty"` // the first few, described
}

// Report is the outcome of a run.
type Report struct {
	Model         string         `json:"model"`
	ContextWindow int            `json:"context_window"`
	Tenants       []TenantReport `json:"tenants"`
}

// OK reports whether the run found nothing wrong.
func (r *Report) OK() bool {
	for _, t := range r.Tenants {
		if t.Differ > 0 || t.Leaks > 0 || t.Errors > 0 || t.OversizeRefused != t.Oversize {
			return false
		}
		if t.AdapterPairs > 0 && t.AdapterSame == t.AdapterPairs {
			return false // the adapter was never applied
		}
	}
	return true
}

// prompt is one canary request.
type prompt struct {
	tenant   int
	marker   string
	text     string
	oversize bool
	lora     string // the tenant's finetune the prompt runs under, or ""
	twin     int    // with lora: the index of the same prompt without it
}

// Run executes a canary run: probe, quiet references, then the load phase.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	window, err := contextWindow(ctx, cfg.Tenants[0].Client, cfg.Model)
	if err != nil {
		return nil, err
	}
	rep := &Report{Model: cfg.Model, ContextWindow: window, Tenants: make([]TenantReport, len(cfg.Tenants))}
	for i, t := range cfg.Tenants {
		rep.Tenants[i].Tenant = t.ID
	}
	charsPerToken, err := probe(ctx, cfg)
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, prompts: makePrompts(cfg, window, charsPerToken), rep: rep, refs: map[int]string{}}
	if cfg.Adapter != nil {
		names, err := uploadAdapters(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer deleteAdapters(cfg, names)
		r.prompts, r.twinned = withTwins(r.prompts, names)
	}
	if err := r.references(ctx); err != nil {
		return nil, err
	}
	r.checkAdapters()
	r.load(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rep, nil
}

// probe learns how many characters of canary text make a token, from one
// request.
func probe(ctx context.Context, cfg Config) (float64, error) {
	text := filler(rand.New(rand.NewPCG(cfg.Seed, 99)), 600)
	res, err := cfg.Tenants[0].Client.Run(ctx, cfg.Model, request(text, 1, ""))
	if err != nil {
		return 0, fmt.Errorf("canary: probe request: %w", err)
	}
	if res.Usage == nil || res.Usage.PromptTokens < 1 {
		return 0, fmt.Errorf("canary: probe response has no usage")
	}
	return float64(len(text)) / float64(res.Usage.PromptTokens), nil
}

// run is one canary run's prompts and what it found.
type run struct {
	cfg     Config
	prompts []prompt

	mu   sync.Mutex // guards rep and refs
	rep  *Report
	refs map[int]string // prompt index → its quiet reference response

	twinned map[int]bool // prompts run with and without an adapter (withTwins)
}

// note applies f to tenant t's report and records problem, if any, among
// its first few.
func (r *run) note(t int, f func(*TenantReport), problem string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tr := &r.rep.Tenants[t]
	f(tr)
	if problem != "" && len(tr.Problems) < 5 {
		tr.Problems = append(tr.Problems, problem)
	}
}

// reference returns prompt i's quiet reference response, if it has one.
func (r *run) reference(i int) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, ok := r.refs[i]
	return ref, ok
}

// references runs every prompt that fits alone, one at a time, so nothing
// else is in flight, and keeps each response as that prompt's reference.
func (r *run) references(ctx context.Context) error {
	for i, p := range r.prompts {
		if p.oversize {
			continue
		}
		req := request(p.text, r.cfg.MaxTokens, p.lora)
		if r.twinned[i] {
			// Computed from the prompt alone: a cache that served the
			// twin's KV across the adapter would otherwise make the
			// reference wrong too.
			off := false
			req.CachePrefix = &off
		}
		res, err := r.cfg.Tenants[p.tenant].Client.Run(ctx, r.cfg.Model, req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.note(p.tenant, func(t *TenantReport) { t.Errors++ }, fmt.Sprintf("reference %s: %v", p.marker, err))
			continue
		}
		r.mu.Lock()
		r.refs[i] = res.Response
		r.mu.Unlock()
		r.checkLeak(i, res.Response)
	}
	return nil
}

// load runs every prompt again, shuffled, Concurrency at a time, until all
// ran or ctx ends.
func (r *run) load(ctx context.Context) {
	order := rand.New(rand.NewPCG(r.cfg.Seed, 7)).Perm(len(r.prompts))
	work := make(chan int)
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for i := range work {
				r.loadOne(ctx, i)
			}
		})
	}
send:
	for _, i := range order {
		select {
		case work <- i:
		case <-ctx.Done():
			break send
		}
	}
	close(work)
	wg.Wait()
}

// loadOne runs prompt i under load and checks the outcome: an over-long
// prompt must be refused with the prompt-too-long error; any other must
// match its reference and hold no other tenant's marker.
func (r *run) loadOne(ctx context.Context, i int) {
	p := r.prompts[i]
	res, err := r.cfg.Tenants[p.tenant].Client.Run(ctx, r.cfg.Model, request(p.text, r.cfg.MaxTokens, p.lora))
	switch {
	case p.oversize:
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Status == 413 && apiErr.Code == 3006 {
			r.note(p.tenant, func(t *TenantReport) { t.Oversize++; t.OversizeRefused++ }, "")
		} else {
			r.note(p.tenant, func(t *TenantReport) { t.Oversize++ }, fmt.Sprintf("over-long %s was not refused with 413/3006: %v", p.marker, err))
		}
	case err != nil:
		if ctx.Err() == nil {
			r.note(p.tenant, func(t *TenantReport) { t.Errors++ }, fmt.Sprintf("%s: %v", p.marker, err))
		}
	default:
		ref, ok := r.reference(i)
		if !ok {
			return // its reference failed; already counted
		}
		problem := ""
		if res.Response != ref {
			problem = fmt.Sprintf("%s under load: %q, alone: %q", p.marker, res.Response, ref)
		}
		r.note(p.tenant, func(t *TenantReport) {
			t.Checked++
			if problem != "" {
				t.Differ++
			}
		}, problem)
		r.checkLeak(i, res.Response)
	}
}

// checkLeak counts a response to prompt i that holds another tenant's
// marker.
func (r *run) checkLeak(i int, response string) {
	own := r.prompts[i].tenant
	for _, q := range r.prompts {
		if q.tenant != own && strings.Contains(response, q.marker) {
			r.note(own, func(t *TenantReport) { t.Leaks++ }, fmt.Sprintf("response to %s holds another tenant's marker %s", r.prompts[i].marker, q.marker))
			return
		}
	}
}

func request(text string, maxTokens int, lora string) client.RunRequest {
	zero := 0.0
	return client.RunRequest{Prompt: text, Raw: true, MaxTokens: maxTokens, Temperature: &zero, Lora: lora}
}

// contextWindow reads the model's advertised context window.
func contextWindow(ctx context.Context, c *client.Client, model string) (int, error) {
	models, err := c.Models(ctx)
	if err != nil {
		return 0, fmt.Errorf("canary: listing models: %w", err)
	}
	for _, m := range models {
		if m.ID == model {
			if m.ContextWindow < 1 {
				return 0, fmt.Errorf("canary: model %s advertises no context window", model)
			}
			return m.ContextWindow, nil
		}
	}
	return 0, fmt.Errorf("canary: model %s is not served to the canary tenant", model)
}

// makePrompts builds Requests prompts spread over the tenants: a share
// longer than the window, the rest of varied lengths, some just under the
// window. Each carries a marker unique to its tenant and index.
func makePrompts(cfg Config, window int, charsPerToken float64) []prompt {
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	oversize := int(float64(cfg.Requests) * cfg.OversizeFraction)
	budget := window - cfg.MaxTokens // prompt tokens that fit with the completion
	out := make([]prompt, cfg.Requests)
	for i := range out {
		t := i % len(cfg.Tenants)
		marker := fmt.Sprintf("zq%dx%dq", t, i) // delimited: no marker contains another
		var tokens int
		switch {
		case i < oversize:
			tokens = window + window/2
		case i%5 == 0:
			tokens = budget * 85 / 100 // just under the window (the size is estimated)
		default:
			tokens = 8 + rng.IntN(max(1, budget/4))
		}
		chars := max(len(marker)+1, int(float64(tokens)*charsPerToken))
		out[i] = prompt{tenant: t, marker: marker, oversize: i < oversize,
			text: marker + " " + filler(rng, chars-len(marker)-1) + " " + marker}
	}
	return out
}

var words = strings.Fields("the a little dog cat girl boy sun tree park ball happy sad big red blue ran jumped saw played with in on and was very")

// filler returns about n characters of simple story words.
func filler(rng *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.String()
}
