package edge

import (
	"math"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// Logprobs (OpenAI chat "logprobs"/"top_logprobs", completions "logprobs").
// The worker computes them from the logits its sampler drew from: after the
// repetition/frequency/presence penalties, before the temperature, the
// top-k/top-p/min-p filters and any structured-output grammar mask
// (sample.Sampler.Logprobs). Control tokens (end of generation) are left out,
// as OpenAI leaves out its end token.

// maxTopLogprobs is OpenAI's bound on top_logprobs.
const maxTopLogprobs = 20

// chatTokenLogprob is one token in OpenAI's chat logprobs.content.
type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal []chatTokenLogprob `json:"refusal"`
}

// textLogprobs is the completions API's (legacy) logprobs object.
type textLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// logprobTrack collects a request's token logprobs; sent counts those a
// stream has already written.
type logprobTrack struct {
	all    []chatTokenLogprob
	sent   int
	offset int // completions: text offset of the next token
}

func pieceBytes(p string) []int {
	b := make([]int, len(p))
	for i := range len(p) {
		b[i] = int(p[i])
	}
	return b
}

// addLogprobs renders a frame's logprobs with the model's vocabulary.
func (v *vocab) addLogprobs(res *result, fr *queue.Frame) {
	if res.logprobs == nil {
		return
	}
	for _, lp := range fr.Logprobs {
		if v.tok.IsControl(lp.Token) || v.tok.IsEOG(lp.Token) {
			continue
		}
		p := v.tok.Piece(lp.Token)
		e := chatTokenLogprob{Token: p, Logprob: lp.Logprob, Bytes: pieceBytes(p), TopLogprobs: []chatTopLogprob{}}
		for _, t := range lp.Top {
			tp := v.tok.Piece(t.Token)
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: tp, Logprob: t.Logprob, Bytes: pieceBytes(tp)})
		}
		res.logprobs.all = append(res.logprobs.all, e)
	}
}

// pending is what a logprobs object carries: every entry, or in a stream those
// not yet sent (marking them sent); false when none were asked for, or a
// stream has nothing new.
func (t *logprobTrack) pending(stream bool) ([]chatTokenLogprob, bool) {
	if t == nil {
		return nil, false
	}
	if !stream {
		return t.all, true
	}
	part := t.all[t.sent:]
	t.sent = len(t.all)
	return part, len(part) > 0
}

// chatLogprobs returns the chat logprobs object (nil, which renders null,
// when none were asked for): all of them, or in a stream those not yet sent.
func (res *result) chatLogprobs(stream bool) any {
	part, ok := res.logprobs.pending(stream)
	if !ok {
		return nil
	}
	return chatLogprobs{Content: append([]chatTokenLogprob{}, part...), Refusal: nil}
}

// textLogprobs is chatLogprobs in the completions API's shape.
func (res *result) textLogprobs(stream bool) any {
	t := res.logprobs
	part, ok := t.pending(stream)
	if !ok {
		return nil
	}
	if !stream {
		t.offset = 0
	}
	out := textLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
	for _, e := range part {
		out.Tokens = append(out.Tokens, e.Token)
		out.TokenLogprobs = append(out.TokenLogprobs, e.Logprob)
		top := map[string]float32{}
		for _, a := range e.TopLogprobs {
			if _, dup := top[a.Token]; !dup {
				top[a.Token] = a.Logprob
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, t.offset)
		t.offset += len(e.Token)
	}
	return out
}

// checkTopLogprobs validates a top_logprobs count.
func checkTopLogprobs(field string, n *int) error {
	return checkInt(field, n, 0, maxTopLogprobs)
}

var _ = math.Inf
