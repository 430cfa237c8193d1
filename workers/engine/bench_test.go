package engine

import (
	"context"
	"runtime"
	"testing"

	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// decodeAllocs returns the heap allocations per decoded token in steady state:
// the allocations of a 2n-token generation minus those of an n-token one, over
// n, so per-request costs (admission, channels, KV reservation) cancel out.
func decodeAllocs(t testing.TB, e *Engine, prompt []int32, n int) float64 {
	t.Helper()
	run := func(tokens int) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		req := Request{Owner: own, Prompt: prompt, MaxTokens: tokens, IgnoreEOS: true}
		if _, err := e.Generate(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	run(n) // warm the engine's buffers
	a, b := run(n), run(2*n)
	if b < a {
		return 0
	}
	return float64(b-a) / float64(n)
}

// TestDecodeStepAllocs checks that a decode step of the forward pass (every
// layer, attention over the paged cache, logits) and greedy sampling allocate
// nothing on the heap in steady state.
func TestDecodeStepAllocs(t *testing.T) {
	m := loadStories(t)
	e, err := New(nil, m, Config{Threads: 2})
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
	// Whole-engine allocations per token, the event's text included (the
	// forward pass and sampling alone allocate nothing: TestDecodeStepAllocs).
	b.ReportMetric(allocs, "allocs/token")
}
