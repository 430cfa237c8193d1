package synth

import (
	"fmt"
	"strings"
)

// Shape is the architecture of a llama model: everything but its weights.
type Shape struct {
	Name          string
	Vocab         int
	Embd          int // embedding length
	Layers        int
	Heads         int
	KVHeads       int
	FFN           int // feed-forward length
	Context       int
	RopeFreqBase  float32
	RMSEps        float32
	TiedEmbedding bool // no output.weight: the output projection reuses token_embd
}

// HeadDim is the per-head dimension (also the rope dimension count).
func (s Shape) HeadDim() int { return s.Embd / s.Heads }

// KVDim is the width of the K and V projections.
func (s Shape) KVDim() int { return s.HeadDim() * s.KVHeads }

// Shapes returns the known shapes. The stories shapes follow llama2.c's
// TinyStories models; stories15m is tied as the reference synthetic file in the
// shared data is (it has no output.weight), stories260k untied as the real
// stories260K.gguf is.
func Shapes() []Shape {
	return []Shape{
		{Name: "smollm2-135m", Vocab: 49152, Embd: 576, Layers: 30, Heads: 9, KVHeads: 3, FFN: 1536,
			Context: 8192, RopeFreqBase: 100000, RMSEps: 1e-5, TiedEmbedding: true},
		{Name: "stories15m", Vocab: 32000, Embd: 288, Layers: 6, Heads: 6, KVHeads: 6, FFN: 768,
			Context: 256, RopeFreqBase: 10000, RMSEps: 1e-5, TiedEmbedding: true},
		{Name: "stories260k", Vocab: 512, Embd: 64, Layers: 5, Heads: 8, KVHeads: 4, FFN: 172,
			Context: 512, RopeFreqBase: 10000, RMSEps: 1e-5},
	}
}

// LookupShape returns the named shape (case-insensitive).
func LookupShape(name string) (Shape, error) {
	var names []string
	for _, s := range Shapes() {
		if strings.EqualFold(s.Name, name) {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Shape{}, fmt.Errorf("%w: %q (known: %s)", ErrUnknownShape, name, strings.Join(names, ", "))
}

// validate checks the shape's numbers are consistent.
func (s Shape) validate() error {
	switch {
	case s.Vocab < firstPiece+1 || s.Embd <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.FFN <= 0 || s.Context <= 0:
		return fmt.Errorf("%w: %s has a non-positive dimension or a vocabulary under %d", ErrBadShape, s.Name, firstPiece+1)
	case s.Embd%s.Heads != 0:
		return fmt.Errorf("%w: %s: embedding %d is not a multiple of %d heads", ErrBadShape, s.Name, s.Embd, s.Heads)
	case s.Heads%s.KVHeads != 0:
		return fmt.Errorf("%w: %s: %d heads are not a multiple of %d KV heads", ErrBadShape, s.Name, s.Heads, s.KVHeads)
	}
	return nil
}
