package price

import (
	"math"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

func TestMicro(t *testing.T) {
	def := Default()
	tests := []struct {
		name  string
		rates queue.Rates
		u     Usage
		want  int64
	}{
		{"defaults, a million of each", def, Usage{1_000_000, 0, 1_000_000}, (2457 + 18252) * MicroPerNeuron},
		{"defaults, small request", def, Usage{100, 0, 50}, 100*2457 + 50*18252},
		{"cached prompt at the cached rate", queue.Rates{Prompt: 1000, CachedPrompt: 100, Completion: 0}, Usage{10, 4, 0}, 6*1000 + 4*100},
		{"cached above the prompt is bounded", queue.Rates{Prompt: 1000, CachedPrompt: 100}, Usage{10, 40, 0}, 10 * 100},
		{"negative counts charge nothing", def, Usage{-5, -1, -7}, 0},
		{"free model", queue.Rates{}, Usage{123456, 0, 654321}, 0},
		{"bad rates count as zero", queue.Rates{Prompt: math.NaN(), CachedPrompt: -1, Completion: math.Inf(1)}, Usage{10, 5, 10}, 0},
		{"fractional rates round", queue.Rates{Prompt: 0.4}, Usage{1, 0, 0}, 0},
		{"fractional rates round up", queue.Rates{Prompt: 0.6}, Usage{1, 0, 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Micro(tt.rates, tt.u); got != tt.want {
				t.Fatalf("Micro(%+v, %+v) = %d, want %d", tt.rates, tt.u, got, tt.want)
			}
		})
	}
}

func TestOfMatchesCatalog(t *testing.T) {
	p := catalog.DefaultPrices()
	r := Of(p)
	if r.Prompt != p.NeuronsPerMPromptTokens || r.Completion != p.NeuronsPerMCompletionTokens || r.CachedPrompt != p.NeuronsPerMCachedPromptTokens {
		t.Fatalf("Of(%+v) = %+v", p, r)
	}
	// The catalog's own arithmetic agrees with ours for uncached requests.
	if got, want := Neurons(Micro(r, Usage{PromptTokens: 1234, CompletionTokens: 567})), p.Neurons(1234, 567); math.Abs(got-want) > 1e-6 {
		t.Fatalf("price %v, catalog %v", got, want)
	}
}

func TestToMicro(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want int64
	}{{0.5, 500_000}, {-1, 0}, {math.NaN(), 0}, {1e-7, 0}, {3036, 3036 * MicroPerNeuron}} {
		if got := ToMicro(tt.in); got != tt.want {
			t.Errorf("ToMicro(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
