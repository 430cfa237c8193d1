package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// This file checks the engine against refModel, a deliberately naive float64
// forward pass written straight from the architecture's definition: dense
// weights dequantized once, no KV cache, no paging, no batching, no half
// precision, plain loops. It reads hyperparameters and tensors from the GGUF
// file itself, not through the engine's loader, so a loader mistake (wrong
// metadata key, wrong orientation, a bias or tied output not picked up) shows up
// as a mismatch too.

// refLogitTol bounds the engine's logits against the reference at every
// compared position, as max|engine-ref| / max|ref|. The engine keeps K and V in
// half precision and rounds the query and the softmax weights to half before
// using them (as llama.cpp's non-flash path does); each rounding is a relative
// error of up to 2^-11 ≈ 4.9e-4 per element, and they add up over layers,
// heads and positions. The worst cases observed are 1.3e-3 (stories260K, 28
// prompt + 16 decoded positions) and 1.4e-3 (the synthetic qwen2 model);
// 5e-3 leaves margin for kernel accumulation order and still catches any real
// mistake (a missing bias, wrong RoPE pairing, base or scale, wrong KV head),
// which moves logits by 0.25 to 1.5 of their range (see
// TestQwen2ReferenceMutations).
const refLogitTol = 5e-3

// nearTie is the gap between the reference's top two logits under which the
// engine may pick either: such a choice is decided by rounding, not by the
// model.
const nearTie = 1e-3

// refMat is a dense rows x cols row-major matrix: out[i] = sum_k w[i*cols+k]*x[k].
type refMat struct {
	rows, cols int
	w          []float64
}

func (m *refMat) row(i int) []float64 { return m.w[i*m.cols : (i+1)*m.cols] }

func (m *refMat) apply(x []float64) []float64 {
	if len(x) != m.cols {
		panic(fmt.Sprintf("refMat: %d inputs for %d columns", len(x), m.cols))
	}
	out := make([]float64, m.rows)
	for i := range out {
		s := 0.0
		for k, w := range m.row(i) {
			s += w * x[k]
		}
		out[i] = s
	}
	return out
}

type refLayer struct {
	attnNorm, ffnNorm []float64
	q, k, v, o        *refMat
	qb, kb, vb        []float64 // nil when the file has no biases
	gate, up, down    *refMat
}

type refModel struct {
	vocab, embd, heads, kvHeads, headDim, ropeDims, ffn int
	ropeBase, eps                                       float64
	neox                                                bool
	embed, output                                       *refMat
	outNorm                                             []float64
	layers                                              []refLayer
}

// loadRef reads a llama or qwen2 GGUF file into a refModel.
func loadRef(t testing.TB, path string) *refModel {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	arch, _ := f.String("general.architecture")
	r := &refModel{}
	switch arch {
	case "llama":
	case "qwen2":
		r.neox = true
	default:
		t.Fatalf("reference: architecture %q", arch)
	}
	u := func(key string, def int) int {
		v, ok := f.Uint(arch + "." + key)
		if !ok {
			if def < 0 {
				t.Fatalf("reference: %s.%s missing", arch, key)
			}
			return def
		}
		return int(v)
	}
	fl := func(key string, def float64) float64 {
		if v, ok := f.Float(arch + "." + key); ok {
			return v
		}
		return def
	}
	r.embd = u("embedding_length", -1)
	r.heads = u("attention.head_count", -1)
	r.kvHeads = u("attention.head_count_kv", r.heads)
	r.ffn = u("feed_forward_length", -1)
	r.headDim = r.embd / r.heads
	r.ropeDims = u("rope.dimension_count", r.headDim)
	r.ropeBase = fl("rope.freq_base", 10000)
	r.eps = fl("attention.layer_norm_rms_epsilon", 1e-5)
	nLayers := u("block_count", -1)

	tensor := func(name string, shape ...int) []float64 {
		info, data, err := f.Tensor(name)
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		n := 1
		for _, d := range shape {
			n *= d
		}
		if int(info.Elements()) != n {
			t.Fatalf("reference: %s has shape %v, want %v", name, info.Shape, shape)
		}
		for i, d := range shape {
			if int(info.Shape[i]) != d {
				t.Fatalf("reference: %s has shape %v, want %v", name, info.Shape, shape)
			}
		}
		buf := make([]float32, n)
		if err := gguf.Dequantize(info.Type, data, buf); err != nil {
			t.Fatalf("reference: %s: %v", name, err)
		}
		out := make([]float64, n)
		for i, v := range buf {
			out[i] = float64(v)
		}
		return out
	}
	// A GGML shape [cols, rows] is rows x cols row-major.
	mat := func(name string, rows, cols int) *refMat {
		return &refMat{rows: rows, cols: cols, w: tensor(name, cols, rows)}
	}
	info, _, err := f.Tensor("token_embd.weight")
	if err != nil || len(info.Shape) != 2 {
		t.Fatalf("reference: token_embd.weight: %v %v", info.Shape, err)
	}
	r.vocab = int(info.Shape[1])
	r.embed = mat("token_embd.weight", r.vocab, r.embd)
	r.output = r.embed
	if f.HasTensor("output.weight") {
		r.output = mat("output.weight", r.vocab, r.embd)
	}
	r.outNorm = tensor("output_norm.weight", r.embd)
	qd, kvd := r.heads*r.headDim, r.kvHeads*r.headDim
	for i := range nLayers {
		p := fmt.Sprintf("blk.%d.", i)
		L := refLayer{
			attnNorm: tensor(p+"attn_norm.weight", r.embd),
			q:        mat(p+"attn_q.weight", qd, r.embd),
			k:        mat(p+"attn_k.weight", kvd, r.embd),
			v:        mat(p+"attn_v.weight", kvd, r.embd),
			o:        mat(p+"attn_output.weight", r.embd, qd),
			ffnNorm:  tensor(p+"ffn_norm.weight", r.embd),
			gate:     mat(p+"ffn_gate.weight", r.ffn, r.embd),
			up:       mat(p+"ffn_up.weight", r.ffn, r.embd),
			down:     mat(p+"ffn_down.weight", r.embd, r.ffn),
		}
		if f.HasTensor(p + "attn_q.bias") {
			L.qb = tensor(p+"attn_q.bias", qd)
			L.kb = tensor(p+"attn_k.bias", kvd)
			L.vb = tensor(p+"attn_v.bias", kvd)
		}
		r.layers = append(r.layers, L)
	}
	return r
}

// rmsNorm returns x / sqrt(mean(x^2) + eps) * w.
func (r *refModel) rmsNorm(x, w []float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+r.eps)
	out := make([]float64, len(x))
	for i := range x {
		out[i] = x[i] * s * w[i]
	}
	return out
}

// rope rotates every head of x (heads vectors of headDim) for position pos.
func (r *refModel) rope(x []float64, heads, pos int) {
	d := r.ropeDims
	for h := range heads {
		v := x[h*r.headDim : (h+1)*r.headDim]
		for i := range d / 2 {
			theta := float64(pos) * math.Pow(r.ropeBase, -2*float64(i)/float64(d))
			c, s := math.Cos(theta), math.Sin(theta)
			a, b := 2*i, 2*i+1
			if r.neox {
				a, b = i, i+d/2
			}
			x0, x1 := v[a], v[b]
			v[a] = x0*c - x1*s
			v[b] = x0*s + x1*c
		}
	}
}

func addTo(x, y []float64) {
	for i := range x {
		x[i] += y[i]
	}
}

// forward returns the next-token logits after every position of tokens.
func (r *refModel) forward(tokens []int32) [][]float64 {
	T := len(tokens)
	x := make([][]float64, T)
	for p, tok := range tokens {
		x[p] = slices.Clone(r.embed.row(int(tok)))
	}
	group := r.heads / r.kvHeads
	scale := 1 / math.Sqrt(float64(r.headDim))
	hd := r.headDim
	for _, L := range r.layers {
		q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for p := range T {
			xn := r.rmsNorm(x[p], L.attnNorm)
			q[p], k[p], v[p] = L.q.apply(xn), L.k.apply(xn), L.v.apply(xn)
			if L.qb != nil {
				addTo(q[p], L.qb)
				addTo(k[p], L.kb)
				addTo(v[p], L.vb)
			}
			r.rope(q[p], r.heads, p)
			r.rope(k[p], r.kvHeads, p)
		}
		for p := range T {
			att := make([]float64, r.heads*hd)
			for h := range r.heads {
				g := h / group
				qh := q[p][h*hd : (h+1)*hd]
				scores := make([]float64, p+1)
				top := math.Inf(-1)
				for u := 0; u <= p; u++ {
					s := 0.0
					for j, kv := range k[u][g*hd : (g+1)*hd] {
						s += qh[j] * kv
					}
					scores[u] = s * scale
					top = max(top, scores[u])
				}
				sum := 0.0
				for u := range scores {
					scores[u] = math.Exp(scores[u] - top)
					sum += scores[u]
				}
				out := att[h*hd : (h+1)*hd]
				for u, w := range scores {
					for j, vv := range v[u][g*hd : (g+1)*hd] {
						out[j] += w / sum * vv
					}
				}
			}
			addTo(x[p], L.o.apply(att))
			xn := r.rmsNorm(x[p], L.ffnNorm)
			gate, up := L.gate.apply(xn), L.up.apply(xn)
			for i, g := range gate {
				gate[i] = g / (1 + math.Exp(-g)) * up[i]
			}
			addTo(x[p], L.down.apply(gate))
		}
	}
	logits := make([][]float64, T)
	for p := range T {
		logits[p] = r.output.apply(r.rmsNorm(x[p], r.outNorm))
	}
	return logits
}

// top2 returns the index of the largest value and the gap to the second.
func top2(x []float64) (int, float64) {
	best, second := 0, math.Inf(-1)
	for i, v := range x {
		if v > x[best] {
			second, best = x[best], i
		} else if i != best && v > second {
			second = v
		}
	}
	return best, x[best] - second
}

// engineLogits runs tokens through the engine's forward the way the scheduler
// does, prompt (the first nPrompt tokens) in one chunk, then one token per
// step, and returns the logits after position nPrompt-1 and every later one.
func engineLogits(t testing.TB, m *Model, tokens []int32, nPrompt int) [][]float32 {
	t.Helper()
	return engineLogitsFFN(t, m, tokens, nPrompt, 0)
}

// engineLogitsFFN is engineLogits with the feed-forward taking ffnRows rows
// at a time (0: the model's default).
func engineLogitsFFN(t testing.TB, m *Model, tokens []int32, nPrompt, ffnRows int) [][]float32 {
	t.Helper()
	pool := kernels.NewPool(2)
	defer pool.Close()
	h := m.Hyper
	kv, err := kvcache.New(kvcache.Config{
		Layers: h.Layers, KVHeads: h.KVHeads, HeadDim: h.HeadDim,
		PageSize: 16, Pages: len(tokens)/16 + 1, Poison: true, Kernels: m.Kernels(),
	})
	if err != nil {
		t.Fatal(err)
	}
	seq := kv.NewSequence(own)
	defer seq.Free()
	if err := seq.Reserve(len(tokens)); err != nil {
		t.Fatal(err)
	}
	fw := newForward(m, pool, kvRot{})
	if ffnRows > 0 {
		fw.ffnRows = ffnRows
	}
	var out [][]float32
	step := func(c *chunk) {
		lg := fw.run([]*chunk{c})
		if c.err != nil {
			t.Fatalf("forward at position %d: %v", c.pos0, c.err)
		}
		out = append(out, slices.Clone(lg[0]))
	}
	step(&chunk{seq: seq, tokens: tokens[:nPrompt], pos0: 0, logits: true})
	for p := nPrompt; p < len(tokens); p++ {
		step(&chunk{seq: seq, tokens: tokens[p : p+1], pos0: p, logits: true})
	}
	return out
}

// TestFFNBlocks: the feed-forward taken a few rows at a time gives the
// logits of one pass over the whole prompt, bit for bit; and the default
// block holds a 1B model's 8192-wide hidden rows in 4 MiB, a 135M model's
// 256-token chunk whole.
func TestFFNBlocks(t *testing.T) {
	m := loadStories(t)
	tokens := make([]int32, 40)
	for i := range tokens {
		tokens[i] = int32(1 + (i*37)%(m.Hyper.Vocab-1))
	}
	want := engineLogits(t, m, tokens, 38)
	for _, rows := range []int{1, 7, 16} {
		got := engineLogitsFFN(t, m, tokens, 38, rows)
		for s := range want {
			for i := range want[s] {
				if math.Float32bits(got[s][i]) != math.Float32bits(want[s][i]) {
					t.Fatalf("%d rows at a time: step %d logit %d = %g, want %g", rows, s, i, got[s][i], want[s][i])
				}
			}
		}
	}
	if r := ffnBlockRows(8192); r != 128 {
		t.Errorf("ffnBlockRows(8192) = %d, want 128", r)
	}
	if r := ffnBlockRows(1536); r < 256 {
		t.Errorf("ffnBlockRows(1536) = %d, want a whole 256-token chunk", r)
	}
}

// logitErr is max|got-want| / max|want|.
func logitErr(got []float32, want []float64) float64 {
	var d, s float64
	for i, w := range want {
		d = max(d, math.Abs(float64(got[i])-w))
		s = max(s, math.Abs(w))
	}
	return d / s
}

// compareLogits checks the engine's logits after positions nPrompt-1.. of
// tokens against the reference and returns the worst relative error.
func compareLogits(t *testing.T, m *Model, ref *refModel, tokens []int32, nPrompt int) float64 {
	t.Helper()
	want := ref.forward(tokens)
	got := engineLogits(t, m, tokens, nPrompt)
	worst := 0.0
	for i, g := range got {
		p := nPrompt - 1 + i
		e := logitErr(g, want[p])
		worst = max(worst, e)
		if e > refLogitTol {
			t.Errorf("logits after position %d: relative error %.3g > %.3g", p, e, refLogitTol)
		}
	}
	return worst
}

// checkGreedy generates n tokens with the engine and requires each to be the
// reference's argmax over the same history, except at near-ties.
func checkGreedy(t *testing.T, m *Model, ref *refModel, prompt []int32, n int) []int32 {
	t.Helper()
	e := startEngine(t, m, Config{Threads: 2, Poison: true})
	res, err := e.Generate(context.Background(), Request{Owner: own, Prompt: prompt, MaxTokens: n, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.CompletionTokens) != n {
		t.Fatalf("engine generated %d tokens, want %d", len(res.CompletionTokens), n)
	}
	all := append(slices.Clone(prompt), res.CompletionTokens...)
	want := ref.forward(all)
	ties := 0
	for i, tok := range res.CompletionTokens {
		best, gap := top2(want[len(prompt)-1+i])
		switch {
		case int32(best) == tok:
		case gap < nearTie:
			ties++
			t.Logf("step %d: engine chose %d, reference %d, a near-tie (gap %.2g)", i, tok, best, gap)
		default:
			t.Fatalf("step %d: engine chose token %d, reference argmax %d (gap %.3g)\nengine tokens %v", i, tok, best, gap, res.CompletionTokens)
		}
	}
	return all
}

func TestReferenceStories260K(t *testing.T) {
	path := refdatatest.Path(t, "models/stories260K.gguf")
	m := loadStories(t)
	ref := loadRef(t, path)

	// The reference itself, against llama.cpp: at every step of every golden
	// completion its argmax is llama.cpp's token, near-ties aside.
	t.Run("reference matches llama.cpp", func(t *testing.T) {
		for _, c := range loadGolden(t) {
			all := append(slices.Clone(c.PromptTokens), c.CompletionTokens...)
			want := ref.forward(all)
			for i, tok := range c.CompletionTokens {
				best, gap := top2(want[len(c.PromptTokens)-1+i])
				if int32(best) != tok && gap >= nearTie {
					t.Fatalf("%q step %d: reference argmax %d (gap %.3g), llama.cpp chose %d", c.Prompt, i, best, gap, tok)
				}
			}
		}
	})

	prompt := m.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She loved to play in the park with her", true, false)
	if len(prompt) < 16 {
		t.Fatalf("prompt is only %d tokens", len(prompt))
	}
	t.Run("greedy and logits", func(t *testing.T) {
		all := checkGreedy(t, m, ref, prompt, 16)
		worst := compareLogits(t, m, ref, all, len(prompt))
		t.Logf("stories260K: %d prompt tokens, worst relative logit error %.3g", len(prompt), worst)
	})
}

// Shape of the synthetic qwen2 model.
const (
	qwVocab   = 512
	qwEmbd    = 64
	qwLayers  = 2
	qwHeads   = 4
	qwKVHeads = 2
	qwFFN     = 96
	qwContext = 256
	qwStd     = 0.2
)

// spmVocab returns n SentencePiece tokens with scores and types: <unk>, <s>,
// </s>, the 256 byte tokens, "▁", each lowercase letter bare and with "▁", then
// two-letter pieces until n are filled.
func spmVocab(n int) ([]string, []float32, []int32) {
	var toks []string
	var scores []float32
	var types []int32
	add := func(s string, typ int32) {
		if len(toks) < n {
			toks = append(toks, s)
			scores = append(scores, -float32(len(toks)))
			types = append(types, typ)
		}
	}
	add("<unk>", 2)
	add("<s>", 3)
	add("</s>", 3)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 6)
	}
	add("▁", 1)
	for c := 'a'; c <= 'z'; c++ {
		add(string(c), 1)
		add("▁"+string(c), 1)
	}
	for a := 'a'; a <= 'z'; a++ {
		for b := 'a'; b <= 'z'; b++ {
			add(string([]rune{a, b}), 1)
		}
	}
	return toks, scores, types
}

// writeQwen2 writes a small random qwen2 model (F32, tied output, QKV biases)
// and returns its path.
func writeQwen2(t testing.TB, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	w := gguf.NewWriter()
	w.SetString("general.architecture", "qwen2")
	w.SetString("general.name", "bulkhead-test-qwen2")
	w.SetUint32("qwen2.context_length", qwContext)
	w.SetUint32("qwen2.embedding_length", qwEmbd)
	w.SetUint32("qwen2.block_count", qwLayers)
	w.SetUint32("qwen2.feed_forward_length", qwFFN)
	w.SetUint32("qwen2.attention.head_count", qwHeads)
	w.SetUint32("qwen2.attention.head_count_kv", qwKVHeads)
	w.SetFloat32("qwen2.rope.freq_base", 1e6)
	w.SetFloat32("qwen2.attention.layer_norm_rms_epsilon", 1e-6)
	w.SetUint32("general.file_type", 0)
	toks, scores, types := spmVocab(qwVocab)
	w.SetString("tokenizer.ggml.model", "llama")
	w.SetStrings("tokenizer.ggml.tokens", toks)
	w.SetFloat32s("tokenizer.ggml.scores", scores)
	w.SetInt32s("tokenizer.ggml.token_type", types)
	w.SetUint32("tokenizer.ggml.bos_token_id", 1)
	w.SetUint32("tokenizer.ggml.eos_token_id", 2)
	w.SetUint32("tokenizer.ggml.unknown_token_id", 0)

	add := func(name string, center, std float64, shape ...uint64) {
		n := uint64(1)
		for _, d := range shape {
			n *= d
		}
		data := make([]byte, 4*n)
		for i := range n {
			v := float32(center + std*rng.NormFloat64())
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		if err := w.AddTensor(name, shape, gguf.TypeF32, data); err != nil {
			t.Fatal(err)
		}
	}
	hd := qwEmbd / qwHeads
	qd, kvd := uint64(qwEmbd), uint64(qwKVHeads*hd)
	add("token_embd.weight", 0, qwStd, qwEmbd, qwVocab)
	add("output_norm.weight", 1, qwStd, qwEmbd)
	for i := range qwLayers {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", 1, qwStd, qwEmbd)
		add(p+"attn_q.weight", 0, qwStd, qwEmbd, qd)
		add(p+"attn_q.bias", 0, 1, qd)
		add(p+"attn_k.weight", 0, qwStd, qwEmbd, kvd)
		add(p+"attn_k.bias", 0, 1, kvd)
		add(p+"attn_v.weight", 0, qwStd, qwEmbd, kvd)
		add(p+"attn_v.bias", 0, 1, kvd)
		add(p+"attn_output.weight", 0, qwStd, qd, qwEmbd)
		add(p+"ffn_norm.weight", 1, qwStd, qwEmbd)
		add(p+"ffn_gate.weight", 0, qwStd, qwEmbd, qwFFN)
		add(p+"ffn_up.weight", 0, qwStd, qwEmbd, qwFFN)
		add(p+"ffn_down.weight", 0, qwStd, qwFFN, qwEmbd)
	}
	path := filepath.Join(t.TempDir(), "qwen2-tiny.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func loadQwen2(t testing.TB, path string) *Model {
	t.Helper()
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// qwPrompt is BOS then n-1 token ids drawn from the seeded generator.
func qwPrompt(n int) []int32 {
	rng := rand.New(rand.NewPCG(7, 11))
	p := []int32{1}
	for len(p) < n {
		p = append(p, int32(3+rng.IntN(qwVocab-3)))
	}
	return p
}

func TestReferenceQwen2(t *testing.T) {
	path := writeQwen2(t, 1)
	m := loadQwen2(t, path)
	h := m.Hyper
	if h.Arch != "qwen2" || !h.RopeNeox || !h.QKVBias || !h.TiedEmbed || h.RopeBase != 1e6 || h.NormEps != 1e-6 ||
		h.Heads != qwHeads || h.KVHeads != qwKVHeads || h.HeadDim != qwEmbd/qwHeads || h.FFN != qwFFN || h.Vocab != qwVocab {
		t.Fatalf("loaded hyperparameters %+v do not describe the written model", h)
	}
	ref := loadRef(t, path)
	prompt := qwPrompt(20)
	all := checkGreedy(t, m, ref, prompt, 16)
	worst := compareLogits(t, m, ref, all, len(prompt))
	t.Logf("qwen2: worst relative logit error %.3g", worst)
	// The logits must not be flat, or agreement would prove little.
	want := ref.forward(prompt)[len(prompt)-1]
	if _, gap := top2(want); gap < 0.05 {
		t.Errorf("reference top-2 gap %.3g: the synthetic model's logits are too flat to test with", gap)
	}
}

// TestQwen2ReferenceMutations changes one qwen2-specific feature in both the
// engine's model and the reference, and requires that the engine's logits move
// well beyond the comparison tolerance (the feature is really exercised) while
// still matching the equally changed reference (it is exercised correctly).
func TestQwen2ReferenceMutations(t *testing.T) {
	path := writeQwen2(t, 2)
	prompt := qwPrompt(20)
	base := engineLogits(t, loadQwen2(t, path), prompt, len(prompt))[0]
	tests := []struct {
		name   string
		mutate func(m *Model, r *refModel)
	}{
		{"q bias zeroed", func(m *Model, r *refModel) {
			for i := range m.Layers {
				clear(m.Layers[i].QBias)
				clear(r.layers[i].qb)
			}
		}},
		{"k bias zeroed", func(m *Model, r *refModel) {
			for i := range m.Layers {
				clear(m.Layers[i].KBias)
				clear(r.layers[i].kb)
			}
		}},
		{"v bias zeroed", func(m *Model, r *refModel) {
			for i := range m.Layers {
				clear(m.Layers[i].VBias)
				clear(r.layers[i].vb)
			}
		}},
		{"normal rope instead of neox", func(m *Model, r *refModel) {
			m.Hyper.RopeNeox = false
			r.neox = false
		}},
		{"rope base 1e4", func(m *Model, r *refModel) {
			m.Hyper.RopeBase = 1e4
			r.ropeBase = 1e4
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := loadQwen2(t, path)
			ref := loadRef(t, path)
			tc.mutate(m, ref)
			got := engineLogits(t, m, prompt, len(prompt))[0]
			moved := logitErr(got, f64s(base))
			if moved < 10*refLogitTol {
				t.Errorf("logits moved by only %.3g (relative): the change is not exercised", moved)
			}
			worst := compareLogits(t, m, ref, prompt, len(prompt))
			t.Logf("logits moved %.3g; engine vs reference %.3g", moved, worst)
		})
	}
}

func f64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}
