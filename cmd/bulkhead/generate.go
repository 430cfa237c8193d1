package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// samplingFlags registers the sampling flags shared by commands that generate.
func samplingFlags(fs interface {
	Float64Var(*float64, string, float64, string)
	IntVar(*int, string, int, string)
	Uint64Var(*uint64, string, uint64, string)
}) *sampleFlags {
	s := &sampleFlags{}
	fs.Float64Var(&s.temperature, "temperature", 0.6, "sampling temperature; 0 is greedy")
	fs.IntVar(&s.topK, "top-k", 0, "keep the k most likely tokens (0: off)")
	fs.Float64Var(&s.topP, "top-p", 1, "nucleus sampling probability mass (1: off)")
	fs.Float64Var(&s.minP, "min-p", 0, "drop tokens below min-p times the top probability (0: off)")
	fs.Float64Var(&s.repeat, "repetition-penalty", 1, "penalty for repeated tokens (1: off)")
	fs.Float64Var(&s.freq, "frequency-penalty", 0, "OpenAI frequency penalty")
	fs.Float64Var(&s.presence, "presence-penalty", 0, "OpenAI presence penalty")
	fs.Uint64Var(&s.seed, "seed", 0, "random seed; the same seed and input give the same output")
	return s
}

type sampleFlags struct {
	temperature, topP, minP, repeat, freq, presence float64
	topK                                            int
	seed                                            uint64
}

func (s *sampleFlags) params() sample.Params {
	return sample.Params{
		Temperature: float32(s.temperature), TopK: s.topK, TopP: float32(s.topP), MinP: float32(s.minP),
		RepetitionPenalty: float32(s.repeat), FrequencyPenalty: float32(s.freq), PresencePenalty: float32(s.presence),
		Seed: s.seed,
	}
}

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", stderr)
	model := fs.String("model", "", "GGUF model file")
	prompt := fs.String("prompt", "", "prompt text (raw: no chat template)")
	maxTokens := fs.Int("max-tokens", 256, "tokens to generate at most")
	threads := fs.Int("threads", 0, "kernel threads (0: all cores)")
	ctxLen := fs.Int("context", 0, "context window (0: the model's)")
	asJSON := fs.Bool("json", false, `print one object {"prompt_tokens":[...],"completion_tokens":[...],"text":"..."}`)
	poison := fs.Bool("kv-poison", false, "debug: fill free KV pages with NaN")
	kvType := fs.String("kv-type", "f16", "KV cache element type: f16, q8_0 or q4_0 (llama.cpp's -ctk/-ctv)")
	var loras loraFlags
	fs.Var(&loras, "lora", "LoRA adapter FILE[:SCALE] (a GGUF adapter, or a PEFT directory); repeatable, applied together")
	smp := samplingFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "model", "prompt"); err != nil {
		return err
	}
	if *maxTokens < 1 {
		return fmt.Errorf("%w: --max-tokens must be at least 1", errUsage)
	}
	kvt, err := kvcache.ParseDType(*kvType)
	if err != nil {
		return fmt.Errorf("%w: --kv-type %q must be f16, q8_0 or q4_0", errUsage, *kvType)
	}
	m, err := engine.Load(*model)
	if err != nil {
		return err
	}
	defer m.Close()
	window := *ctxLen
	if window == 0 {
		window = m.Hyper.Context
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	eng, err := engine.New(log, m, engine.Config{
		Threads: *threads, Context: window, KVTokens: window, Poison: *poison, MaxBatch: 1, QueueSize: 1,
		Scrub: kvcache.ScrubOnFree, KVType: kvt,
	})
	if err != nil {
		return err
	}
	defer runEngine(log, eng)()

	ids := m.Tokenizer.Encode(*prompt, true, false)
	adapter, err := loras.load(m)
	if err != nil {
		return err
	}
	req := engine.Request{Prompt: ids, MaxTokens: *maxTokens, Sampling: smp.params(), Adapter: adapter,
		Owner: kvcache.Owner{Namespace: "cli", Request: "generate"}}
	if *asJSON {
		return generateJSON(ctx, eng, req, stdout)
	}
	return generateText(ctx, eng, req, stdout)
}

// generateJSON runs req and prints its prompt and completion tokens, text
// and finish reason as one JSON object.
func generateJSON(ctx context.Context, eng *engine.Engine, req engine.Request, stdout io.Writer) error {
	res, err := eng.Generate(ctx, req)
	if err != nil {
		return err
	}
	out := struct {
		PromptTokens     []int32 `json:"prompt_tokens"`
		CompletionTokens []int32 `json:"completion_tokens"`
		Text             string  `json:"text"`
		Finish           string  `json:"finish_reason"`
	}{res.PromptTokens, res.CompletionTokens, res.Text, res.Finish}
	if out.CompletionTokens == nil {
		out.CompletionTokens = []int32{}
	}
	return json.NewEncoder(stdout).Encode(out)
}

// generateText runs req and prints its text as it is generated.
func generateText(ctx context.Context, eng *engine.Engine, req engine.Request, stdout io.Writer) error {
	events, err := eng.Submit(ctx, req)
	if err != nil {
		return err
	}
	for ev := range events {
		if ev.Err != nil {
			for range events {
			}
			return ev.Err
		}
		if _, err := io.WriteString(stdout, ev.Text); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintln(stdout)
	return err
}

// loraFlags is generate's repeated --lora FILE[:SCALE].
type loraFlags []loraArg

type loraArg struct {
	path  string
	scale float32
}

func (l *loraFlags) String() string { return fmt.Sprint(*l) }

// Set takes FILE or FILE:SCALE; a suffix that is not a number is part of the
// path.
func (l *loraFlags) Set(v string) error {
	a := loraArg{path: v, scale: 1}
	if i := strings.LastIndexByte(v, ':'); i > 0 {
		if f, err := strconv.ParseFloat(v[i+1:], 32); err == nil {
			a.path, a.scale = v[:i], float32(f)
		}
	}
	if a.path == "" {
		return fmt.Errorf("empty adapter path")
	}
	*l = append(*l, a)
	return nil
}

// load binds the adapters to m and stacks them (nil for none).
func (l loraFlags) load(m *engine.Model) (*engine.Adapter, error) {
	if len(l) == 0 {
		return nil, nil
	}
	var as []*engine.Adapter
	for _, a := range l {
		ad, err := engine.LoadAdapter(m, a.path, a.scale, "")
		if err != nil {
			return nil, fmt.Errorf("--lora %s: %w", a.path, err)
		}
		as = append(as, ad)
	}
	return engine.StackAdapters(as...)
}
