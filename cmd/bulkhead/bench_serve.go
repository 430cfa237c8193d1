package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// streamStats is what one streaming request saw.
type streamStats struct {
	start, first, end time.Time
	gaps              []time.Duration // between successive text events after the first
	tokens            int             // completion tokens, from the final usage (or text events)
	err               error
}

// runBenchServe is `bulkhead bench serve`: N concurrent streaming generations
// against a running edge, reporting aggregate tokens/s, time to first token
// and inter-token latency percentiles.
func runBenchServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench serve", stderr)
	edgeURL := fs.String("edge", "", "edge base URL, e.g. http://127.0.0.1:8787")
	token := fs.String("token", os.Getenv("BULKHEAD_TOKEN"), "bearer token (default $BULKHEAD_TOKEN)")
	model := fs.String("model", "@cf/tinyllamas/stories260k", "model name")
	streams := fs.Int("streams", 16, "concurrent streaming requests")
	promptTokens := fs.Int("prompt-tokens", 128, "approximate prompt length in tokens (one short word each)")
	genTokens := fs.Int("gen-tokens", 128, "max_tokens of each request")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit on the whole run")
	asJSON := fs.Bool("json", false, "print the figures as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "edge"); err != nil {
		return err
	}
	if *streams < 1 || *promptTokens < 1 || *genTokens < 1 {
		return fmt.Errorf("%w: need --streams, --prompt-tokens and --gen-tokens >= 1", errUsage)
	}
	if *token == "" {
		return fmt.Errorf("%w: give --token or set BULKHEAD_TOKEN", errUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	body, err := json.Marshal(map[string]any{
		"prompt": strings.Repeat(" the", *promptTokens), "raw": true, "stream": true,
		"max_tokens": *genTokens, "temperature": 0,
	})
	if err != nil {
		return err
	}
	url := strings.TrimRight(*edgeURL, "/") + "/ai/run/" + *model
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *streams}}
	stats := make([]streamStats, *streams)
	var wg sync.WaitGroup
	for i := range stats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i] = streamOnce(ctx, client, url, *token, body)
		}()
	}
	wg.Wait()

	var first, last time.Time
	var ttft, itl []time.Duration
	total := 0
	for i, s := range stats {
		if s.err != nil {
			return fmt.Errorf("stream %d: %w", i, s.err)
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
	out := map[string]any{
		"streams": *streams, "prompt_tokens": *promptTokens, "gen_tokens": *genTokens, "model": *model,
		"completion_tokens":      total,
		"aggregate_tokens_per_s": float64(total) / last.Sub(first).Seconds(),
		"ttft_ms":                percentiles(ttft, ms),
		"itl_ms":                 percentiles(itl, ms),
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	t, i := out["ttft_ms"].(map[string]float64), out["itl_ms"].(map[string]float64)
	_, err = fmt.Fprintf(stdout, "%d streams: %.1f tokens/s aggregate (%d tokens); time to first token p50 %.0f p90 %.0f p99 %.0f ms; inter-token p50 %.1f p90 %.1f p99 %.1f ms\n",
		*streams, out["aggregate_tokens_per_s"], total, t["p50"], t["p90"], t["p99"], i["p50"], i["p90"], i["p99"])
	return err
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
