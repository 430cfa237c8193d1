package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/bulkhead-ai/bulkhead/workers/bench"
)

// runBenchServe is `bulkhead bench serve`: N concurrent streaming generations
// against a running edge, reporting aggregate tokens/s, time to first token
// and inter-token latency percentiles (the method is bench.Serve).
func runBenchServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg bench.ServeConfig
	fs := newFlags("bench serve", stderr)
	fs.StringVar(&cfg.Edge, "edge", "", "edge base URL, e.g. http://127.0.0.1:8787")
	fs.StringVar(&cfg.Token, "token", os.Getenv("BULKHEAD_TOKEN"), "bearer token (default $BULKHEAD_TOKEN)")
	fs.StringVar(&cfg.Model, "model", "@cf/tinyllamas/stories260k", "model name")
	fs.IntVar(&cfg.Streams, "streams", 16, "concurrent streaming requests")
	fs.IntVar(&cfg.PromptTokens, "prompt-tokens", 128, "approximate prompt length in tokens (one short word each)")
	fs.IntVar(&cfg.GenTokens, "gen-tokens", 128, "max_tokens of each request")
	fs.BoolVar(&cfg.Speculate, "speculate", false, "leave speculative decoding on (its prompt repeats one word, which drafting copies)")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit on the whole run")
	asJSON := fs.Bool("json", false, "print the figures as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "edge"); err != nil {
		return err
	}
	if cfg.Streams < 1 || cfg.PromptTokens < 1 || cfg.GenTokens < 1 {
		return fmt.Errorf("%w: need --streams, --prompt-tokens and --gen-tokens >= 1", errUsage)
	}
	if cfg.Token == "" {
		return fmt.Errorf("%w: give --token or set BULKHEAD_TOKEN", errUsage)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := bench.Serve(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	t, i := res.TTFT, res.ITL
	_, err = fmt.Fprintf(stdout, "%d streams: %.1f tokens/s aggregate (%d tokens); time to first token p50 %.0f p90 %.0f p99 %.0f ms; inter-token p50 %.1f p90 %.1f p99 %.1f ms\n",
		cfg.Streams, res.Aggregate, res.CompletionTokens, t["p50"], t["p90"], t["p99"], i["p50"], i["p90"], i["p99"])
	if err == nil && res.DraftedTokens > 0 {
		_, err = fmt.Fprintf(stdout, "drafted %d tokens, %.0f%% accepted\n", res.DraftedTokens, 100*res.DraftAcceptance)
	}
	return err
}
