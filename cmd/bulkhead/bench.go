package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/bulkhead-ai/bulkhead/workers/bench"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		return runBenchServe(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "embed" {
		return runBenchEmbed(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "speculate" {
		return runBenchSpeculate(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "engine" {
		return fmt.Errorf("%w: bulkhead bench engine --model FILE [flags], bench speculate --model FILE [flags], bench embed --model FILE [flags], or bench serve --edge URL [flags]", errUsage)
	}
	fs := newFlags("bench engine", stderr)
	model := fs.String("model", "", "GGUF model file")
	var cfg bench.Config
	fs.IntVar(&cfg.Threads, "threads", 0, "kernel threads (0: all cores)")
	fs.IntVar(&cfg.PromptTokens, "prompt-tokens", 512, "prompt length in tokens")
	fs.IntVar(&cfg.GenTokens, "gen-tokens", 128, "tokens generated per sequence")
	fs.IntVar(&cfg.Batch, "batch", 1, "sequences run at once")
	fs.IntVar(&cfg.DecodePromptTokens, "decode-prompt-tokens", -1, "prompt length of the decode sequences (-1: --prompt-tokens; 1 measures decode from an empty context, as llama-bench's tg)")
	kvType := fs.String("kv-type", "f16", "KV cache element type: f16, q8_0 or q4_0")
	asJSON := fs.Bool("json", false, "print the figures as one JSON object")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if err := require(fs, "model"); err != nil {
		return err
	}
	if cfg.DecodePromptTokens < 0 {
		cfg.DecodePromptTokens = cfg.PromptTokens
	}
	var err error
	if cfg.KVType, err = kvcache.ParseDType(*kvType); err != nil {
		return fmt.Errorf("%w: --kv-type %q must be f16, q8_0 or q4_0", errUsage, *kvType)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: need --prompt-tokens >= 1, --gen-tokens >= 2, --batch >= 1, --decode-prompt-tokens >= 1", errUsage)
	}
	m, err := engine.Load(*model)
	if err != nil {
		return err
	}
	defer m.Close()
	res, err := bench.Engine(ctx, slog.New(slog.NewTextHandler(stderr, nil)), m, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "prefill %.1f tokens/s (%d tokens), decode %.1f tokens/s per sequence", res.Prefill, cfg.PromptTokens, res.Decode)
	if cfg.Batch > 1 {
		fmt.Fprintf(stdout, ", %.1f tokens/s across %d sequences", res.Aggregate, cfg.Batch)
	}
	_, err = fmt.Fprintf(stdout, " (kernels %s, AMX %s)\n", res.Kernels, res.AMX)
	return err
}

// runBenchEmbed measures an encoder's inputs/s over passes of --inputs
// inputs of --tokens tokens.
func runBenchEmbed(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench embed", stderr)
	model := fs.String("model", "", "GGUF embedding model file (an encoder, or a causal model with a pooling type)")
	var cfg bench.EncodeConfig
	fs.IntVar(&cfg.Threads, "threads", 0, "kernel threads (0: all cores)")
	fs.IntVar(&cfg.Inputs, "inputs", 32, "inputs per pass (a request's batch)")
	fs.IntVar(&cfg.Tokens, "tokens", 128, "tokens per input, special tokens included")
	fs.IntVar(&cfg.Reps, "reps", 3, "measured passes at least")
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Second, "measure for at least this long")
	asJSON := fs.Bool("json", false, "print the figures as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "model"); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: need --inputs >= 1, --tokens >= 2, --reps >= 1", errUsage)
	}
	r, err := openEmbedder(*model, "", cfg.Threads)
	if err != nil {
		return err
	}
	defer r.close()
	res, err := bench.Encode(r.passer, r.info, r.threads, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	_, err = fmt.Fprintf(stdout, "%.1f inputs/s, %.0f tokens/s (%d inputs of %d tokens a pass, %.1f ms a pass, %d passes)\n",
		res.InputsPerSec, res.TokensPerSec, res.Inputs, res.Tokens, res.PassMillis, res.Passes)
	return err
}

// runBenchSpeculate measures decode at batch 1 with speculative decoding
// off and on (bench.Speculation).
func runBenchSpeculate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench speculate", stderr)
	model := fs.String("model", "", "GGUF model file")
	prompt := fs.String("prompt", "", "the free workload's prompt, as text (default: random tokens)")
	var cfg bench.SpecConfig
	fs.IntVar(&cfg.Threads, "threads", 0, "kernel threads (0: all cores)")
	fs.IntVar(&cfg.PromptTokens, "prompt-tokens", 64, "random prompt length in tokens (without --prompt)")
	fs.IntVar(&cfg.GenTokens, "gen-tokens", 128, "tokens generated per request")
	fs.IntVar(&cfg.Reps, "reps", 2, "runs of each workload with drafting off and on, alternated")
	fs.IntVar(&cfg.EditEvery, "edit-every", 16, "the predicted workload changes every N-th token of the plain output")
	asJSON := fs.Bool("json", false, "print the figures as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "model"); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	m, err := engine.Load(*model)
	if err != nil {
		return err
	}
	defer m.Close()
	if *prompt != "" {
		cfg.Prompts = [][]int32{m.Tokenizer.Encode(*prompt, true, false)}
	}
	res, err := bench.Speculation(ctx, slog.New(slog.NewTextHandler(stderr, nil)), m, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	for _, w := range res.Workloads {
		fmt.Fprintf(stdout, "%-9s plain %.1f tokens/s, drafting %.1f (%.2fx); %d of %d drafts accepted (%.0f%%)\n",
			w.Name, w.Plain, w.Drafting, w.Speedup, w.Accepted, w.Drafted, 100*w.Acceptance)
	}
	return nil
}
