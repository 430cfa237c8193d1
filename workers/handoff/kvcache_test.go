package handoff

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// Layout converts to and from kvcache.Layout with a plain conversion.
var _ = kvcache.Layout(Layout{})

// TestKVCacheHandoff moves a real sequence's pages from one pool to another:
// prefill writes the prompt's KV and exports its pages, decode verifies the
// manifest against its own pool's layout, fetches, and imports every page
// with the checksum the manifest announced; the imported KV reads back equal.
func TestKVCacheHandoff(t *testing.T) {
	url := queuetest.Server(t).ClientURL()
	cfg := kvcache.Config{Layers: 3, KVHeads: 2, HeadDim: 8, PageSize: 4, Pages: 8}
	src, err := kvcache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := kvcache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const tokens = 11
	prefill := src.NewSequence(kvcache.Owner{Namespace: "tenant-a", Request: "req-1"})
	defer prefill.Free()
	if err := prefill.Reserve(tokens); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	row := cfg.KVHeads * cfg.HeadDim
	for l := range cfg.Layers {
		k, v := make([]float32, tokens*row), make([]float32, tokens*row)
		for i := range k {
			k[i], v[i] = rng.Float32(), rng.Float32()
		}
		if err := prefill.WriteRows(l, 0, k, v, tokens); err != nil {
			t.Fatal(err)
		}
	}
	pages := make([][]byte, len(prefill.Pages()))
	for i := range pages {
		if pages[i], err = prefill.ExportPage(i); err != nil {
			t.Fatal(err)
		}
		if sum, _ := prefill.PageChecksum(i); sum != PageChecksum(pages[i]) {
			t.Fatalf("page %d: kvcache sum %x, handoff sum %x", i, sum, PageChecksum(pages[i]))
		}
	}
	prompt := make([]int32, tokens)
	for i := range prompt {
		prompt[i] = int32(100 + i)
	}
	m, err := NewManifest(Source{
		RequestID: "req-1", Tenant: "tenant-a", Model: "m", WeightsDigest: "d",
		Prompt: prompt, FirstToken: 5, Layout: Layout(src.Layout()),
	}, pages)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSender(queuetest.Conn(t, url), m, pages, SenderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sv := serve(t, s)

	if err := m.Verify(Expect{
		RequestID: "req-1", Tenant: "tenant-a", Model: "m", WeightsDigest: "d",
		PromptTokens: prompt, Layout: Layout(dst.Layout()),
	}); err != nil {
		t.Fatal(err)
	}
	decode := dst.NewSequence(kvcache.Owner{Namespace: "tenant-a", Request: "req-1"})
	defer decode.Free()
	if err := decode.Reserve(m.PromptTokens + 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = Fetch(ctx, queuetest.Conn(t, url), m, ReceiverConfig{MaxChunk: 200}, func(i int, page []byte) error {
		return decode.ImportVerified(i, page, m.Pages[i].Checksum)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sv.wait(t, 5*time.Second); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if decode.Len() != tokens {
		t.Fatalf("decode holds %d tokens, want %d", decode.Len(), tokens)
	}
	for l := range cfg.Layers {
		a, err := prefill.View(l, tokens)
		if err != nil {
			t.Fatal(err)
		}
		b, err := decode.View(l, tokens)
		if err != nil {
			t.Fatal(err)
		}
		for pos := range tokens {
			if !slices.Equal(a.K(pos), b.K(pos)) || !slices.Equal(a.V(pos), b.V(pos)) {
				t.Fatalf("layer %d position %d differs after the handoff", l, pos)
			}
		}
	}
}
