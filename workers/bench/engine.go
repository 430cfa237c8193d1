package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// ErrConfig reports a benchmark configuration that cannot run.
var ErrConfig = errors.New("bench: invalid config")

// owner is the KV owner of every benchmark sequence.
var owner = kvcache.Owner{Namespace: "bench", Request: "bench"}

// Config sizes an engine benchmark.
type Config struct {
	Threads            int // kernel threads; 0: all cores
	PromptTokens       int // prefill prompt length; at least 1
	GenTokens          int // tokens generated per decode sequence; at least 2
	Batch              int // decode sequences run at once; at least 1
	DecodePromptTokens int // prompt length of the decode sequences; at least 1
	// KVType is the KV cache's element type ("": F16).
	KVType kvcache.DType
}

// Validate reports a configuration that cannot be measured.
func (c Config) Validate() error {
	switch {
	case c.Threads < 0:
		return fmt.Errorf("%w: Threads %d", ErrConfig, c.Threads)
	case c.PromptTokens < 1, c.GenTokens < 2, c.Batch < 1, c.DecodePromptTokens < 1:
		return fmt.Errorf("%w: need PromptTokens >= 1, GenTokens >= 2, Batch >= 1, DecodePromptTokens >= 1 (have %d, %d, %d, %d)",
			ErrConfig, c.PromptTokens, c.GenTokens, c.Batch, c.DecodePromptTokens)
	}
	return nil
}

// Result is what an engine benchmark measured. Its JSON is the output of
// `bulkhead bench engine --json` (fields in name order).
type Result struct {
	Aggregate           float64 `json:"aggregate_tokens_per_s,omitempty"` // all decode sequences together; Batch > 1 only
	AMX                 string  `json:"amx"`                              // kernels.AMX: "on", or off and why
	Batch               int     `json:"batch"`
	DecodeBound         float64 `json:"decode_bound_tokens_per_s"` // read bandwidth / bytes per token
	DecodePromptTokens  int     `json:"decode_prompt_tokens"`
	DecodeShareOfBound  float64 `json:"decode_share_of_bound"`
	Decode              float64 `json:"decode_tokens_per_s"` // per sequence
	DecodeBytesPerToken int     `json:"decode_weight_bytes_per_token"`
	GenTokens           int     `json:"gen_tokens"`
	Kernels             string  `json:"kernels"`
	KVPoolBytes         int64   `json:"kv_pool_bytes"`
	KVPoolTokens        int     `json:"kv_pool_tokens"` // what the run needs, not the model's trained context
	KVType              string  `json:"kv_type"`        // the KV cache's element type
	Model               string  `json:"model"`
	ModelFileBytes      int64   `json:"model_file_bytes"`
	// PeakResident is the process's peak resident memory (VmHWM; 0 where
	// the system does not say), load included; ResidentRatio is it over the
	// model file and the KV pool together.
	PeakResident    int64   `json:"peak_resident_bytes"`
	Prefill         float64 `json:"prefill_tokens_per_s"`
	PromptTokens    int     `json:"prompt_tokens"`
	ReadBandwidthGB float64 `json:"read_bandwidth_gb_per_s"`
	ResidentRatio   float64 `json:"resident_ratio,omitempty"`
	Threads         int     `json:"threads"`
}

// Engine measures m on an engine of its own, sized for cfg, and closes the
// engine before it returns. log is the engine's logger.
func Engine(ctx context.Context, log *slog.Logger, m *engine.Model, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The window and the KV pool are what the run needs, not the model's
	// trained context (131,072 tokens for the llama-3.2 shapes: 4 GiB of KV
	// at 1B, faulted in at start): the longest sequence it runs (the warm-up,
	// the prefill, a decode sequence), and room for every decode sequence at
	// once, in whole pages.
	window := max(warmupTokens+2, cfg.PromptTokens+1, cfg.DecodePromptTokens+cfg.GenTokens)
	page := kvcache.DefaultPageSize
	eng, err := engine.New(log, m, engine.Config{
		Threads: cfg.Threads, Context: window, KVTokens: cfg.Batch * (window + page - 1) / page * page,
		MaxBatch: cfg.Batch, QueueSize: cfg.Batch, KVType: cfg.KVType,
		Draft: -1, // plain decoding, as llama-bench's tg: bench speculate measures drafting
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() { eng.Close(); <-done }()
	return measure(ctx, eng, cfg)
}

// warmupTokens is the warm-up request's prompt at most.
const warmupTokens = 16

// measure runs the benchmark on a running engine.
func measure(ctx context.Context, eng *engine.Engine, cfg Config) (*Result, error) {
	m := eng.Model()
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(3 + rng.IntN(m.Hyper.Vocab-3))
		}
		return p
	}
	// Read bandwidth on the engine's thread count, before any sequence runs,
	// over the weights a decode step streams: the memory they live in, and
	// they are paged in for the warm-up.
	bwPool := kernels.NewPool(eng.Threads())
	bandwidth := bwPool.ReadBandwidth(m.DecodeWeights(), 5)
	bwPool.Close()

	// Warm up the kernels.
	if _, err := eng.Generate(ctx, engine.Request{Owner: owner, Prompt: prompt(min(warmupTokens, cfg.PromptTokens)), MaxTokens: 2, IgnoreEOS: true}); err != nil {
		return nil, err
	}
	prefill, err := timePrefill(ctx, eng, prompt(cfg.PromptTokens))
	if err != nil {
		return nil, err
	}
	prompts := make([][]int32, cfg.Batch)
	for b := range prompts {
		prompts[b] = prompt(cfg.DecodePromptTokens)
	}
	aggregate, err := decodeRate(ctx, eng, prompts, cfg.GenTokens)
	if err != nil {
		return nil, err
	}
	// Decode streams every weight once per step: at batch 1 the bound is
	// bandwidth / bytes per token.
	wb := m.DecodeBytes()
	res := &Result{
		Model: m.Name, Threads: eng.Threads(), Kernels: eng.Kernels(), AMX: kernels.AMX(), KVPoolTokens: eng.KV().TotalPages() * eng.KV().PageSize(),
		PromptTokens: cfg.PromptTokens, GenTokens: cfg.GenTokens, DecodePromptTokens: cfg.DecodePromptTokens, Batch: cfg.Batch,
		Prefill: float64(cfg.PromptTokens) / prefill.Seconds(),
		Decode:  aggregate / float64(cfg.Batch),

		ReadBandwidthGB: bandwidth / 1e9, DecodeBytesPerToken: wb, DecodeBound: bandwidth / float64(wb),
	}
	res.DecodeShareOfBound = res.Decode / res.DecodeBound
	res.KVPoolBytes = int64(eng.KV().TotalPages()) * eng.KV().BytesPerPage()
	res.KVType = string(eng.KV().Config().DType)
	res.ModelFileBytes = m.FileBytes()
	if res.PeakResident = peakResident(); res.PeakResident > 0 {
		res.ResidentRatio = float64(res.PeakResident) / float64(res.ModelFileBytes+res.KVPoolBytes)
	}
	if cfg.Batch > 1 {
		res.Aggregate = aggregate
	}
	return res, nil
}

// timePrefill is one sequence, its prompt in the engine's default chunks (as a
// serving worker takes it): the time to its first token.
func timePrefill(ctx context.Context, eng *engine.Engine, prompt []int32) (time.Duration, error) {
	start := time.Now()
	if _, err := eng.Generate(ctx, engine.Request{Owner: owner, Prompt: prompt, MaxTokens: 1, IgnoreEOS: true}); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// decodeRate runs one sequence per prompt at once, genTokens each, and
// returns the tokens per second of all of them together. Sequences reach
// their first token at different steps, so it counts tokens emitted after the
// last sequence's first token, over the time from then to the end.
func decodeRate(ctx context.Context, eng *engine.Engine, prompts [][]int32, genTokens int) (float64, error) {
	stamps := make([][]time.Time, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for b, p := range prompts {
		events, err := eng.Submit(ctx, engine.Request{Owner: owner, Prompt: p, MaxTokens: genTokens, IgnoreEOS: true})
		if err != nil {
			wg.Wait()
			return 0, err
		}
		wg.Go(func() {
			for ev := range events {
				switch {
				case ev.Err != nil:
					errs[b] = ev.Err
				case !ev.Done:
					stamps[b] = append(stamps[b], time.Now())
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	var first, last time.Time
	for _, st := range stamps {
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
	return float64(decoded) / last.Sub(first).Seconds(), nil
}

// peakResident is the process's peak resident set in bytes (Linux's VmHWM),
// or 0 where /proc does not say.
func peakResident() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
