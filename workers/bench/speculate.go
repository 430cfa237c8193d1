package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// SpecConfig sizes a speculative decoding benchmark.
type SpecConfig struct {
	Threads      int // kernel threads; 0: all cores
	PromptTokens int // the random prompts' length; at least 1 without Prompts
	GenTokens    int // tokens generated per request; at least 8
	Reps         int // runs of each workload with drafting off and on, alternated; at least 1
	// EditEvery makes the predicted workload's prediction the plain output
	// with every EditEvery-th token changed (an edit); at least 2.
	EditEvery int
	// Prompts, if set, are the prompts of the free workload instead of
	// random tokens (a real model's text).
	Prompts [][]int32
}

// Validate reports a configuration that cannot be measured.
func (c SpecConfig) Validate() error {
	if c.Threads < 0 || c.PromptTokens < 1 && len(c.Prompts) == 0 || c.GenTokens < 8 || c.Reps < 1 || c.EditEvery < 2 {
		return fmt.Errorf("%w: need Threads >= 0, PromptTokens >= 1, GenTokens >= 8, Reps >= 1, EditEvery >= 2 (have %d, %d, %d, %d, %d)",
			ErrConfig, c.Threads, c.PromptTokens, c.GenTokens, c.Reps, c.EditEvery)
	}
	return nil
}

// SpecWorkload is one workload's figures: decode tokens/s at batch 1 with
// drafting off (Plain) and on (Drafting), the best of the runs each, and
// what was drafted and accepted with it on.
type SpecWorkload struct {
	Name       string  `json:"name"`
	Plain      float64 `json:"plain_tokens_per_s"`
	Drafting   float64 `json:"drafting_tokens_per_s"`
	Speedup    float64 `json:"speedup"`
	Drafted    int     `json:"drafted_tokens"`
	Accepted   int     `json:"accepted_tokens"`
	Acceptance float64 `json:"acceptance"` // accepted / drafted
	Generated  int     `json:"generated_tokens"`
}

// SpecResult is `bulkhead bench speculate --json`.
type SpecResult struct {
	Model     string         `json:"model"`
	Kernels   string         `json:"kernels"`
	Threads   int            `json:"threads"`
	Workloads []SpecWorkload `json:"workloads"`
}

// Speculation measures decode at batch 1 with drafting off and on, on two
// engines over m, for three workloads: free (greedy from the prompts,
// nothing given to copy but the sequence's own text), predicted (the same
// requests with a prediction: their plain output with every EditEvery-th
// token changed, as a code edit's) and copy (the prompt, its plain output
// and the prompt again: text a trained model repeats). It checks that
// drafting changed no output.
func Speculation(ctx context.Context, log *slog.Logger, m *engine.Model, cfg SpecConfig) (*SpecResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	prompts := cfg.Prompts
	if len(prompts) == 0 {
		rng := rand.New(rand.NewPCG(3, 4))
		for range 2 {
			p := make([]int32, cfg.PromptTokens)
			for i := range p {
				p[i] = int32(3 + rng.IntN(m.Hyper.Vocab-3))
			}
			prompts = append(prompts, p)
		}
	}
	window := 0
	for _, p := range prompts {
		window = max(window, 2*len(p)+2*cfg.GenTokens) // the copy workload's
	}
	var engines [2]*engine.Engine
	for i, draft := range []int{-1, 0} {
		eng, stop, err := startEngine(ctx, log, m, engine.Config{Threads: cfg.Threads, Context: window, Draft: draft})
		if err != nil {
			return nil, err
		}
		defer stop()
		engines[i] = eng
	}
	plain, drafting := engines[0], engines[1]
	workloads, err := specWorkloads(ctx, plain, prompts, cfg)
	if err != nil {
		return nil, err
	}
	res := &SpecResult{Model: m.Name, Kernels: plain.Kernels(), Threads: plain.Threads()}
	for _, w := range workloads {
		sw := SpecWorkload{Name: w.name}
		for rep := range cfg.Reps {
			for i, r := range w.reqs {
				// Each engine goes first in every other run: this
				// machine's speed drifts.
				for turn := range 2 {
					eng := plain
					if (turn+rep)%2 == 1 {
						eng = drafting
					}
					rate, u, err := timedDecode(ctx, eng, r, w.want[i])
					if err != nil {
						return nil, err
					}
					if eng == plain {
						sw.Plain = max(sw.Plain, rate)
						continue
					}
					sw.Drafting = max(sw.Drafting, rate)
					sw.Drafted += u.DraftedTokens
					sw.Accepted += u.AcceptedTokens
					sw.Generated += u.CompletionTokens
				}
			}
		}
		sw.Speedup = sw.Drafting / sw.Plain
		if sw.Drafted > 0 {
			sw.Acceptance = float64(sw.Accepted) / float64(sw.Drafted)
		}
		res.Workloads = append(res.Workloads, sw)
	}
	return res, nil
}

// startEngine runs an engine of one sequence over m, its pool cfg.Context
// tokens in whole pages, until stop.
func startEngine(ctx context.Context, log *slog.Logger, m *engine.Model, cfg engine.Config) (eng *engine.Engine, stop func(), err error) {
	page := kvcache.DefaultPageSize
	cfg.KVTokens = (cfg.Context + page - 1) / page * page
	cfg.MaxBatch, cfg.QueueSize = 1, 1
	if eng, err = engine.New(log, m, cfg); err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	return eng, func() { eng.Close(); cancel(); <-done }, nil
}

// specWorkload is one workload's requests and the outputs plain decoding
// gives them.
type specWorkload struct {
	name string
	reqs []engine.Request
	want [][]int32
}

// specWorkloads builds the free, predicted and copy workloads from the
// prompts, with their plain outputs from the plain engine.
func specWorkloads(ctx context.Context, plain *engine.Engine, prompts [][]int32, cfg SpecConfig) ([]specWorkload, error) {
	vocab := plain.Model().Hyper.Vocab
	free, predicted, copying := specWorkload{name: "free"}, specWorkload{name: "predicted"}, specWorkload{name: "copy"}
	for _, p := range prompts {
		r := engine.Request{Owner: owner, Prompt: p, MaxTokens: cfg.GenTokens, IgnoreEOS: true}
		out, err := plain.Generate(ctx, r)
		if err != nil {
			return nil, err
		}
		free.reqs, free.want = append(free.reqs, r), append(free.want, out.CompletionTokens)
		pr := r
		pr.Prediction = slices.Clone(out.CompletionTokens)
		for i := cfg.EditEvery - 1; i < len(pr.Prediction); i += cfg.EditEvery {
			pr.Prediction[i] = int32(3 + (int(pr.Prediction[i])+7)%(vocab-3))
		}
		predicted.reqs, predicted.want = append(predicted.reqs, pr), append(predicted.want, out.CompletionTokens)
		// The prompt, its output, the prompt again: a trained model
		// mostly repeats the text it has just seen.
		cr := r
		cr.Prompt = slices.Concat(p, out.CompletionTokens, p)
		again, err := plain.Generate(ctx, cr)
		if err != nil {
			return nil, err
		}
		copying.reqs, copying.want = append(copying.reqs, cr), append(copying.want, again.CompletionTokens)
	}
	return []specWorkload{free, predicted, copying}, nil
}

// timedDecode runs r and returns its decode rate (tokens after the first,
// over the time from the first to the last) and usage; an output other
// than want is an error.
func timedDecode(ctx context.Context, eng *engine.Engine, r engine.Request, want []int32) (float64, engine.Usage, error) {
	events, err := eng.Submit(ctx, r)
	if err != nil {
		return 0, engine.Usage{}, err
	}
	var first, last time.Time
	var got []int32
	var usage engine.Usage
	for ev := range events {
		switch {
		case ev.Err != nil:
			return 0, usage, ev.Err
		case ev.Done:
			usage = ev.Usage
		default:
			last = time.Now()
			if first.IsZero() {
				first = last
			}
			got = append(got, ev.Token)
		}
	}
	if !slices.Equal(got, want) {
		return 0, usage, fmt.Errorf("bench: drafting changed the output of a %d-token prompt", len(r.Prompt))
	}
	return float64(len(got)-1) / last.Sub(first).Seconds(), usage, nil
}
