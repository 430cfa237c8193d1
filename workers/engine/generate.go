package engine

import (
	"context"
	"strings"
)

// Result is a whole generation, collected from a request's events.
type Result struct {
	PromptTokens     []int32
	CompletionTokens []int32
	Text             string
	Finish           string
	// Usage is the final event's: CachedTokens says how many prompt
	// tokens came from the prefix cache (the rest were computed).
	Usage Usage
	// Logprobs are the generated tokens' log-probabilities, when asked.
	Logprobs []*Logprob
}

// Generate submits req and waits for it to finish. It returns an error, never
// a partial result, if the request fails.
func (e *Engine) Generate(ctx context.Context, req Request) (*Result, error) {
	events, err := e.Submit(ctx, req)
	if err != nil {
		return nil, err
	}
	res := &Result{
		PromptTokens:     append([]int32(nil), req.Prompt...),
		CompletionTokens: make([]int32, 0, req.MaxTokens),
	}
	var text strings.Builder
	for ev := range events {
		if ev.Err != nil {
			for range events {
			}
			return nil, ev.Err
		}
		if !ev.Done {
			res.CompletionTokens = append(res.CompletionTokens, ev.Token)
			if ev.Logprob != nil {
				res.Logprobs = append(res.Logprobs, ev.Logprob)
			}
		}
		text.WriteString(ev.Text)
		if ev.Done {
			res.Finish = ev.Finish
			res.Usage = ev.Usage
		}
	}
	res.Text = text.String()
	return res, nil
}
