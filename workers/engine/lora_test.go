package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/lora"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/synth"
)

// loraGoldenCase is one of llama.cpp's greedy continuations of a synthetic
// base file under synthetic adapters (testdata/lora_golden.json says how
// they were made).
type loraGoldenCase struct {
	synthGoldenCase
	Adapters []loraGoldenAdapter `json:"adapters"`
}

type loraGoldenAdapter struct {
	Rank    int     `json:"rank"`
	Targets string  `json:"targets"`
	Seed    uint64  `json:"seed"`
	Scale   float32 `json:"scale"`
	SHA256  string  `json:"sha256"`
}

// loraFiles is one adapter written both ways.
type loraFiles struct{ gguf, peft string }

// TestLoRAFiles runs llama.cpp's greedy continuations under LoRA adapters:
// llama, qwen3 and gemma3 tiny files in F32 and Q8_0, ranks 8 and 32,
// attention-only and attention+FFN, plus qwen2, gemma2 and phi3 (fused
// projections), a scaled adapter and two stacked. Every case runs from the
// GGUF adapter and from the same adapter as PEFT files: their tokens must
// be identical, and llama.cpp's (a divergence only excused at a near-tie).
func TestLoRAFiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "lora_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []loraGoldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bases := map[string]string{}
	adapters := map[string]loraFiles{}
	for _, c := range golden.Cases {
		k := c.Shape + "-" + c.Type
		if bases[k] == "" {
			bases[k] = writeSynthBase(t, dir, c.synthGoldenCase)
		}
		for _, a := range c.Adapters {
			ak := fmt.Sprintf("%s-r%d-%s-s%d", k, a.Rank, a.Targets, a.Seed)
			if adapters[ak].gguf == "" {
				adapters[ak] = writeSynthAdapter(t, dir, ak, bases[k], a)
			}
		}
	}
	for _, ks := range kernelSets(t) {
		for k, path := range bases {
			t.Run(ks.String()+"/"+k, func(t *testing.T) {
				m, err := LoadOn(path, ks)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				e := startEngine(t, m, Config{Threads: 2, Poison: true})
				for _, c := range golden.Cases {
					if c.Shape+"-"+c.Type == k {
						checkLoRACase(t, e, c, adapters)
					}
				}
			})
		}
	}
}

func writeSynthBase(t *testing.T, dir string, c synthGoldenCase) string {
	t.Helper()
	typ, err := gguf.ParseType(c.Type)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, c.Shape+"-"+c.Type+".gguf")
	if err := synth.GenerateFile(synth.Config{Shape: c.Shape, Type: typ, Seed: c.Seed}, path); err != nil {
		t.Fatal(err)
	}
	if sum := fileSHA256(t, path); sum != c.SHA256 {
		t.Fatalf("synth wrote %s with sha256 %s, the golden file's has %s: regenerate testdata/lora_golden.json with llama.cpp", path, sum, c.SHA256)
	}
	return path
}

// writeSynthAdapter writes a golden case's adapter as GGUF and as PEFT (in
// Hugging Face's row order, as a trainer would).
func writeSynthAdapter(t *testing.T, dir, name, base string, g loraGoldenAdapter) loraFiles {
	t.Helper()
	ts, err := lora.ParseTargets(g.Targets)
	if err != nil {
		t.Fatal(err)
	}
	a, err := synth.LoRA(synth.LoRAConfig{Base: base, Rank: g.Rank, Targets: ts, Seed: g.Seed})
	if err != nil {
		t.Fatal(err)
	}
	files := loraFiles{gguf: filepath.Join(dir, name+".gguf"), peft: filepath.Join(dir, name+"-peft")}
	f, err := os.Create(files.gguf)
	if err != nil {
		t.Fatal(err)
	}
	if err := lora.WriteGGUF(f, a); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if sum := fileSHA256(t, files.gguf); sum != g.SHA256 {
		t.Fatalf("synth wrote adapter %s with sha256 %s, the golden file's has %s: regenerate testdata/lora_golden.json with llama.cpp", name, sum, g.SHA256)
	}
	heads, kvHeads, err := synth.HeadCounts(base)
	if err != nil {
		t.Fatal(err)
	}
	if a.Arch == "llama" {
		a = a.Permuted(heads, kvHeads, true)
	}
	if err := os.Mkdir(files.peft, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := lora.WritePEFT(files.peft, a, filepath.Base(base)); err != nil {
		t.Fatal(err)
	}
	return files
}

// checkLoRACase runs one case from the GGUF adapters and from the PEFT ones.
func checkLoRACase(t *testing.T, e *Engine, c loraGoldenCase, files map[string]loraFiles) {
	t.Helper()
	var got [2][]int32
	for i, peft := range []bool{false, true} {
		var as []*Adapter
		for _, g := range c.Adapters {
			f := files[fmt.Sprintf("%s-%s-r%d-%s-s%d", c.Shape, c.Type, g.Rank, g.Targets, g.Seed)]
			path := f.gguf
			if peft {
				path = f.peft
			}
			a, err := LoadAdapter(e.Model(), path, g.Scale, "")
			if err != nil {
				t.Fatal(err)
			}
			as = append(as, a)
		}
		a, err := StackAdapters(as...)
		if err != nil {
			t.Fatal(err)
		}
		req := greedy(c.PromptTokens, len(c.CompletionTokens))
		req.Adapter = a
		res, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = res.CompletionTokens
	}
	name := fmt.Sprintf("%v %q", c.Adapters, c.Prompt)
	if !slices.Equal(got[0], got[1]) {
		t.Errorf("%s: GGUF adapter gives %v, the same adapter as PEFT %v", name, got[0], got[1])
	}
	ref := refdatatest.GoldenCase{Prompt: c.Prompt, CompletionTokens: c.CompletionTokens, Margins: c.Margins}
	ex, err := ref.Compare(got[0])
	if err != nil {
		t.Errorf("%s: %v", name, err)
	}
	if ex != "" {
		t.Logf("%s: %s", name, ex)
	}
}
