package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/lora"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/synth"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
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
	Type    string  `json:"type"`
	SHA256  string  `json:"sha256"`
}

// key names a golden adapter's files for a base file k.
func (g loraGoldenAdapter) key(k string) string {
	return fmt.Sprintf("%s-r%d-%s-s%d-%s", k, g.Rank, g.Targets, g.Seed, g.Type)
}

// loraFiles is one adapter written both ways.
type loraFiles struct{ gguf, peft string }

// TestLoRAFiles runs llama.cpp's greedy continuations under LoRA adapters:
// llama, qwen3 and gemma3 tiny files in F32 and Q8_0, ranks 8 and 32,
// attention-only and attention+FFN, plus qwen2, gemma2 and phi3 (fused
// projections), a scaled adapter, two stacked, F16 and BF16 adapters, and
// F16 base weights. Every case runs from the
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
			ak := a.key(k)
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
	typ, err := gguf.ParseType(g.Type)
	if err != nil {
		t.Fatal(err)
	}
	a, err := synth.LoRA(synth.LoRAConfig{Base: base, Rank: g.Rank, Targets: ts, Seed: g.Seed, Type: typ})
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
			f := files[g.key(c.Shape+"-"+c.Type)]
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

// loraSpec is one synthetic adapter for a test.
type loraSpec struct {
	rank    int
	targets string
	seed    uint64
	scale   float32
}

// synthAdapters writes and binds adapters for m, whose file is base.
func synthAdapters(t testing.TB, m *Model, base string, specs ...loraSpec) []*Adapter {
	t.Helper()
	var out []*Adapter
	for _, s := range specs {
		ts, err := lora.ParseTargets(s.targets)
		if err != nil {
			t.Fatal(err)
		}
		a, err := synth.LoRA(synth.LoRAConfig{Base: base, Rank: s.rank, Targets: ts, Seed: s.seed})
		if err != nil {
			t.Fatal(err)
		}
		b, err := BindAdapter(m, a, s.scale, "")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestLoRAMixedBatch: 16 sequences over 4 adapters and none, greedy and
// seeded, run one at a time and then all at once: each sequence's tokens
// are the same both ways, and the adapters change them.
func TestLoRAMixedBatch(t *testing.T) {
	base := refdatatest.Path(t, "models/stories260K.gguf")
	m := loadStories(t)
	as := synthAdapters(t, m, base, loraSpec{8, "attn", 1, 1}, loraSpec{32, "all", 2, 1}, loraSpec{16, "attn", 3, 0.5}, loraSpec{4, "all", 4, 2})
	as = append(as, nil)
	cases := loadGolden(t)
	var reqs []Request
	for i := range 16 {
		r := greedy(cases[i%len(cases)].PromptTokens, 40)
		if i%3 == 1 {
			r.Sampling = sample.Params{Temperature: 0.9, TopP: 0.95, Seed: uint64(i)}
		}
		r.Adapter = as[i%len(as)]
		reqs = append(reqs, r)
	}
	e := startEngine(t, m, Config{Threads: 2, Poison: true, MaxBatch: 16})
	alone := make([]*Result, len(reqs))
	for i, r := range reqs {
		alone[i] = generate(t, e, r)
	}
	changed := 0
	for i, r := range reqs {
		if r.Adapter != nil {
			plain := r
			plain.Adapter = nil
			if !slices.Equal(generate(t, e, plain).CompletionTokens, alone[i].CompletionTokens) {
				changed++
			}
		}
	}
	t.Logf("the adapters changed %d of 13 outputs", changed)
	if changed < 10 {
		t.Errorf("the adapters changed %d of 13 outputs", changed)
	}
	batched := make([]*Result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			res, err := e.Generate(context.Background(), r)
			if err != nil {
				t.Error(err)
				return
			}
			batched[i] = res
		})
	}
	wg.Wait()
	for i := range reqs {
		if batched[i] != nil && !slices.Equal(batched[i].CompletionTokens, alone[i].CompletionTokens) {
			t.Errorf("request %d (adapter %d): batched %v, alone %v", i, i%len(as), batched[i].CompletionTokens, alone[i].CompletionTokens)
		}
	}
}

// TestLoRAPrefixCache: the same prompt of one tenant under two adapters and
// none never shares a cached page: each misses the others' entries, and
// hits its own.
func TestLoRAPrefixCache(t *testing.T) {
	base := refdatatest.Path(t, "models/stories260K.gguf")
	m := loadStories(t)
	as := synthAdapters(t, m, base, loraSpec{8, "attn", 1, 1}, loraSpec{8, "attn", 2, 1})
	e := startEngine(t, m, Config{Threads: 1, Poison: true})
	flushCache(t, e)
	ps := e.KV().PageSize()
	prompt := longPrompt(loadGolden(t)[3].PromptTokens, 100)
	under := func(a *Adapter) Request {
		r := tenantReq("alice", prompt, 16, true)
		r.Adapter = a
		return r
	}
	want := generate(t, e, Request{Owner: own, Prompt: prompt, MaxTokens: 16, Adapter: as[1]})

	generate(t, e, under(as[0])) // publishes under adapter 0
	aShared, _, aCached := prefillPages(t, e, under(as[0]))
	if aCached != cachedFor(len(prompt), ps) {
		t.Fatalf("adapter 0 again: %d cached tokens, want %d", aCached, cachedFor(len(prompt), ps))
	}
	for name, r := range map[string]Request{"adapter 1": under(as[1]), "no adapter": under(nil)} {
		shared, ownPages, cached := prefillPages(t, e, r)
		if cached != 0 {
			t.Fatalf("%s attached %d of adapter 0's cached tokens", name, cached)
		}
		for _, id := range append(shared, ownPages...) {
			if slices.Contains(aShared, id) {
				t.Fatalf("%s's sequence holds adapter 0's cached page %d", name, id)
			}
		}
	}
	res := generate(t, e, under(as[1])) // hits adapter 1's own entries now
	if res.Usage.CachedTokens != aCached || !slices.Equal(res.CompletionTokens, want.CompletionTokens) {
		t.Fatalf("adapter 1 from its cache: %d cached, %v; uncached %v", res.Usage.CachedTokens, res.CompletionTokens, want.CompletionTokens)
	}
}

// TestBindAdapterRefusals: an adapter for another architecture or shape,
// one bound to another model, and a bad scale are refused by name.
func TestBindAdapterRefusals(t *testing.T) {
	dir := t.TempDir()
	m := loadStories(t)
	other := filepath.Join(dir, "qwen3.gguf")
	if err := synth.GenerateFile(synth.Config{Shape: "qwen3-tiny", Type: gguf.TypeF32, Seed: 1}, other); err != nil {
		t.Fatal(err)
	}
	llama := filepath.Join(dir, "llama.gguf")
	if err := synth.GenerateFile(synth.Config{Shape: "llama-tiny", Type: gguf.TypeF32, Seed: 1}, llama); err != nil {
		t.Fatal(err)
	}
	mk := func(base string) *lora.Adapter {
		a, err := synth.LoRA(synth.LoRAConfig{Base: base, Rank: 8, Targets: []lora.Target{lora.AttnQ, lora.FFNDown}, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	qwen, wide := mk(other), mk(llama)
	fused := mk(refdatatest.Path(t, "models/stories260K.gguf"))
	fused.Pairs[0].Target = lora.AttnQKV
	for name, tc := range map[string]struct {
		a     *lora.Adapter
		scale float32
		want  string
	}{
		"architecture": {qwen, 1, "the adapter is for qwen3, the model is llama"},
		"shape":        {wide, 1, "the model's is"},
		"fused target": {fused, 1, "llama has no attn_qkv projection"},
		"scale":        {mk(llama), float32(math.Inf(1)), "scale"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := BindAdapter(m, tc.a, tc.scale, "")
			if !errors.Is(err, ErrAdapterMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrAdapterMismatch naming %q", err, tc.want)
			}
		})
	}
	// An adapter bound to one model is refused by another's engine.
	m2 := loadStories(t)
	a := synthAdapters(t, m2, refdatatest.Path(t, "models/stories260K.gguf"), loraSpec{4, "attn", 1, 1})[0]
	e := startEngine(t, m, Config{Threads: 1})
	req := greedy(loadGolden(t)[0].PromptTokens, 4)
	req.Adapter = a
	if _, err := e.Generate(context.Background(), req); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("an adapter bound to another model: %v", err)
	}
}
