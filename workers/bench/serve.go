package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// ServeConfig sizes a serving benchmark: Streams concurrent streaming
// generations against a running edge's native API.
type ServeConfig struct {
	Edge         string // edge base URL, e.g. http://127.0.0.1:8787
	Token        string // bearer token
	Model        string
	Streams      int // concurrent streaming requests; at least 1
	PromptTokens int // approximate prompt length (one short word a token); at least 1
	GenTokens    int // max_tokens of each request; at least 1
	// Speculate leaves speculative decoding on. Off by default: the
	// prompt repeats one word, which drafting would copy.
	Speculate bool
}

// Validate reports a configuration that cannot be measured.
func (c ServeConfig) Validate() error {
	switch {
	case c.Edge == "" || c.Token == "" || c.Model == "":
		return fmt.Errorf("%w: Edge, Token and Model are required", ErrConfig)
	case c.Streams < 1 || c.PromptTokens < 1 || c.GenTokens < 1:
		return fmt.Errorf("%w: need Streams, PromptTokens and GenTokens >= 1 (have %d, %d, %d)", ErrConfig, c.Streams, c.PromptTokens, c.GenTokens)
	}
	return nil
}

// ServeResult is what a serving benchmark measured. Its JSON is the output
// of `bulkhead bench serve --json` (fields in name order).
type ServeResult struct {
	Aggregate        float64 `json:"aggregate_tokens_per_s"` // all streams' completion tokens over the run's span
	CompletionTokens int     `json:"completion_tokens"`
	// DraftAcceptance is the share of drafted tokens the model's workers
	// accepted during the run, and DraftedTokens how many they drafted,
	// read from the edge's /metrics where it serves the workers' too (dev);
	// absent otherwise or without drafts.
	DraftAcceptance float64            `json:"draft_acceptance,omitempty"`
	DraftedTokens   int                `json:"drafted_tokens,omitempty"`
	GenTokens       int                `json:"gen_tokens"`
	ITL             map[string]float64 `json:"itl_ms"` // inter-token latency p50, p90, p99
	Model           string             `json:"model"`
	PromptTokens    int                `json:"prompt_tokens"`
	Streams         int                `json:"streams"`
	TTFT            map[string]float64 `json:"ttft_ms"` // time to first token p50, p90, p99
}

// Serve runs cfg.Streams streaming generations at once and times their
// server-sent events. A refused or broken stream is an error, not a figure.
func Serve(ctx context.Context, cfg ServeConfig) (*ServeResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Every stream sends the same prompt: cache_prefix false makes each
	// compute its prefill rather than attach the first one's from the
	// tenant's prefix cache, which the edge turns on by default.
	body, err := json.Marshal(map[string]any{
		"prompt": strings.Repeat(" the", cfg.PromptTokens), "raw": true, "stream": true,
		"max_tokens": cfg.GenTokens, "temperature": 0, "cache_prefix": false, "speculate": cfg.Speculate,
	})
	if err != nil {
		return nil, err
	}
	url := strings.TrimRight(cfg.Edge, "/") + "/ai/run/" + cfg.Model
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Streams}}
	metrics := strings.TrimRight(cfg.Edge, "/") + "/metrics"
	acc0, rej0 := draftCounts(ctx, client, metrics, cfg.Model)
	stats := make([]streamStats, cfg.Streams)
	var wg sync.WaitGroup
	for i := range stats {
		wg.Go(func() { stats[i] = streamOnce(ctx, client, url, cfg.Token, body) })
	}
	wg.Wait()
	res, err := summarize(cfg, stats)
	if err != nil {
		return nil, err
	}
	acc1, rej1 := draftCounts(ctx, client, metrics, cfg.Model)
	if d := (acc1 - acc0) + (rej1 - rej0); d > 0 {
		res.DraftedTokens = int(d)
		res.DraftAcceptance = (acc1 - acc0) / d
	}
	return res, nil
}

// draftCounts sums model's accepted and rejected drafted tokens over the
// workers in the Prometheus text at url (bulkhead_worker_draft_tokens_total);
// zeros when it cannot be read.
func draftCounts(ctx context.Context, client *http.Client, url, model string) (accepted, rejected float64) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		labels, ok := strings.CutPrefix(line, "bulkhead_worker_draft_tokens_total{")
		if !ok || !strings.Contains(labels, `model="`+model+`"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			continue
		}
		switch {
		case strings.Contains(labels, `outcome="accepted"`):
			accepted += v
		case strings.Contains(labels, `outcome="rejected"`):
			rejected += v
		}
	}
	return accepted, rejected
}

// summarize turns the streams' timings into the result.
func summarize(cfg ServeConfig, stats []streamStats) (*ServeResult, error) {
	var first, last time.Time
	var ttft, itl []time.Duration
	total := 0
	for i, s := range stats {
		if s.err != nil {
			return nil, fmt.Errorf("stream %d: %w", i, s.err)
		}
		if first.IsZero() || s.start.Before(first) {
			first = s.start
		}
		if s.end.After(last) {
			last = s.end
		}
		total += s.tokens
		ttft = append(ttft, s.first.Sub(s.start))
		itl = append(itl, s.gaps...)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return &ServeResult{
		Streams: cfg.Streams, PromptTokens: cfg.PromptTokens, GenTokens: cfg.GenTokens, Model: cfg.Model,
		CompletionTokens: total,
		Aggregate:        float64(total) / last.Sub(first).Seconds(),
		TTFT:             percentiles(ttft, ms),
		ITL:              percentiles(itl, ms),
	}, nil
}

// streamStats is what one streaming request saw.
type streamStats struct {
	start, first, end time.Time
	gaps              []time.Duration // between successive text events after the first
	tokens            int             // completion tokens, from the final usage (or text events)
	err               error
}

// percentiles returns p50, p90 and p99 of ds (nearest rank), in the unit f gives.
func percentiles(ds []time.Duration, f func(time.Duration) float64) map[string]float64 {
	out := map[string]float64{"p50": 0, "p90": 0, "p99": 0}
	if len(ds) == 0 {
		return out
	}
	slices.Sort(ds)
	at := func(p float64) float64 { return f(ds[min(len(ds)-1, int(p*float64(len(ds))))]) }
	out["p50"], out["p90"], out["p99"] = at(0.50), at(0.90), at(0.99)
	return out
}

// streamOnce sends one streaming generation and times its server-sent events.
func streamOnce(ctx context.Context, client *http.Client, url, token string, body []byte) (s streamStats) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return streamStats{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	s.start = time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return streamStats{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return streamStats{err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var prev time.Time
	events, usage := 0, -1
	errEvent := false
	for sc.Scan() {
		line := sc.Text()
		if line == "event: error" {
			errEvent = true
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if errEvent {
			return streamStats{err: fmt.Errorf("error event: %s", data)}
		}
		if data == "[DONE]" {
			s.end = time.Now()
			break
		}
		var ev struct {
			Response string `json:"response"`
			Usage    *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return streamStats{err: fmt.Errorf("bad event %q: %w", data, err)}
		}
		if ev.Usage != nil {
			usage = ev.Usage.CompletionTokens
		}
		if ev.Response == "" {
			continue
		}
		now := time.Now()
		if events == 0 {
			s.first = now
		} else {
			s.gaps = append(s.gaps, now.Sub(prev))
		}
		prev = now
		events++
	}
	if err := sc.Err(); err != nil {
		return streamStats{err: err}
	}
	if s.end.IsZero() {
		return streamStats{err: fmt.Errorf("stream ended without [DONE]")}
	}
	if events == 0 {
		s.first = s.end
	}
	s.tokens = events
	if usage >= 0 {
		s.tokens = usage
	}
	return s
}
