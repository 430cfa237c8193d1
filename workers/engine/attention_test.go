package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// TestAttentionHeadBlocks checks attention over a step (attend4 for full
// groups of 4 rows, attendHeads for the heads of a single row that share a
// KV head, attend for the rest) bitwise against attend, one (row, head) at a
// time, for GQA group sizes 1 to 8, head sizes with and without
// the vector kernels, with and without a sliding window: a prefill chunk (full
// and partial row groups) and a decode row of another sequence in one step.
func TestAttentionHeadBlocks(t *testing.T) {
	for _, ks := range kernelSets(t) {
		rng := rand.New(rand.NewPCG(31, 32))
		for _, group := range []int{1, 2, 3, 4, 5, 8} {
			for _, hd := range []int{64, 16, 20} {
				for _, window := range []int{0, 5} {
					t.Run(fmt.Sprintf("%s/group%d/hd%d/window%d", ks, group, hd, window), func(t *testing.T) {
						checkAttention(t, rng, ks, group, hd, window)
					})
				}
			}
		}
	}
}

func checkAttention(t *testing.T, rng *rand.Rand, ks kernels.Set, group, hd, window int) {
	h := Hyper{Vocab: 8, Embd: 8, Layers: 1, Heads: 2 * group, KVHeads: 2, HeadDim: hd, RopeDims: 2, FFN: 8, Context: 64}
	if window > 0 {
		h.Window, h.SWA = window, []bool{true}
	}
	pool := kernels.NewPool(2)
	defer pool.Close()
	fw := newForward(&Model{Hyper: h, kernels: ks}, pool, kvRot{})
	kv, err := kvcache.New(kvcache.Config{Layers: 1, KVHeads: 2, HeadDim: hd, PageSize: 16, Pages: 16, Kernels: ks})
	if err != nil {
		t.Fatal(err)
	}
	kvd := h.KVDim()
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	a, b := kv.NewSequence(own), kv.NewSequence(own)
	defer a.Free()
	defer b.Free()
	const prior = 37 // positions b holds before its decode row
	for s, n := range map[*kvcache.Sequence]int{a: 13, b: prior + 1} {
		if err := s.Reserve(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.WriteRows(0, 0, rnd(prior*kvd), rnd(prior*kvd), prior); err != nil {
		t.Fatal(err)
	}
	chunks := []*chunk{{seq: a, tokens: make([]int32, 13)}, {seq: b, tokens: make([]int32, 1), pos0: prior}}
	T := fw.size(chunks)
	for r := range T {
		fw.rowPos[r], fw.rowChunk[r] = r, 0
		if r == T-1 {
			fw.rowPos[r], fw.rowChunk[r] = prior, 1
		}
	}
	copy(fw.k, rnd(T*kvd))
	copy(fw.v, rnd(T*kvd))
	copy(fw.q, rnd(T*h.QDim()))
	views := fw.appendKV(0, chunks)
	for _, c := range chunks {
		if c.err != nil {
			t.Fatal(c.err)
		}
	}
	fw.attention(0, chunks, views, T)

	sc := &fw.slot[0]
	want := make([]float32, hd)
	for r := range T {
		pos, t0 := fw.rowPos[r], 0
		if window > 0 {
			t0 = max(0, pos-window+1)
		}
		for j := range h.Heads {
			ah := attnHead{view: &views[fw.rowChunk[r]], koff: j / group * hd, kvd: kvd, scale: 1 / float32(math.Sqrt(float64(hd)))}
			ks.F32ToF16s(sc.q16, fw.q[(r*h.Heads+j)*hd:(r*h.Heads+j+1)*hd])
			ks.F16ToF32s(sc.qf, sc.q16)
			clear(want)
			sc.attend(want, &ah, t0, pos+1)
			got := fw.att[(r*h.Heads+j)*hd : (r*h.Heads+j+1)*hd]
			for x := range want {
				if math.Float32bits(got[x]) != math.Float32bits(want[x]) {
					t.Fatalf("row %d head %d dim %d: %g, attend alone %g", r, j, x, got[x], want[x])
				}
			}
		}
	}
}
