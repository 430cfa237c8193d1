package bench

import (
	"context"
	"errors"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// TestSpeculation runs the method on stories260K from a real prompt: three
// workloads, each with both rates positive and drafting's outputs equal to
// plain decoding's (Speculation checks that); a bad config is ErrConfig.
func TestSpeculation(t *testing.T) {
	m, err := engine.Load(refdatatest.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := Speculation(context.Background(), nil, m, SpecConfig{PromptTokens: 1, GenTokens: 4, Reps: 1, EditEvery: 16}); !errors.Is(err, ErrConfig) {
		t.Fatalf("4 tokens: %v, want ErrConfig", err)
	}
	cfg := SpecConfig{Threads: 1, GenTokens: 48, Reps: 1, EditEvery: 16,
		Prompts: [][]int32{m.Tokenizer.Encode("Once upon a time", true, false)}}
	res, err := Speculation(context.Background(), nil, m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Workloads) != 3 {
		t.Fatalf("%d workloads, want 3", len(res.Workloads))
	}
	for _, w := range res.Workloads {
		if !(w.Plain > 0 && w.Drafting > 0 && w.Speedup > 0) || w.Generated != cfg.GenTokens {
			t.Errorf("%s: %+v", w.Name, w)
		}
		// How much is drafted depends on the engine's measured step times
		// (engine's TestSpeculationKeepsOutputs pins them); the figures
		// must only add up.
		if w.Accepted > w.Drafted || w.Acceptance < 0 || w.Acceptance > 1 {
			t.Errorf("%s: %d of %d drafts accepted, acceptance %v", w.Name, w.Accepted, w.Drafted, w.Acceptance)
		}
	}
}
