package bench

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/synth"
	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// TestEncode runs the encoder measurement on synth's bert-tiny: the passes
// asked for, the figures filled and consistent, and a bad configuration or
// an input over the window refused.
func TestEncode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bert.gguf")
	if err := synth.GenerateFile(synth.Config{Shape: "bert-tiny", Type: gguf.TypeQ8_0}, path); err != nil {
		t.Fatal(err)
	}
	m, err := encoder.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pool := kernels.NewPool(1)
	defer pool.Close()
	e := encoder.New(m, pool)
	res, err := Encode(e, e.Info(), pool.Threads(), EncodeConfig{Inputs: 3, Tokens: 16, Reps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Passes < 2 || res.InputsPerSec <= 0 || math.Abs(res.TokensPerSec-res.InputsPerSec*16) > 1e-6*res.TokensPerSec || res.Dims != 256 || res.Pooling != "cls" || res.Window != 512 {
		t.Fatalf("result %+v", res)
	}
	if _, err := Encode(e, e.Info(), 1, EncodeConfig{Inputs: 0, Tokens: 16, Reps: 1}); err == nil {
		t.Error("no inputs measured")
	}
	if _, err := Encode(e, e.Info(), 1, EncodeConfig{Inputs: 1, Tokens: 513, Reps: 1}); err == nil {
		t.Error("an input over the window measured")
	}
}
