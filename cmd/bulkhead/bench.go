package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

var benchOwner = kvcache.Owner{Namespace: "bench", Request: "bench"}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		return runBenchServe(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "engine" {
		return fmt.Errorf("%w: bulkhead bench engine --model FILE [flags], or bench serve --edge URL [flags]", errUsage)
	}
	fs := newFlags("bench engine", stderr)
	model := fs.String("model", "", "GGUF model file")
	threads := fs.Int("threads", 0, "kernel threads (0: all cores)")
	promptTokens := fs.Int("prompt-tokens", 512, "prompt length in tokens")
	genTokens := fs.Int("gen-tokens", 128, "tokens generated per sequence")
	batch := fs.Int("batch", 1, "sequences run at once")
	decodePrompt := fs.Int("decode-prompt-tokens", -1, "prompt length of the decode sequences (-1: --prompt-tokens; 1 measures decode from an empty context, as llama-bench's tg)")
	asJSON := fs.Bool("json", false, "print the figures as one JSON object")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if err := require(fs, "model"); err != nil {
		return err
	}
	if *decodePrompt < 0 {
		*decodePrompt = *promptTokens
	}
	if *promptTokens < 1 || *genTokens < 2 || *batch < 1 || *decodePrompt < 1 {
		return fmt.Errorf("%w: need --prompt-tokens >= 1, --gen-tokens >= 2, --batch >= 1, --decode-prompt-tokens >= 1", errUsage)
	}
	m, err := engine.Load(*model)
	if err != nil {
		return err
	}
	defer m.Close()
	perSeq := *promptTokens + *genTokens
	window := max(perSeq, m.Hyper.Context)
	eng, err := engine.New(slog.New(slog.NewTextHandler(stderr, nil)), m, engine.Config{
		Threads: *threads, Context: window, KVTokens: max(window, perSeq**batch),
		MaxBatch: *batch, QueueSize: *batch, ChunkSize: *promptTokens,
	})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() { eng.Close(); <-done }()

	rng := rand.New(rand.NewPCG(1, 2))
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(3 + rng.IntN(m.Hyper.Vocab-3))
		}
		return p
	}
	// Read bandwidth on the engine's thread count, before any sequence runs,
	// over a buffer the size of the weights a decode step streams (at least
	// 64 MiB), so it comes from the memory level the weights come from.
	bwPool := kernels.NewPool(eng.Threads())
	bandwidth := bwPool.ReadBandwidth(make([]byte, max(64<<20, m.DecodeBytes())), 5)
	bwPool.Close()

	// Warm up the kernels and page in the weights.
	if _, err := eng.Generate(ctx, engine.Request{Owner: benchOwner, Prompt: prompt(min(16, *promptTokens)), MaxTokens: 2, IgnoreEOS: true}); err != nil {
		return err
	}

	// Prefill: one sequence, the whole prompt in one step; time to first token.
	start := time.Now()
	if _, err := eng.Generate(ctx, engine.Request{Owner: benchOwner, Prompt: prompt(*promptTokens), MaxTokens: 1, IgnoreEOS: true}); err != nil {
		return err
	}
	prefill := time.Since(start)

	// Decode: batch sequences at once. Sequences reach their first token at
	// different steps, so the figure counts tokens emitted after the last
	// sequence's first token, over the time from then to the end.
	stamps := make([][]time.Time, *batch)
	errs := make([]error, *batch)
	var wg sync.WaitGroup
	for b := range *batch {
		req := engine.Request{Owner: benchOwner, Prompt: prompt(*decodePrompt), MaxTokens: *genTokens, IgnoreEOS: true, Sampling: sample.Params{}}
		events, err := eng.Submit(ctx, req)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range events {
				switch {
				case ev.Err != nil:
					errs[b] = ev.Err
				case !ev.Done:
					stamps[b] = append(stamps[b], time.Now())
				}
			}
		}()
	}
	wg.Wait()
	var first, last time.Time
	for b, st := range stamps {
		if errs[b] != nil {
			return errs[b]
		}
		if st[0].After(first) {
			first = st[0]
		}
		if st[len(st)-1].After(last) {
			last = st[len(st)-1]
		}
	}
	decoded := 0
	for _, st := range stamps {
		for _, t := range st {
			if t.After(first) {
				decoded++
			}
		}
	}
	aggregate := float64(decoded) / last.Sub(first).Seconds()
	out := map[string]any{
		"model":                m.Name,
		"threads":              eng.Threads(),
		"kernels":              eng.Kernels(),
		"prompt_tokens":        *promptTokens,
		"gen_tokens":           *genTokens,
		"decode_prompt_tokens": *decodePrompt,
		"batch":                *batch,
		"prefill_tokens_per_s": float64(*promptTokens) / prefill.Seconds(),
		"decode_tokens_per_s":  aggregate / float64(*batch),
	}
	if *batch > 1 {
		out["aggregate_tokens_per_s"] = aggregate
	}
	// Decode streams every weight once per step: at batch 1 the bound is
	// bandwidth / bytes per token.
	wb := m.DecodeBytes()
	out["read_bandwidth_gb_per_s"] = bandwidth / 1e9
	out["decode_weight_bytes_per_token"] = wb
	out["decode_bound_tokens_per_s"] = bandwidth / float64(wb)
	out["decode_share_of_bound"] = aggregate / float64(*batch) / (bandwidth / float64(wb))
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	fmt.Fprintf(stdout, "prefill %.1f tokens/s (%d tokens), decode %.1f tokens/s per sequence",
		out["prefill_tokens_per_s"], *promptTokens, out["decode_tokens_per_s"])
	if *batch > 1 {
		fmt.Fprintf(stdout, ", %.1f tokens/s across %d sequences", aggregate, *batch)
	}
	_, err = fmt.Fprintln(stdout)
	return err
}
