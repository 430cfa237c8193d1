package refdatatest

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"testing"
)

// NearTie is the top-2 log-probability margin under which a greedy step may
// flip on rounding alone; a divergence from llama.cpp at a step with a larger
// margin means the computation differs.
const NearTie = 0.02

// GoldenCase is one of llama.cpp's greedy continuations from a golden file
// (../shared/models/quant/golden.json, ../shared/models/archs/golden.json).
type GoldenCase struct {
	File             string    `json:"file"` // model file, relative to the golden file's folder
	Prompt           string    `json:"prompt"`
	PromptTokens     []int32   `json:"prompt_tokens"`
	CompletionTokens []int32   `json:"completion_tokens"`
	Completion       string    `json:"completion"`
	Margins          []float64 `json:"top2_logprob_margins"`
}

// Golden reads the golden file rel (slash-separated, under ../shared) and
// returns its cases with File made absolute.
func Golden(t testing.TB, rel string) []GoldenCase {
	t.Helper()
	b, err := os.ReadFile(Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []GoldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("refdatatest: %s: %v", rel, err)
	}
	if len(g.Cases) == 0 {
		t.Fatalf("refdatatest: %s has no cases", rel)
	}
	for i := range g.Cases {
		g.Cases[i].File = Path(t, path.Join(path.Dir(rel), g.Cases[i].File))
	}
	return g.Cases
}

// Compare checks a greedy completion against the case. It returns nil when
// they agree token for token, a non-empty excuse when they first differ at a
// step whose margin is under NearTie (the rest cannot be compared), and an
// error otherwise.
func (c GoldenCase) Compare(got []int32) (excuse string, err error) {
	return c.CompareWithin(got, NearTie)
}

// CompareWithin is Compare with nearTie in place of NearTie, for goldens
// whose computation turns rounding noise into larger logit changes (a
// quantized KV cache); the caller says why its bound is what it is.
func (c GoldenCase) CompareWithin(got []int32, nearTie float64) (excuse string, err error) {
	n := len(c.CompletionTokens)
	for i := 0; i < n; i++ {
		if i >= len(got) {
			return "", fmt.Errorf("completion ends after %d tokens, llama.cpp wrote %d", len(got), n)
		}
		if got[i] == c.CompletionTokens[i] {
			continue
		}
		if i < len(c.Margins) && c.Margins[i] < nearTie {
			return fmt.Sprintf("diverges at step %d on a near-tie (margin %.4f): got %d, llama.cpp %d", i, c.Margins[i], got[i], c.CompletionTokens[i]), nil
		}
		margin := "unknown"
		if i < len(c.Margins) {
			margin = fmt.Sprintf("%.4f", c.Margins[i])
		}
		return "", fmt.Errorf("diverges at step %d (margin %s): got %d, llama.cpp %d\n got %v\nwant %v", i, margin, got[i], c.CompletionTokens[i], got, c.CompletionTokens)
	}
	return "", nil
}
