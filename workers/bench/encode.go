package bench

import (
	"errors"
	"time"

	"github.com/bulkhead-ai/bulkhead/workers/encoder"
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
	Dims         int     `json:"dims"`          // the vector's length
	Pooling      string  `json:"pooling"`       // the model's pooling
	Window       int     `json:"window_tokens"` // the model's window
}

// Encode measures an embedding model's encoding rate on p (an encoder, or a
// causal model's engine.Embedder; info describes its model, threads is its
// kernel pool's size): inputs of the tokenizer's opening special, Tokens-2
// copies of one ordinary token and the closing special, Inputs of them per
// pass, as llama-embedding runs a batch of that many prompts.
func Encode(p encoder.Passer, info encoder.Info, threads int, cfg EncodeConfig) (*EncodeResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Tokens > info.Window {
		return nil, errors.New("bench: --tokens is over the model's window")
	}
	word := info.Tokenizer.Encode("the", true, false)
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
	if _, err := p.Encode(inputs); err != nil { // warm-up: scratch, page faults
		return nil, err
	}
	start := time.Now()
	passes := 0
	for passes < cfg.Reps || time.Since(start) < cfg.Duration {
		if _, err := p.Encode(inputs); err != nil {
			return nil, err
		}
		passes++
	}
	el := time.Since(start).Seconds()
	n := float64(passes * cfg.Inputs)
	return &EncodeResult{
		Inputs: cfg.Inputs, Tokens: cfg.Tokens, Passes: passes,
		InputsPerSec: n / el, TokensPerSec: n * float64(cfg.Tokens) / el, PassMillis: el * 1000 / float64(passes),
		Threads: threads, Dims: info.Dims, Pooling: info.Pooling.String(), Window: info.Window,
	}, nil
}
