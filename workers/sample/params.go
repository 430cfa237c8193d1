package sample

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidParams is wrapped by every error from Params.Validate.
var ErrInvalidParams = errors.New("sample: invalid parameters")

// DefaultPenaltyLastN is the penalty window used when Params.PenaltyLastN is 0
// (llama.cpp's default).
const DefaultPenaltyLastN = 64

// MaxTemperature is the largest temperature Validate accepts.
const MaxTemperature = 5

// MaxLogitBias bounds Params.LogitBias: at most this many tokens, each
// biased by at most ±LogitBiasLimit (OpenAI's range).
const (
	MaxLogitBias   = 1024
	LogitBiasLimit = 100
)

// TokenBias is one token's logit bias.
type TokenBias struct {
	Token int32
	Bias  float32
}

// GreedyEpsilon is the temperature below which sampling is greedy, as in
// vLLM (_SAMPLING_EPS): 1/T of a tinier positive temperature overflows
// float32 and every logit becomes ±Inf or NaN.
const GreedyEpsilon = 1e-5

// Params configures a Sampler. The zero value is greedy decoding with every
// filter and penalty off.
//
// Zero means "off" (or the default) for the fields whose neutral value is not
// zero: TopP 0 is treated as 1, RepetitionPenalty 0 as 1, and PenaltyLastN 0
// as DefaultPenaltyLastN. Callers that want to reject an explicit top_p of 0
// from a client must do so before building Params.
type Params struct {
	// Temperature divides the logits before the draw; 0, or anything below
	// GreedyEpsilon, means greedy argmax. Range [0, MaxTemperature].
	Temperature float32
	// TopK keeps the K most likely tokens; 0 means off. Range >= 0.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// (at temperature 1) reaches TopP; 1 or 0 means off. Range [0, 1].
	TopP float32
	// MinP drops tokens whose probability is below MinP times the most likely
	// token's; 0 means off. Range [0, 1].
	MinP float32
	// RepetitionPenalty divides positive logits and multiplies negative ones
	// of tokens seen in the penalty window (CTRL, llama.cpp); 1 or 0 means
	// off. Range > 0.
	RepetitionPenalty float32
	// FrequencyPenalty is subtracted once per occurrence in the window
	// (OpenAI). Range [-2, 2].
	FrequencyPenalty float32
	// PresencePenalty is subtracted once from every token present in the
	// window (OpenAI). Range [-2, 2].
	PresencePenalty float32
	// PenaltyLastN is how many of the most recent history tokens the
	// penalties look at: 0 means DefaultPenaltyLastN, -1 means all.
	PenaltyLastN int
	// Seed seeds the PCG generator. Every value, 0 included, is a valid seed.
	Seed uint64
	// LogitBias is added to the logits of its tokens after the penalties,
	// before any grammar mask and the filters (OpenAI's logit_bias): a bias
	// of -LogitBiasLimit bans its token outright (its logit becomes -Inf),
	// any other adds to its logit. At most MaxLogitBias entries, each in
	// [-LogitBiasLimit, LogitBiasLimit]; a token outside the vocabulary is
	// ignored here (callers refuse it against the model's vocabulary).
	LogitBias []TokenBias
}

// Validate reports the first field out of range, by name.
func (p Params) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s = %v, want %s", ErrInvalidParams, field, v, want)
	}
	switch {
	case !finite(p.Temperature) || p.Temperature < 0 || p.Temperature > MaxTemperature:
		return bad("Temperature", p.Temperature, fmt.Sprintf("in [0, %d]", MaxTemperature))
	case p.TopK < 0:
		return bad("TopK", p.TopK, ">= 0 (0 = off)")
	case !finite(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return bad("TopP", p.TopP, "in (0, 1] (0 = off)")
	case !finite(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return bad("MinP", p.MinP, "in [0, 1]")
	case !finite(p.RepetitionPenalty) || p.RepetitionPenalty < 0:
		return bad("RepetitionPenalty", p.RepetitionPenalty, "> 0 (1 or 0 = off)")
	case !finite(p.FrequencyPenalty) || p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2:
		return bad("FrequencyPenalty", p.FrequencyPenalty, "in [-2, 2]")
	case !finite(p.PresencePenalty) || p.PresencePenalty < -2 || p.PresencePenalty > 2:
		return bad("PresencePenalty", p.PresencePenalty, "in [-2, 2]")
	case p.PenaltyLastN < -1:
		return bad("PenaltyLastN", p.PenaltyLastN, ">= -1 (0 = default, -1 = all)")
	case len(p.LogitBias) > MaxLogitBias:
		return bad("LogitBias", fmt.Sprintf("%d entries", len(p.LogitBias)), fmt.Sprintf("at most %d", MaxLogitBias))
	}
	for _, b := range p.LogitBias {
		if b.Token < 0 || !finite(b.Bias) || b.Bias < -LogitBiasLimit || b.Bias > LogitBiasLimit {
			return bad("LogitBias", fmt.Sprintf("token %d bias %v", b.Token, b.Bias), fmt.Sprintf("a token id >= 0 and a bias in [-%d, %d]", LogitBiasLimit, LogitBiasLimit))
		}
	}
	return nil
}

func finite(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }

// withDefaults returns p with the zero-means-off fields replaced by their
// neutral values.
func (p Params) withDefaults() Params {
	if p.Temperature < GreedyEpsilon {
		p.Temperature = 0
	}
	if p.TopP == 0 {
		p.TopP = 1
	}
	if p.RepetitionPenalty == 0 {
		p.RepetitionPenalty = 1
	}
	if p.PenaltyLastN == 0 {
		p.PenaltyLastN = DefaultPenaltyLastN
	}
	return p
}

// penalized reports whether any penalty or bias changes logits.
func (p Params) penalized() bool {
	return p.RepetitionPenalty != 1 || p.FrequencyPenalty != 0 || p.PresencePenalty != 0 || len(p.LogitBias) > 0
}
