package bench

import (
	"errors"
	"time"

	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// EncodeConfig is one encoder measurement: passes of Inputs inputs of
// Tokens tokens each, repeated for at least Duration (and Reps times).
type EncodeConfig struct {
	Threads  int
	Inputs   int
	Tokens   int
	Reps     int
	Duration time.Duration
}

// Validate reports whether the measurement is runnable.
func (c EncodeConfig) Validate() error {
	if c.Inputs < 1 || c.Tokens < 2 || c.Reps < 1 {
		return errors.New("bench: need at least 1 input of 2 tokens and 1 repetition")
	}
	return nil
}

// EncodeResult are an encoder's figures.
type EncodeResult struct {
	Inputs       int     `json:"inputs"`        // per pass
	Tokens       int     `json:"tokens"`        // per input
	Passes       int     `json:"passes"`        // measured (after one warm-up)
	InputsPerSec float64 `json:"inputs_per_s"`  // inputs encoded per second
	TokensPerSec float64 `json:"tokens_per_s"`  // input tokens per second
	PassMillis   float64 `json:"pass_ms"`       // mean time of one pass
	Threads      int     `json:"threads"`       // kernel threads
	Kernels      string  `json:"kernels"`       // the kernel set
	Dims         int     `json:"dims"`          // the vector's length
	Pooling      string  `json:"pooling"`       // the model's pooling
	Window       int     `json:"window_tokens"` // the model's window
}

// Encode measures m's encoding rate: inputs of [CLS] (or the tokenizer's
// first special), cfg.Tokens-2 copies of one ordinary token and the closing
// special, cfg.Inputs of them per pass, as llama-embedding runs a batch of
// that many prompts.
func Encode(m *encoder.Model, cfg EncodeConfig) (*EncodeResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Tokens > m.Hyper.Context {
		return nil, errors.New("bench: --tokens is over the model's window")
	}
	word := m.Tokenize("the")
	ids := make([]int32, 0, cfg.Tokens)
	ids = append(ids, word[0])
	for len(ids) < cfg.Tokens-1 {
		ids = append(ids, word[min(1, len(word)-1)])
	}
	ids = append(ids, word[len(word)-1])
	inputs := make([][]int32, cfg.Inputs)
	for i := range inputs {
		inputs[i] = ids
	}
	pool := kernels.NewPool(cfg.Threads)
	defer pool.Close()
	e := encoder.New(m, pool)
	if _, err := e.Encode(inputs); err != nil { // warm-up: scratch, page faults
		return nil, err
	}
	start := time.Now()
	passes := 0
	for passes < cfg.Reps || time.Since(start) < cfg.Duration {
		if _, err := e.Encode(inputs); err != nil {
			return nil, err
		}
		passes++
	}
	el := time.Since(start).Seconds()
	n := float64(passes * cfg.Inputs)
	return &EncodeResult{
		Inputs: cfg.Inputs, Tokens: cfg.Tokens, Passes: passes,
		InputsPerSec: n / el, TokensPerSec: n * float64(cfg.Tokens) / el, PassMillis: el * 1000 / float64(passes),
		Threads: pool.Threads(), Kernels: m.Kernels().String(), Dims: m.Hyper.Embd,
		Pooling: m.Hyper.Pooling.String(), Window: m.Hyper.Context,
	}, nil
}
