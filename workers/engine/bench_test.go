package engine

import (
	"context"
	"fmt"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// decodeAllocs returns the heap allocations per decoded token in steady state
// on the engine's API path (Submit, the scheduler's steps, sampling, the
// detokenizer and stop matcher, and the events read off the stream): the
// allocations of a 2n-token generation minus those of an n-token one, over n,
// so per-request costs (admission, the event channel, KV reservation) cancel
// out.
func decodeAllocs(t testing.TB, e *Engine, prompt []int32, n int) float64 {
	return float64(extraAllocs(t, e, prompt, n)) / float64(n)
}

// extraAllocs returns how many more heap allocations a 2n-token generation
// makes than an n-token one.
func extraAllocs(t testing.TB, e *Engine, prompt []int32, n int) uint64 {
	t.Helper()
	run := func(tokens int) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		req := Request{Owner: own, Prompt: prompt, MaxTokens: tokens, IgnoreEOS: true}
		events, err := e.Submit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for ev := range events {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			if !ev.Done {
				got++
			}
		}
		runtime.ReadMemStats(&after)
		if got != tokens {
			t.Fatalf("%d tokens, want %d", got, tokens)
		}
		return after.Mallocs - before.Mallocs
	}
	// Warm the engine's buffers and the runtime's caches that a collection
	// empties (its goroutine wait records, which the pool's threads use),
	// then let no collection run, as none would in a steady state that
	// allocates nothing.
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	run(n)
	a, b := run(n), run(2*n)
	if b < a {
		return 0
	}
	return b - a
}

// TestDecodeAllocs checks that the engine's whole API path allocates nothing
// per decoded token in steady state: a request twice as long costs no more
// allocations. The counts are process-wide and the runtime grows its cache of
// goroutine wait records (taken when a pool thread parks, which a busy machine
// makes frequent) for a while, so a measurement may be retried: an allocation
// made per token, or per so many tokens, shows up in every try.
func TestDecodeAllocs(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 2})
	prompt := []int32{1, 400, 300}
	const n = 128
	// Under the race detector one allocation of its own may remain; one made
	// per token, or per up to n tokens, still exceeds it.
	var allowed uint64
	if raceEnabled {
		allowed = 1
	}
	var got uint64
	for range 5 {
		if got = extraAllocs(t, e, prompt, n); got <= allowed {
			return
		}
	}
	t.Fatalf("%d more allocations for %d more tokens, want 0 (%.3f per token)", got, n, float64(got)/n)
}

// TestDecodeStepAllocs checks that a decode step of the forward pass (every
// layer, attention over the paged cache, logits) and greedy sampling allocate
// nothing on the heap in steady state.
func TestDecodeStepAllocs(t *testing.T) {
	checkDecodeStepAllocs(t, loadStories(t), "")
}

// TestDecodeStepAllocsKVTypes is TestDecodeStepAllocs with the KV cache in
// Q8_0 and Q4_0, on a model whose heads they hold (qwen3: 128 values, two
// query heads per KV head).
func TestDecodeStepAllocsKVTypes(t *testing.T) {
	for _, kt := range []kvcache.DType{kvcache.DTypeQ8_0, kvcache.DTypeQ4_0} {
		t.Run(string(kt), func(t *testing.T) { checkDecodeStepAllocs(t, loadArch(t, "qwen3-tiny-f32.gguf"), kt) })
	}
}

func checkDecodeStepAllocs(t *testing.T, m *Model, kt kvcache.DType) {
	e, err := New(nil, m, Config{Threads: 2, KVType: kt})
	if err != nil {
		t.Fatal(err)
	}
	defer e.pool.Close() // Run, which would close it, never starts
	kv := e.kv.NewSequence(own)
	defer kv.Free()
	const steps = 40
	if err := kv.Reserve(3 + steps + 2); err != nil {
		t.Fatal(err)
	}
	prompt := []int32{1, 400, 300}
	e.fw.run([]*chunk{{seq: kv, tokens: prompt, logits: true}})
	smp, err := sample.New(sample.Params{})
	if err != nil {
		t.Fatal(err)
	}
	tok := []int32{0}
	c := &chunk{seq: kv, tokens: tok, logits: true}
	batch := []*chunk{c}
	pos := len(prompt)
	step := func() {
		c.pos0, c.err = pos, nil
		lg := e.fw.run(batch)
		if c.err != nil {
			t.Fatal(c.err)
		}
		tok[0] = smp.Sample(lg[0], nil)
		pos++
	}
	step() // the first decode step sizes the scratch buffers
	if got := testing.AllocsPerRun(steps-2, step); got != 0 {
		t.Fatalf("%.2f allocations per decode step, want 0", got)
	}
}

// BenchmarkDecode reports decode tokens/s and allocations per token on the
// stories model.
func BenchmarkDecode(b *testing.B) {
	m := loadStories(b)
	e := startEngine(b, m, Config{Threads: 2})
	prompt := []int32{1, 400, 300}
	allocs := decodeAllocs(b, e, prompt, 64)
	for b.Loop() {
		if _, err := e.Generate(context.Background(), Request{Owner: own, Prompt: prompt, MaxTokens: 64, IgnoreEOS: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(64*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	// Whole-engine allocations per token, events and their text included
	// (TestDecodeAllocs holds it at zero).
	b.ReportMetric(allocs, "allocs/token")
}

// BenchmarkBatchStep times decode steps of 16 sequences at once, each from a
// 128-token context, 64 steps per iteration (contexts 128..192): the batched
// matrix products and attention of continuous batching. The model is
// BULKHEAD_BENCH_MODEL when set (a GGUF file), stories260K otherwise.
func BenchmarkBatchStep(b *testing.B) {
	batchSteps(b, benchModel(b), make([]*Adapter, 16), false)
}

// BenchmarkLoRABatch is BenchmarkBatchStep with LoRA adapters (rank 16 on
// every projection, random; BULKHEAD_BENCH_LORA_RANK sets another rank): "none" without adapters, "mixed" with the 16
// sequences over 4 adapters and none in one batch (as the engine runs
// them), "serial" the same sequences with one pass per adapter each step
// (as an engine that cannot batch different adapters must run them).
func BenchmarkLoRABatch(b *testing.B) {
	m := benchModel(b)
	path := os.Getenv("BULKHEAD_BENCH_MODEL")
	if path == "" {
		path = refdatatest.Path(b, "models/stories260K.gguf")
	}
	rank := 16
	if r, err := strconv.Atoi(os.Getenv("BULKHEAD_BENCH_LORA_RANK")); err == nil {
		rank = r
	}
	as := synthAdapters(b, m, path, loraSpec{rank, "all", 1, 1}, loraSpec{rank, "all", 2, 1}, loraSpec{rank, "all", 3, 1}, loraSpec{rank, "all", 4, 1})
	mixed := make([]*Adapter, 16)
	for i := range mixed {
		if i%5 < 4 {
			mixed[i] = as[i%5]
		}
	}
	b.Run("none", func(b *testing.B) { batchSteps(b, m, make([]*Adapter, 16), false) })
	b.Run("mixed", func(b *testing.B) { batchSteps(b, m, mixed, false) })
	b.Run("serial", func(b *testing.B) { batchSteps(b, m, mixed, true) })
}

// batchSteps times decode steps of len(adapters) sequences, sequence i under
// adapters[i], each from a 128-token context, 64 steps per iteration
// (contexts 128..192). serial runs each step as one pass per adapter.
func batchSteps(b *testing.B, m *Model, adapters []*Adapter, serial bool) {
	const ctx, steps = 128, 64
	batch := len(adapters)
	e, err := New(nil, m, Config{Threads: 2, MaxBatch: batch, Context: ctx + steps, KVTokens: batch * (ctx + steps + 16)})
	if err != nil {
		b.Fatal(err)
	}
	defer e.pool.Close() // Run, which would close it, never starts
	chunks := make([]*chunk, batch)
	prompt := make([]int32, ctx)
	for i := range prompt {
		prompt[i] = int32(3 + i*7%(m.Hyper.Vocab-3))
	}
	setup := func() {
		for i := range chunks {
			if chunks[i] != nil {
				chunks[i].seq.Free()
			}
			kv := e.kv.NewSequence(own)
			if err := kv.Reserve(ctx + steps); err != nil {
				b.Fatal(err)
			}
			prompt[0] = int32(3 + i)
			e.fw.run([]*chunk{{seq: kv, tokens: prompt, logits: true, adapter: adapters[i]}})
			chunks[i] = &chunk{seq: kv, tokens: []int32{int32(5 + i)}, pos0: ctx, logits: true, adapter: adapters[i]}
		}
	}
	var groups [][]*chunk
	for b.Loop() {
		b.StopTimer()
		setup()
		groups = [][]*chunk{chunks}
		if serial {
			groups = byAdapter(chunks)
		}
		b.StartTimer()
		for range steps {
			for _, g := range groups {
				e.fw.run(g)
			}
			for _, c := range chunks {
				if c.err != nil {
					b.Fatal(c.err)
				}
				c.pos0++
			}
		}
	}
	for _, c := range chunks {
		c.seq.Free()
	}
	b.ReportMetric(float64(batch*steps)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// byAdapter groups chunks by adapter, in order of first appearance.
func byAdapter(chunks []*chunk) [][]*chunk {
	var gs [][]*chunk
	idx := map[*Adapter]int{}
	for _, c := range chunks {
		i, ok := idx[c.adapter]
		if !ok {
			i = len(gs)
			idx[c.adapter] = i
			gs = append(gs, nil)
		}
		gs[i] = append(gs[i], c)
	}
	return gs
}

// BenchmarkVerifyStep times one sequence's decode step (128 positions of
// context) verifying k drafted tokens: its last token and k drafts as one
// chunk with logits after every row, then the drafts' KV rewound, as
// speculative decoding runs it. Its step time over k=0's is what drafting
// costs (priorRowCost). The model is BULKHEAD_BENCH_MODEL when set,
// stories260K otherwise.
func BenchmarkVerifyStep(b *testing.B) {
	m := benchModel(b)
	const ctx = 128
	e, err := New(nil, m, Config{Threads: 2, MaxBatch: 1, Context: ctx + 32, KVTokens: ctx + 32})
	if err != nil {
		b.Fatal(err)
	}
	defer e.pool.Close() // Run, which would close it, never starts
	prompt := make([]int32, ctx)
	for i := range prompt {
		prompt[i] = int32(3 + i*7%(m.Hyper.Vocab-3))
	}
	kv := e.kv.NewSequence(own)
	defer kv.Free()
	if err := kv.Reserve(ctx + 32); err != nil {
		b.Fatal(err)
	}
	e.fw.run([]*chunk{{seq: kv, tokens: prompt, logits: true}})
	for _, k := range []int{0, 1, 2, 3, 4, 7, 8} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			c := &chunk{seq: kv, tokens: prompt[:k+1], pos0: ctx, logits: true, every: k > 0}
			for b.Loop() {
				e.fw.run([]*chunk{c})
				if c.err != nil {
					b.Fatal(c.err)
				}
				if err := kv.Rewind(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchModel is BULKHEAD_BENCH_MODEL when set (a GGUF file, closed when the
// benchmark ends), stories260K otherwise.
func benchModel(b *testing.B) *Model {
	path := os.Getenv("BULKHEAD_BENCH_MODEL")
	if path == "" {
		return loadStories(b)
	}
	m, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// BenchmarkDecodeLongContext reports batch-1 decode tokens/s from a
// 2,048-token context (32 tokens per iteration), the attention-heavy case a
// quantized KV cache must not slow down: BULKHEAD_BENCH_KV_TYPE (f16, q8_0
// or q4_0; default f16) on BULKHEAD_BENCH_MODEL (a model whose head size is a
// multiple of 32 for the quantized types).
func BenchmarkDecodeLongContext(b *testing.B) {
	m := benchModel(b)
	kt, err := kvcache.ParseDType(os.Getenv("BULKHEAD_BENCH_KV_TYPE"))
	if err != nil {
		b.Fatal(err)
	}
	const ctx, gen = 2048, 32
	e := startEngine(b, m, Config{Threads: 2, Context: ctx + gen, KVTokens: ctx + gen, MaxBatch: 1, Draft: -1, KVType: kt})
	rng := rand.New(rand.NewPCG(5, 6))
	prompt := make([]int32, ctx)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(m.Hyper.Vocab))
	}
	// One request keeps its context: prefill once, then time decode steps
	// through a prediction-free request that only generates.
	for b.Loop() {
		b.StopTimer()
		ch, err := e.Submit(context.Background(), Request{Owner: own, Prompt: prompt, MaxTokens: gen, IgnoreEOS: true})
		if err != nil {
			b.Fatal(err)
		}
		first := true
		for ev := range ch {
			if ev.Err != nil {
				b.Fatal(ev.Err)
			}
			if first { // the prompt is prefilled: time the decode steps
				first = false
				b.StartTimer()
			}
		}
	}
	b.ReportMetric(float64(gen-1)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
