package encoder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/synth"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// golden is testdata/llama_embedding.json: llama.cpp's outputs for synth's
// encoder files (seed 0), made with llama-tokenize --ids and llama-embedding
// --embd-output-format array -fa off (normalisation 2 for embeddings, -1 for
// rank scores, whose pairs are query TAB input) from the same inputs.
type golden struct {
	Inputs []string     `json:"inputs"`
	Query  string       `json:"query"`
	Cases  []goldenCase `json:"cases"`
}

type goldenCase struct {
	Shape   string      `json:"shape"`
	Type    string      `json:"type"`
	Seed    uint64      `json:"seed"`
	SHA256  string      `json:"sha256"`
	Pooling string      `json:"pooling"` // empty for the reranker
	Tokens  [][]int32   `json:"tokens"`
	Vectors [][]float32 `json:"vectors"`
}

func loadGolden(t *testing.T) golden {
	t.Helper()
	b, err := os.ReadFile("testdata/llama_embedding.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// synthFiles writes each synth file once per test binary.
var synthFiles = struct {
	sync.Mutex
	dir   string
	paths map[string]string
}{paths: map[string]string{}}

// synthFile returns the path of synth's shape in type typ (seed 0), written
// once into a directory removed at exit.
func synthFile(t testing.TB, shape string, typ gguf.Type) string {
	t.Helper()
	synthFiles.Lock()
	defer synthFiles.Unlock()
	key := shape + "-" + typ.String()
	if p, ok := synthFiles.paths[key]; ok {
		return p
	}
	if synthFiles.dir == "" {
		d, err := os.MkdirTemp("", "encoder-test")
		if err != nil {
			t.Fatal(err)
		}
		synthFiles.dir = d
	}
	p := filepath.Join(synthFiles.dir, key+".gguf")
	if err := synth.GenerateFile(synth.Config{Shape: shape, Type: typ}, p); err != nil {
		t.Fatal(err)
	}
	synthFiles.paths[key] = p
	return p
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// kernelSets are the kernel sets this CPU runs, but the portable one under
// -race when there are others (make test runs it without -race).
func kernelSets(t testing.TB) []kernels.Set {
	sets := kernels.Available()
	if testkit.Race && len(sets) > 1 && sets[0].Portable() {
		t.Logf("under -race: the %s kernel set is left to make test's run without it", sets[0])
		sets = sets[1:]
	}
	return sets
}

func load(t *testing.T, path string, ks kernels.Set) *Model {
	t.Helper()
	m, err := LoadOn(path, ks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newEncoder(t *testing.T, m *Model) *Encoder {
	t.Helper()
	pool := kernels.NewPool(2)
	t.Cleanup(pool.Close)
	return New(m, pool)
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// TestMatchesLlamaCpp encodes the golden inputs in one pass on every kernel
// set and compares with llama.cpp: the same tokens, embeddings with cosine
// at least 0.99999 (F32) or 0.999 (quantized) after normalisation, rank
// scores within 1e-3 and in the same order.
func TestMatchesLlamaCpp(t *testing.T) {
	g := loadGolden(t)
	for _, ks := range kernelSets(t) {
		for _, c := range g.Cases {
			pooling := c.Pooling
			if pooling == "" {
				pooling = "rank"
			}
			name := ks.String() + "/" + c.Shape + "-" + c.Type + "-" + pooling
			t.Run(name, func(t *testing.T) {
				typ, err := gguf.ParseType(c.Type)
				if err != nil {
					t.Fatal(err)
				}
				path := synthFile(t, c.Shape, typ)
				if sum := fileSHA256(t, path); sum != c.SHA256 {
					t.Fatalf("synth wrote %s %s with sha256 %s, the golden file's has %s: regenerate testdata/llama_embedding.json with llama.cpp", c.Shape, c.Type, sum, c.SHA256)
				}
				m := load(t, path, ks)
				if c.Pooling != "" {
					if m.Hyper.Pooling, err = ParsePooling(c.Pooling); err != nil {
						t.Fatal(err)
					}
				}
				e := newEncoder(t, m)
				inputs := make([][]int32, len(g.Inputs))
				for i, text := range g.Inputs {
					if c.Pooling == "" {
						inputs[i] = m.PairTokens(g.Query, text)
						continue
					}
					inputs[i] = m.Tokenize(text)
					if !slices.Equal(inputs[i], c.Tokens[i]) {
						t.Errorf("input %d %q: tokens %v, llama.cpp's %v", i, text, inputs[i], c.Tokens[i])
					}
				}
				vecs, err := e.Encode(inputs)
				if err != nil {
					t.Fatal(err)
				}
				if c.Pooling == "" {
					checkScores(t, vecs, c.Vectors)
					return
				}
				minCos := 0.99999
				if typ != gguf.TypeF32 {
					minCos = 0.999
				}
				worst := 1.0
				for i, v := range vecs {
					Normalize(v)
					cs := cosine(v, c.Vectors[i])
					worst = min(worst, cs)
					if !(cs >= minCos) {
						t.Errorf("input %d %q: cosine %.9f with llama.cpp's vector, want at least %g", i, g.Inputs[i], cs, minCos)
					}
				}
				t.Logf("worst cosine %.9f (1-cos %.2e) over %d inputs", worst, 1-worst, len(vecs))
			})
		}
	}
}

// checkScores compares rank scores with llama.cpp's: each within 1e-3, and
// the inputs in the same order by score.
func checkScores(t *testing.T, got, want [][]float32) {
	t.Helper()
	var worst float64
	for i := range got {
		if len(got[i]) != 1 {
			t.Fatalf("input %d: %d scores, want 1", i, len(got[i]))
		}
		d := math.Abs(float64(got[i][0] - want[i][0]))
		worst = max(worst, d)
		if !(d <= 1e-3) {
			t.Errorf("input %d: score %.7f, llama.cpp's %.7f", i, got[i][0], want[i][0])
		}
	}
	order := func(v [][]float32) []int {
		idx := make([]int, len(v))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case v[a][0] > v[b][0]:
				return -1
			case v[a][0] < v[b][0]:
				return 1
			}
			return 0
		})
		return idx
	}
	if o, w := order(got), order(want); !slices.Equal(o, w) {
		t.Errorf("ranked %v, llama.cpp %v", o, w)
	}
	t.Logf("largest score difference %.2e over %d pairs", worst, len(got))
}

// TestBatchInvariance checks an input's vector is the same, bit for bit,
// encoded alone or in a pass with other inputs (of other requests and
// tenants): no input attends to another's rows.
func TestBatchInvariance(t *testing.T) {
	g := loadGolden(t)
	for _, ks := range kernelSets(t) {
		t.Run(ks.String(), func(t *testing.T) {
			m := load(t, synthFile(t, "bert-tiny", gguf.TypeQ8_0), ks)
			e := newEncoder(t, m)
			var inputs [][]int32
			for _, text := range g.Inputs {
				inputs = append(inputs, m.Tokenize(text))
			}
			all, err := e.Encode(inputs)
			if err != nil {
				t.Fatal(err)
			}
			for i, ids := range inputs {
				alone, err := e.Encode([][]int32{ids})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(alone[0], all[i]) {
					t.Errorf("input %d: its vector alone differs from its vector in a pass of %d", i, len(inputs))
				}
			}
			rev := slices.Clone(inputs)
			slices.Reverse(rev)
			back, err := e.Encode(rev)
			if err != nil {
				t.Fatal(err)
			}
			for i := range inputs {
				if !slices.Equal(back[len(inputs)-1-i], all[i]) {
					t.Errorf("input %d: its vector depends on its place in the pass", i)
				}
			}
		})
	}
}

// TestEmbeddingTables: the token, position and type embeddings are only
// looked up, so they stay in the mapping; the products' matrices are
// repacked or copied on a vector path.
func TestEmbeddingTables(t *testing.T) {
	for _, ks := range kernelSets(t) {
		m := load(t, synthFile(t, "bert-tiny", gguf.TypeQ8_0), ks)
		if m.TokEmbd.Packed() || m.PosEmbd.Packed() {
			t.Errorf("%s: embedding tables copied (token %v, position %v)", ks, m.TokEmbd.Packed(), m.PosEmbd.Packed())
		}
		if !ks.Portable() && !m.Layers[0].Up.Packed() {
			t.Errorf("%s: ffn_up not repacked", ks)
		}
	}
}

// TestRefusals checks bad inputs fail the pass with their own error, naming
// the input, and the encoder still works after.
func TestRefusals(t *testing.T) {
	m := load(t, synthFile(t, "bert-tiny", gguf.TypeQ8_0), kernels.Active())
	e := newEncoder(t, m)
	ok := m.Tokenize("hello")
	long := make([]int32, m.Hyper.Context+1)
	for _, tc := range []struct {
		name   string
		inputs [][]int32
		want   error
	}{
		{"no inputs", nil, ErrNoInput},
		{"an empty input", [][]int32{ok, {}}, ErrEmptyInput},
		{"over the window", [][]int32{ok, long}, ErrTooLong},
		{"a negative id", [][]int32{{101, -1, 102}}, ErrBadToken},
		{"an id past the vocabulary", [][]int32{{101, int32(m.Hyper.Vocab), 102}}, ErrBadToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.Encode(tc.inputs); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := e.Encode([][]int32{long[:m.Hyper.Context]}); err != nil {
		t.Fatalf("an input of exactly the window: %v", err)
	}
	if v, err := e.Encode([][]int32{ok}); err != nil || len(v[0]) != m.Hyper.Embd {
		t.Fatalf("after the refusals: %v, %d dims", err, len(v))
	}
}

// TestLoadRefuses checks a decoder file is refused by name.
func TestLoadRefuses(t *testing.T) {
	if _, err := Load(synthFile(t, "llama-tiny", gguf.TypeQ8_0)); !errors.Is(err, ErrUnsupportedArch) {
		t.Fatalf("loading llama-tiny: %v, want ErrUnsupportedArch", err)
	}
}

// TestFlatOneRowTensors: llama-quantize writes a one-row matrix as a 1-D
// tensor (an XLM-R's single token type, a reranker's single-label head);
// such a file loads and encodes exactly as the 2-D one.
func TestFlatOneRowTensors(t *testing.T) {
	src := synthFile(t, "xlmr-rank-tiny", gguf.TypeF32)
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, k := range slices.Sorted(maps.Keys(f.KV)) {
		if err := w.Set(k, f.KV[k]); err != nil {
			t.Fatal(err)
		}
	}
	flat := 0
	for _, ti := range f.Tensors {
		_, data, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		shape := ti.Shape
		if len(shape) == 2 && shape[1] == 1 {
			shape = shape[:1]
			flat++
		}
		if err := w.AddTensor(ti.Name, shape, ti.Type, data); err != nil {
			t.Fatal(err)
		}
	}
	if flat != 2 {
		t.Fatalf("%d one-row tensors flattened, want token_types and cls.output", flat)
	}
	dst := filepath.Join(t.TempDir(), "flat.gguf")
	if err := w.WriteFile(dst); err != nil {
		t.Fatal(err)
	}
	a, b := load(t, src, kernels.Active()), load(t, dst, kernels.Active())
	if b.TypeRow == nil || b.Hyper.Labels != 1 {
		t.Fatalf("flat file: type row %v, %d labels", b.TypeRow != nil, b.Hyper.Labels)
	}
	ids := [][]int32{a.PairTokens("what is a cat", "a cat is an animal")}
	va, err := newEncoder(t, a).Encode(ids)
	if err != nil {
		t.Fatal(err)
	}
	vb, err := newEncoder(t, b).Encode(ids)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(va[0], vb[0]) {
		t.Fatalf("scores %v and %v differ", va[0], vb[0])
	}
}
