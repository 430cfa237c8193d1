package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// collect drains a request's events into a Result, failing on an error event.
func collect(t *testing.T, events <-chan Event, prompt []int32) *Result {
	t.Helper()
	res := &Result{PromptTokens: prompt}
	for ev := range events {
		if ev.Err != nil {
			t.Errorf("event error: %v", ev.Err)
			continue
		}
		if !ev.Done {
			res.CompletionTokens = append(res.CompletionTokens, ev.Token)
		}
		res.Text += ev.Text
		if ev.Done {
			res.Finish = ev.Finish
			res.Usage = ev.Usage
		}
	}
	return res
}

// transfer moves a prefilled prompt's KV from p's pool into a new sequence of
// dst reserved for req, page by page through the exported bytes, and checks
// that every page's checksum survives the trip. It releases p.
func transfer(t *testing.T, p *Prefilled, dst *Engine, req Request) *kvcache.Sequence {
	t.Helper()
	defer p.Release()
	if p.Seq.Len() != len(req.Prompt) || p.PromptTokens != len(req.Prompt) {
		t.Fatalf("prefilled %d positions (PromptTokens %d) for a %d-token prompt", p.Seq.Len(), p.PromptTokens, len(req.Prompt))
	}
	seq, err := dst.NewSequenceFor(req)
	if err != nil {
		t.Fatal(err)
	}
	importPages(t, p, seq)
	return seq
}

// importPages copies p's exported pages into seq (reserved for the same
// prompt), checking each checksum on both sides; it frees seq on failure.
func importPages(t *testing.T, p *Prefilled, seq *kvcache.Sequence) {
	t.Helper()
	for i := range kvcache.PagesForTokens(p.PromptTokens, p.Seq.Pool().PageSize()) {
		data, err := p.Seq.ExportPage(i)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := p.Seq.PageChecksum(i)
		if err != nil {
			t.Fatal(err)
		}
		if kvcache.Checksum(data) != sum {
			t.Fatalf("page %d: checksum of the exported bytes differs from PageChecksum", i)
		}
		if err := seq.ImportPage(i, data); err != nil {
			seq.Free()
			t.Fatalf("ImportPage(%d): %v", i, err)
		}
		if got, _ := seq.PageChecksum(i); got != sum {
			seq.Free()
			t.Fatalf("page %d: checksum %#x after import, %#x before", i, got, sum)
		}
	}
}

func checkBaseline(t *testing.T, engines ...*Engine) {
	t.Helper()
	for i, e := range engines {
		if free, total := e.KV().FreePages(), e.KV().TotalPages(); free != total {
			t.Errorf("engine %d: %d of %d KV pages free", i, free, total)
		}
	}
}

// TestPrefillExportImportResume: for every golden prompt, 64 tokens generated
// on one unified engine equal a Prefill on engine A, its pages exported and
// imported into engine B's pool, and a Resume on B. The prompts prefill
// concurrently on A (chunked, batched together); B's pool was dirtied first.
func TestPrefillExportImportResume(t *testing.T) {
	m := loadStories(t)
	cases := loadGolden(t)
	const n = 64
	unified := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	a := startEngine(t, m, Config{Threads: 2, Poison: true, PageSize: 4, ChunkSize: 3, MaxBatch: 4})
	b, err := New(nil, m, Config{Threads: 1, Poison: true, PageSize: 4, KVTokens: 4096})
	if err != nil {
		t.Fatal(err)
	}
	b.cost.prior = true // what is drafted depends on the tokens only
	runEngine(t, b)
	// Dirty B's pool: other tenants write and free pages first.
	for _, c := range cases[:3] {
		r := greedy(c.PromptTokens, 40)
		r.Owner = kvcache.Owner{Namespace: "other", Request: "dirt"}
		if _, err := b.Generate(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]*Result, len(cases))
	for i, c := range cases {
		res, err := unified.Generate(context.Background(), greedy(c.PromptTokens, n))
		if err != nil {
			t.Fatal(err)
		}
		want[i] = res
	}
	pre := make([]*Prefilled, len(cases))
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() { pre[i], errs[i] = a.Prefill(context.Background(), greedy(c.PromptTokens, n)) })
	}
	wg.Wait()
	for i, c := range cases {
		t.Run(c.Prompt, func(t *testing.T) {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			req := greedy(c.PromptTokens, n)
			if i%2 == 0 {
				// The decode side drafts on the handed-over KV from a
				// prediction (the unsplit output), output unchanged.
				req.Prediction = want[i].CompletionTokens
			}
			seq := transfer(t, pre[i], b, req)
			events, err := b.Resume(context.Background(), req, seq, pre[i].First)
			if err != nil {
				seq.Free()
				t.Fatal(err)
			}
			got := collect(t, events, req.Prompt)
			if j := firstDiff(got.CompletionTokens, want[i].CompletionTokens); j >= 0 {
				t.Fatalf("token %d differs after the handoff:\n got %v\nwant %v", j, got.CompletionTokens, want[i].CompletionTokens)
			}
			if got.Text != want[i].Text || got.Finish != want[i].Finish {
				t.Errorf("text %q finish %q, unified %q %q", got.Text, got.Finish, want[i].Text, want[i].Finish)
			}
			if req.Prediction != nil && got.Usage.AcceptedPrediction == 0 {
				t.Errorf("a right prediction on the decode side: usage %+v, want drafts accepted", got.Usage)
			}
		})
	}
	checkBaseline(t, a, b, unified)
}

// TestHandoffSampled: with a seeded sampler the split run draws the same
// random stream as the unified one.
func TestHandoffSampled(t *testing.T) {
	m := loadStories(t)
	prompt := loadGolden(t)[0].PromptTokens
	e := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	d := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	for _, tc := range []struct {
		name string
		p    sample.Params
	}{
		{"whole vocabulary", sample.Params{Temperature: 0.9, Seed: 7}},
		{"top-k and top-p", sample.Params{Temperature: 1.2, TopK: 20, TopP: 0.9, Seed: 11}},
		{"penalties", sample.Params{Temperature: 0.8, RepetitionPenalty: 1.3, Seed: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := greedy(prompt, 40)
			req.Sampling = tc.p
			want, err := e.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			p, err := e.Prefill(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			seq := transfer(t, p, d, req)
			events, err := d.Resume(context.Background(), req, seq, p.First)
			if err != nil {
				seq.Free()
				t.Fatal(err)
			}
			got := collect(t, events, prompt)
			if !equal(got.CompletionTokens, want.CompletionTokens) {
				t.Fatalf("sampled tokens differ after the handoff:\n got %v\nwant %v", got.CompletionTokens, want.CompletionTokens)
			}
		})
	}
	checkBaseline(t, e, d)
}

// TestRecomputeEqualsUnsplit: a decode engine that recomputes the prompt
// (Recompute, no pages imported) from the prefill's first token continues as
// the unified run does, greedy and seeded, on a pool other tenants dirtied;
// a first token outside the vocabulary is refused before anything runs.
func TestRecomputeEqualsUnsplit(t *testing.T) {
	m := loadStories(t)
	cases := loadGolden(t)
	unified := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	a := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	b := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4, ChunkSize: 3})
	dirt := greedy(cases[1].PromptTokens, 40)
	dirt.Owner = kvcache.Owner{Namespace: "other", Request: "dirt"}
	if _, err := b.Generate(context.Background(), dirt); err != nil {
		t.Fatal(err)
	}
	reqs := map[string]Request{}
	for _, c := range cases[:4] {
		reqs["greedy "+c.Prompt] = greedy(c.PromptTokens, 48)
	}
	seeded := greedy(cases[0].PromptTokens, 40)
	seeded.Sampling = sample.Params{Temperature: 0.9, TopK: 20, Seed: 7}
	reqs["seeded"] = seeded
	for name, req := range reqs {
		t.Run(name, func(t *testing.T) {
			want, err := unified.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			p, err := a.Prefill(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			p.Release()
			events, err := b.Recompute(context.Background(), req, p.First)
			if err != nil {
				t.Fatal(err)
			}
			got := collect(t, events, req.Prompt)
			if j := firstDiff(got.CompletionTokens, want.CompletionTokens); j >= 0 {
				t.Fatalf("token %d differs after recomputing:\n got %v\nwant %v", j, got.CompletionTokens, want.CompletionTokens)
			}
			if got.Text != want.Text || got.Finish != want.Finish {
				t.Errorf("text %q finish %q, unified %q %q", got.Text, got.Finish, want.Text, want.Finish)
			}
		})
	}
	if _, err := b.Recompute(context.Background(), greedy(cases[0].PromptTokens, 8), int32(m.Hyper.Vocab)); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("first token outside the vocabulary: %v, want ErrInvalidRequest", err)
	}
	checkBaseline(t, a, b, unified)
}

// TestImportRefusesDamagedPages: a page with a flipped byte fails its
// checksum, and one truncated or with an inflated count is refused by
// ImportPage; nothing is written, and the request never reaches Resume.
func TestImportRefusesDamagedPages(t *testing.T) {
	m := loadStories(t)
	a := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	b := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	req := greedy(loadGolden(t)[3].PromptTokens, 8) // 10 tokens: pages of 4, 4, 2
	p, err := a.Prefill(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	last, err := p.Seq.ExportPage(2)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := p.Seq.PageChecksum(2)
	count := func(b []byte, c uint32) []byte {
		b = slices.Clone(b)
		per := len(b) / m.Hyper.Layers
		for l := range m.Hyper.Layers {
			binary.LittleEndian.PutUint32(b[l*per:], c)
		}
		return b
	}
	flip := func(at int) []byte { b := slices.Clone(last); b[at] ^= 0x10; return b }
	tests := []struct {
		name   string
		data   []byte
		verify bool // compare against the sender's checksum first
		want   error
	}{
		{"flipped K byte", flip(4), true, kvcache.ErrChecksum},
		{"flipped V byte", flip(len(last) - 1), true, kvcache.ErrChecksum},
		{"flipped count byte", flip(0), false, kvcache.ErrBadPage},
		{"truncated", last[:len(last)-2], false, kvcache.ErrBadPage},
		{"truncated to a count", last[:4], false, kvcache.ErrBadPage},
		{"inflated count", count(last, 3), false, kvcache.ErrBadPage},
		{"count beyond the page", count(last, 5), false, kvcache.ErrBadPage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq := transferPages(t, p, b, req, 2)
			defer seq.Free()
			var err error
			if tc.verify {
				err = seq.ImportVerified(2, tc.data, sum)
			} else {
				err = seq.ImportPage(2, tc.data)
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, kvcache.ErrBadPage) {
				t.Fatalf("import = %v, want %v", err, tc.want)
			}
			if seq.Len() != 8 {
				t.Fatalf("Len = %d after a refused import, want 8", seq.Len())
			}
			for l := range m.Hyper.Layers {
				if w, _ := b.KV().PageWritten(seq.Pages()[2], l); w != 0 {
					t.Fatalf("refused page has %d slots written at layer %d", w, l)
				}
			}
			if _, err := b.Resume(context.Background(), req, seq, p.First); !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("Resume with the last page refused: %v, want ErrInvalidRequest", err)
			}
		})
	}
	p.Release()
	checkBaseline(t, a, b)
}

// transferPages imports the first pages pages of p into a new sequence of dst.
func transferPages(t *testing.T, p *Prefilled, dst *Engine, req Request, pages int) *kvcache.Sequence {
	t.Helper()
	seq, err := dst.NewSequenceFor(req)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pages {
		data, err := p.Seq.ExportPage(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := seq.ImportPage(i, data); err != nil {
			t.Fatal(err)
		}
	}
	return seq
}

// TestResumeRefused: Resume checks the sequence it is given before any token.
func TestResumeRefused(t *testing.T) {
	m := loadStories(t)
	a := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	b := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	req := greedy(loadGolden(t)[3].PromptTokens, 8) // 10 tokens
	p, err := a.Prefill(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	other := req
	other.Owner = kvcache.Owner{Namespace: "someone-else", Request: "r"}
	shortCap := b.KV().NewSequence(req.Owner)
	if err := shortCap.Reserve(len(req.Prompt)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		data, _ := p.Seq.ExportPage(i)
		if err := shortCap.ImportPage(i, data); err != nil {
			t.Fatal(err)
		}
	}
	defer shortCap.Free()
	longer := greedy(append(slices.Clone(req.Prompt), 5), 8)
	tests := []struct {
		name  string
		req   Request
		seq   func(t *testing.T) *kvcache.Sequence
		first int32
	}{
		{"one page missing", req, func(t *testing.T) *kvcache.Sequence { return transferPages(t, p, b, req, 2) }, p.First},
		{"no pages", req, func(t *testing.T) *kvcache.Sequence { return transferPages(t, p, b, req, 0) }, p.First},
		{"sequence of another pool", req, func(t *testing.T) *kvcache.Sequence { return nil }, p.First},
		{"another tenant's request", other, func(t *testing.T) *kvcache.Sequence { return transferPages(t, p, b, req, 3) }, p.First},
		{"room for the prompt only", req, func(t *testing.T) *kvcache.Sequence { return shortCap }, p.First},
		{"prompt longer than the KV", longer, func(t *testing.T) *kvcache.Sequence {
			s, err := b.NewSequenceFor(longer)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				data, _ := p.Seq.ExportPage(i)
				if err := s.ImportPage(i, data); err != nil {
					t.Fatal(err)
				}
			}
			return s
		}, p.First},
		{"first token out of vocabulary", req, func(t *testing.T) *kvcache.Sequence { return transferPages(t, p, b, req, 3) }, int32(m.Hyper.Vocab)},
		{"negative first token", req, func(t *testing.T) *kvcache.Sequence { return transferPages(t, p, b, req, 3) }, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq := tc.seq(t)
			if seq == nil {
				seq = p.Seq // lives in a's pool
			} else if seq != shortCap {
				defer seq.Free()
			}
			events, err := b.Resume(context.Background(), tc.req, seq, tc.first)
			if !errors.Is(err, ErrInvalidRequest) || events != nil {
				t.Fatalf("Resume = %v (events %v), want ErrInvalidRequest and no stream", err, events != nil)
			}
		})
	}
	t.Run("freed sequence", func(t *testing.T) {
		seq := transferPages(t, p, b, req, 3)
		seq.Free()
		if _, err := b.Resume(context.Background(), req, seq, p.First); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("Resume of a freed sequence = %v, want ErrInvalidRequest", err)
		}
	})
	t.Run("the full sequence is accepted", func(t *testing.T) {
		seq := transferPages(t, p, b, req, 3)
		events, err := b.Resume(context.Background(), req, seq, p.First)
		if err != nil {
			seq.Free()
			t.Fatal(err)
		}
		if res := collect(t, events, req.Prompt); len(res.CompletionTokens) == 0 || res.CompletionTokens[0] != p.First {
			t.Fatalf("completion %v does not start with the prefilled token %d", res.CompletionTokens, p.First)
		}
	})
	p.Release()
	shortCap.Free()
	checkBaseline(t, a, b)
}

// TestResumeEndsOnFirst: a first token that is the end of generation, or a
// max_tokens of 1, ends the request at once and frees the sequence.
func TestResumeEndsOnFirst(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	prompt := loadGolden(t)[0].PromptTokens
	eos := int32(-1)
	for id := range int32(m.Hyper.Vocab) {
		if m.Tokenizer.IsEOG(id) {
			eos = id
			break
		}
	}
	if eos < 0 {
		t.Fatal("model has no end-of-generation token")
	}
	tests := []struct {
		name       string
		maxTokens  int
		first      int32
		wantFinish string
	}{
		{"max tokens 1", 1, prompt[1], "length"},
		{"end of generation", 10, eos, "stop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := greedy(prompt, tc.maxTokens)
			p, err := e.Prefill(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			seq := transfer(t, p, e, req)
			events, err := e.Resume(context.Background(), req, seq, tc.first)
			if err != nil {
				seq.Free()
				t.Fatal(err)
			}
			res := collect(t, events, prompt)
			if !equal(res.CompletionTokens, []int32{tc.first}) || res.Finish != tc.wantFinish {
				t.Fatalf("completion %v finish %q, want [%d] %q", res.CompletionTokens, res.Finish, tc.first, tc.wantFinish)
			}
			checkBaseline(t, e)
		})
	}
}

// TestPrefillRefused: Prefill admits as Submit does, except that its pool
// must hold only the prompt (the completion's KV lives on the decode side),
// reserving nothing for a request it refuses, and frees its pages when
// cancelled.
func TestPrefillRefused(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, Poison: true, Context: 64, KVTokens: 64})
	small := startEngine(t, m, Config{Threads: 1, Poison: true, Context: 2048, KVTokens: 32, AllowSmallPool: true})
	tests := []struct {
		name  string
		e     *Engine
		req   Request
		want  error
		limit int
	}{
		{"prompt over context", e, greedy(make([]int32, 70), 1), ErrContextLength, 64},
		{"prompt plus max tokens over context", e, greedy(make([]int32, 60), 5), ErrContextLength, 64},
		{"prompt over the pool", small, greedy(make([]int32, 40), 5), ErrExceedsPool, 32},
		{"no tenant", e, Request{Prompt: []int32{1}, MaxTokens: 1}, ErrInvalidRequest, 0},
		{"empty prompt", e, greedy(nil, 1), ErrInvalidRequest, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.e.Prefill(context.Background(), tc.req)
			if !errors.Is(err, tc.want) || p != nil {
				t.Fatalf("Prefill = %v, %v; want %v", p, err, tc.want)
			}
			var le *LengthError
			if tc.limit > 0 && (!errors.As(err, &le) || le.Limit != tc.limit || le.PromptTokens != len(tc.req.Prompt)) {
				t.Fatalf("error %v, want a LengthError naming %d prompt tokens and the limit %d", err, len(tc.req.Prompt), tc.limit)
			}
			if used := tc.e.KV().UsedPages(); used != 0 {
				t.Fatalf("%d KV pages allocated for a refused prefill", used)
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		p, err := e.Prefill(ctx, greedy([]int32{1, 403, 407}, 4))
		if !errors.Is(err, context.Canceled) || p != nil {
			t.Fatalf("Prefill with a cancelled context = %v, %v; want context.Canceled", p, err)
		}
		checkBaseline(t, e)
	})
	t.Run("reserves the prompt only", func(t *testing.T) {
		p, err := e.Prefill(context.Background(), greedy(make([]int32, 20), 40))
		if err != nil {
			t.Fatal(err)
		}
		if p.Seq.Cap() != 20 || p.Seq.Len() != 20 {
			t.Errorf("prefilled sequence Cap %d Len %d, want 20 and 20", p.Seq.Cap(), p.Seq.Len())
		}
		p.Release()
		p.Release() // idempotent
		checkBaseline(t, e)
	})
}

// TestWaitsForHandedOffPages: a request that finds the pool held by a
// prefilled sequence awaiting hand-over waits for it instead of failing, and
// runs once the pages come back.
func TestWaitsForHandedOffPages(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, Context: 256, KVTokens: 256, Poison: true})
	long := make([]int32, 200)
	for i := range long {
		long[i] = int32(3 + i%400)
	}
	held, err := e.Prefill(context.Background(), greedy(long, 50))
	if err != nil {
		t.Fatal(err)
	}
	events, err := e.Submit(context.Background(), greedy([]int32{1, 403, 407}, 100))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		t.Fatalf("got %+v while the pool was held; want the request to wait", ev)
	case <-time.After(50 * time.Millisecond):
	}
	held.Release()
	var last Event
	n := 0
	for ev := range events {
		last = ev
		n++
	}
	if last.Err != nil || !last.Done || n < 2 {
		t.Fatalf("after the release: %d events, last %+v", n, last)
	}
}

// TestPrefillPoolHoldsOnlyThePrompt: a prompt that fits the prefill pool is
// prefilled even when prompt + max_tokens would not fit it; Submit on the same
// pool refuses that request.
func TestPrefillPoolHoldsOnlyThePrompt(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, Poison: true, Context: 2048, KVTokens: 32, AllowSmallPool: true})
	req := greedy([]int32{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295}, 20)
	p, err := e.Prefill(context.Background(), req)
	if err != nil {
		t.Fatalf("Prefill of a 30-token prompt into a 32-token pool: %v", err)
	}
	p.Release()
	if _, err := e.Submit(context.Background(), req); !errors.Is(err, ErrExceedsPool) {
		t.Fatalf("Submit of 30 + 20 tokens on a 32-token pool: %v, want ErrExceedsPool", err)
	}
}

// TestReserveTakesItsTurn: a decode pool full of one tenant's resumed
// sequences. Another tenant's Reserve is admitted in its fair turn, the
// resumed sequences preempted for it (they recompute their history on this
// engine), and every output matches an undisturbed run: A's, resumed and
// preempted, and B's, handed over into A's pool.
func TestReserveTakesItsTurn(t *testing.T) {
	m := loadStories(t)
	cases := loadGolden(t)
	const n = 240 // with the prompt, 16 of the decode pool's 32 pages
	mk := func(ns string, i int, prompt []int32, max int) Request {
		return Request{Owner: kvcache.Owner{Namespace: ns, Request: fmt.Sprint(i)}, Prompt: prompt, MaxTokens: max, IgnoreEOS: true}
	}
	quiet := startEngine(t, m, Config{Threads: 1, Poison: true})
	want := func(r Request) []int32 {
		res, err := quiet.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return res.CompletionTokens
	}
	prefill := startEngine(t, m, Config{Threads: 1, Poison: true})
	handOver := func(dst *Engine, r Request) (*Prefilled, error) { return prefill.Prefill(context.Background(), r) }
	// The decode pool holds two of A's reservations and nothing more. Its
	// steps can be held (frozen), so that B's reservation arrives while A's
	// sequences still run, however fast they decode.
	var frozen sync.Mutex
	dec := startEngine(t, m, Config{Threads: 1, Poison: true, Context: 512, KVTokens: 2 * 256, MaxBatch: 4,
		OnStep: func(running int) {
			if running == 2 {
				// A gate: the step waits here until the test unlocks it.
				frozen.Lock()
				//lint:ignore SA2001 the lock is held by the test, not shared state
				frozen.Unlock()
			}
		}})
	frozen.Lock()
	thaw := sync.OnceFunc(frozen.Unlock)
	t.Cleanup(thaw) // before the engine's own: a failed test must not leave it frozen
	reqs := []Request{mk("a", 0, cases[0].PromptTokens, n), mk("a", 1, cases[1].PromptTokens, n)}
	seqs, firsts := make([]*kvcache.Sequence, 2), make([]int32, 2)
	for i, r := range reqs {
		p, err := handOver(dec, r)
		if err != nil {
			t.Fatal(err)
		}
		seqs[i], firsts[i] = transfer(t, p, dec, r), p.First
	}
	refs := [][]int32{want(reqs[0]), want(reqs[1])}
	var wg sync.WaitGroup
	for i, r := range reqs {
		ref := refs[i]
		events, err := dec.Resume(context.Background(), r, seqs[i], firsts[i])
		if err != nil {
			seqs[i].Free()
			t.Fatal(err)
		}
		wg.Go(func() {
			got := collect(t, events, r.Prompt)
			if j := firstDiff(got.CompletionTokens, ref); j >= 0 {
				t.Errorf("A's request %d: token %d differs after preemption", i, j)
			}
		})
	}
	testkit.Poll(t, 10*time.Second, testkit.Cond("A's two sequences running", func() bool { return dec.Stats().Running == 2 }))
	if seq, err := dec.NewSequenceFor(mk("b", 0, cases[2].PromptTokens, 8)); !errors.Is(err, kvcache.ErrPoolExhausted) {
		if err == nil {
			seq.Free()
		}
		t.Fatalf("NewSequenceFor on the full pool: %v, want ErrPoolExhausted", err)
	}
	b := mk("b", 0, cases[2].PromptTokens, 8)
	ref := want(b)
	p, err := handOver(dec, b)
	if err != nil {
		t.Fatal(err)
	}
	var seq *kvcache.Sequence
	reserved := make(chan error, 1)
	go func() {
		var err error
		seq, err = dec.Reserve(context.Background(), b)
		reserved <- err
	}()
	testkit.Poll(t, 10*time.Second, testkit.Cond("B's reservation waiting", func() bool { return dec.Stats().Waiting == 1 }))
	thaw()
	if err := <-reserved; err != nil {
		p.Release()
		t.Fatal(err)
	}
	importPages(t, p, seq)
	p.Release()
	events, err := dec.Resume(context.Background(), b, seq, p.First)
	if err != nil {
		seq.Free()
		t.Fatal(err)
	}
	if got := collect(t, events, b.Prompt); !slices.Equal(got.CompletionTokens, ref) {
		t.Errorf("B's tokens %v, %v undisturbed", got.CompletionTokens, ref)
	}
	wg.Wait()
	if got := dec.Service()["a"].Preempted; got < 1 {
		t.Errorf("A preempted %d times, want at least once for B", got)
	}
	checkBaseline(t, prefill, dec)
}

// TestReserveRefused: Reserve refuses what Submit would, and gives up when
// its context ends while it waits.
func TestReserveRefused(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, Poison: true, Context: 512, KVTokens: 512})
	if _, err := e.Reserve(context.Background(), greedy(nil, 4)); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("empty prompt: %v, want ErrInvalidRequest", err)
	}
	if _, err := e.Reserve(context.Background(), greedy([]int32{1, 403}, 600)); err == nil {
		t.Error("a request over the window was reserved")
	}
	held, err := e.Reserve(context.Background(), greedy([]int32{1, 403}, 500))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := e.Reserve(ctx, greedy([]int32{1, 403}, 100)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Reserve on a pool held by the same tenant, until a deadline: %v", err)
	}
	held.Free()
	seq, err := e.Reserve(context.Background(), greedy([]int32{1, 403}, 100))
	if err != nil {
		t.Fatal(err)
	}
	seq.Free()
	checkBaseline(t, e)
}

// TestHeldKVNeverWaitsBehindTheHead: a sequence holding its imported KV
// (waiting for Resume's batch slot) is admitted even while the request
// fairness picks first cannot fit, because the pages that request waits for
// are the held sequence's own: both finish, where before they waited on each
// other until their deadlines (the disaggregated canary's two 408s).
func TestHeldKVNeverWaitsBehindTheHead(t *testing.T) {
	m := loadStories(t)
	cases := loadGolden(t)
	a := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4})
	b := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4, Context: 128, KVTokens: 128})
	held := greedy(cases[0].PromptTokens, 80) // with its completion, more than half the pool
	held.Owner = kvcache.Owner{Namespace: "held", Request: "r"}
	p, err := a.Prefill(context.Background(), held)
	if err != nil {
		t.Fatal(err)
	}
	seq := transfer(t, p, b, held)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	head := greedy(cases[1].PromptTokens, 80) // does not fit beside it
	head.Owner = kvcache.Owner{Namespace: "head", Request: "r"}
	headEvents, err := b.Submit(ctx, head)
	if err != nil {
		seq.Free()
		t.Fatal(err)
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("the head to wait", func() bool { return b.Stats().Waiting == 1 }))
	heldEvents, err := b.Resume(ctx, held, seq, p.First)
	if err != nil {
		seq.Free()
		t.Fatal(err)
	}
	for name, events := range map[string]<-chan Event{"held": heldEvents, "head": headEvents} {
		if got := collect(t, events, nil); got.Finish == "" {
			t.Errorf("%s: no finish", name)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the two requests waited on each other until the deadline")
	}
	checkBaseline(t, a, b)
}
