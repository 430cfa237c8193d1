package price

import (
	"math"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// MicroPerNeuron is the number of micro-neurons in one neuron.
const MicroPerNeuron = 1_000_000

// Of returns the rates of a catalog model's prices.
func Of(p catalog.Prices) queue.Rates {
	return queue.Rates{
		Prompt:       p.NeuronsPerMPromptTokens,
		CachedPrompt: p.NeuronsPerMCachedPromptTokens,
		Completion:   p.NeuronsPerMCompletionTokens,
	}
}

// Default is the rates of a model whose catalog entry names no prices.
func Default() queue.Rates { return Of(catalog.DefaultPrices()) }

// Usage is what one request consumed.
type Usage struct {
	PromptTokens     int // every prompt token, cached ones included
	CachedTokens     int // prompt tokens served from the prefix cache
	CompletionTokens int
}

// Micro is the cost of u at r in micro-neurons: the uncached prompt tokens
// at the prompt rate, the cached ones at the cached rate and the completion
// at the completion rate, rounded to the nearest micro-neuron. Negative
// counts are taken as zero and the cached count is bounded by the prompt, so
// a caller's bug can never credit a tenant; a rate that is negative or not
// finite counts as zero.
func Micro(r queue.Rates, u Usage) int64 {
	prompt := max(u.PromptTokens, 0)
	cached := min(max(u.CachedTokens, 0), prompt)
	completion := max(u.CompletionTokens, 0)
	// rates are per million tokens and the result is in millionths: the
	// factors cancel, so this is tokens times rate.
	v := float64(prompt-cached)*rate(r.Prompt) + float64(cached)*rate(r.CachedPrompt) +
		float64(completion)*rate(r.Completion)
	return int64(math.Round(v))
}

// Neurons converts micro-neurons to neurons.
func Neurons(micro int64) float64 { return float64(micro) / MicroPerNeuron }

// ToMicro converts neurons to micro-neurons, rounding to the nearest; a
// negative or non-finite value is 0.
func ToMicro(neurons float64) int64 {
	if neurons <= 0 || math.IsNaN(neurons) || math.IsInf(neurons, 0) {
		return 0
	}
	return int64(math.Round(neurons * MicroPerNeuron))
}

func rate(v float64) float64 {
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
