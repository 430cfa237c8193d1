package sample

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	tests := []struct {
		name  string
		p     Params
		field string // "" means valid
	}{
		{"zero value is greedy", Params{}, ""},
		{"typical", Params{Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.1, FrequencyPenalty: 0.5, PresencePenalty: -0.5, PenaltyLastN: -1, Seed: 7}, ""},
		{"bounds", Params{Temperature: MaxTemperature, TopP: 1, MinP: 1, FrequencyPenalty: -2, PresencePenalty: 2}, ""},
		{"negative temperature", Params{Temperature: -0.1}, "Temperature"},
		{"temperature too high", Params{Temperature: MaxTemperature + 0.5}, "Temperature"},
		{"NaN temperature", Params{Temperature: nan}, "Temperature"},
		{"negative top_k", Params{TopK: -1}, "TopK"},
		{"top_p above 1", Params{TopP: 1.01}, "TopP"},
		{"negative top_p", Params{TopP: -0.5}, "TopP"},
		{"NaN top_p", Params{TopP: nan}, "TopP"},
		{"min_p above 1", Params{MinP: 1.5}, "MinP"},
		{"negative min_p", Params{MinP: -0.01}, "MinP"},
		{"negative repetition", Params{RepetitionPenalty: -1}, "RepetitionPenalty"},
		{"infinite repetition", Params{RepetitionPenalty: inf}, "RepetitionPenalty"},
		{"frequency too high", Params{FrequencyPenalty: 2.5}, "FrequencyPenalty"},
		{"frequency too low", Params{FrequencyPenalty: -3}, "FrequencyPenalty"},
		{"presence too high", Params{PresencePenalty: 2.01}, "PresencePenalty"},
		{"presence NaN", Params{PresencePenalty: nan}, "PresencePenalty"},
		{"penalty window below -1", Params{PenaltyLastN: -2}, "PenaltyLastN"},
		{"logit bias at its bounds", Params{LogitBias: []TokenBias{{0, -100}, {7, 100}, {3, 0.5}}}, ""},
		{"logit bias too large", Params{LogitBias: []TokenBias{{1, 100.5}}}, "LogitBias"},
		{"logit bias NaN", Params{LogitBias: []TokenBias{{1, nan}}}, "LogitBias"},
		{"logit bias on a negative id", Params{LogitBias: []TokenBias{{-1, 1}}}, "LogitBias"},
		{"too many logit biases", Params{LogitBias: make([]TokenBias, MaxLogitBias+1)}, "LogitBias"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			_, newErr := New(tt.p)
			if tt.field == "" {
				if err != nil || newErr != nil {
					t.Fatalf("Validate() = %v, New() error = %v, want nil", err, newErr)
				}
				return
			}
			if !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("Validate() = %v, want ErrInvalidParams", err)
			}
			if !strings.Contains(err.Error(), tt.field+" =") {
				t.Errorf("Validate() = %q, want it to name %s", err, tt.field)
			}
			if !errors.Is(newErr, ErrInvalidParams) {
				t.Errorf("New() error = %v, want ErrInvalidParams", newErr)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	s, err := New(Params{Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.p.TopP != 1 || s.p.RepetitionPenalty != 1 || s.p.PenaltyLastN != DefaultPenaltyLastN {
		t.Errorf("defaults = %+v, want TopP 1, RepetitionPenalty 1, PenaltyLastN %d", s.p, DefaultPenaltyLastN)
	}
	if s.p.penalized() {
		t.Error("zero penalties reported as active")
	}
}

// TestTinyTemperatureIsGreedy: a temperature below GreedyEpsilon (1e-40 is a
// float32 subnormal whose inverse overflows) validates and samples the
// argmax, never a token picked from Inf/NaN scores.
func TestTinyTemperatureIsGreedy(t *testing.T) {
	logits := []float32{0.1, 2.5, -1, 2.4, 0}
	for _, temp := range []float32{1e-40, 3e-39, 1e-30, 1e-6, GreedyEpsilon / 2} {
		p := Params{Temperature: temp, Seed: 1}
		if err := p.Validate(); err != nil {
			t.Fatalf("Validate(%g) = %v", temp, err)
		}
		s, err := New(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			if got := s.Sample(logits, nil); got != 1 {
				t.Fatalf("temperature %g draw %d: token %d, want the argmax 1", temp, i, got)
			}
		}
	}
}
