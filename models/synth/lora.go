package synth

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/lora"
)

// LoRAConfig describes a random adapter for a base model file.
type LoRAConfig struct {
	Base    string        // the base model's GGUF file
	Rank    int           // 1 to lora.MaxRank
	Targets []lora.Target // the projections it updates
	Alpha   float32       // 0: twice the rank (scale 2)
	Seed    uint64
	Type    gguf.Type // F32 (the zero value), F16 or BF16: A and B are rounded to it
}

// loraEffect is the size of a random adapter's update next to the base
// projection's output, so the adapter visibly changes the model's tokens.
const loraEffect = 0.3

// LoRA returns a random adapter for cfg.Base: every layer's targeted
// projections, A ~ N(0, 1/in) and B scaled so that scale·B·A·x is about
// loraEffect of W·x. The same config gives the same adapter.
func LoRA(cfg LoRAConfig) (*lora.Adapter, error) {
	if cfg.Rank < 1 || cfg.Rank > lora.MaxRank {
		return nil, fmt.Errorf("%w: rank %d (1 to %d)", lora.ErrBadAdapter, cfg.Rank, lora.MaxRank)
	}
	switch cfg.Type {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
	default:
		return nil, fmt.Errorf("%w: adapters are written as F32, F16 or BF16, not %s", lora.ErrBadAdapter, cfg.Type)
	}
	if len(cfg.Targets) == 0 {
		return nil, fmt.Errorf("%w: no targets", lora.ErrBadAdapter)
	}
	f, err := gguf.Open(cfg.Base)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a := &lora.Adapter{Format: "gguf", Rank: cfg.Rank, Alpha: cfg.Alpha}
	a.Arch, _ = f.String("general.architecture")
	if a.Alpha == 0 {
		a.Alpha = float32(2 * cfg.Rank)
	}
	scale := float64(a.Alpha) / float64(cfg.Rank)
	for layer := 0; ; layer++ {
		found := false
		for _, t := range cfg.Targets {
			name := fmt.Sprintf("blk.%d.%s.weight", layer, t)
			info, data, err := f.Tensor(name)
			if err != nil {
				continue
			}
			found = true
			p, err := randomPair(cfg, info, data, scale)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			p.Layer, p.Target = layer, t
			a.Pairs = append(a.Pairs, p)
		}
		if !found {
			break
		}
	}
	if len(a.Pairs) == 0 {
		return nil, fmt.Errorf("%w: %s has none of the targets %v", lora.ErrBadAdapter, cfg.Base, cfg.Targets)
	}
	return a, nil
}

// randomPair draws one projection's A and B; B's spread follows the base
// weight's, measured on its first row.
func randomPair(cfg LoRAConfig, info gguf.TensorInfo, data []byte, scale float64) (lora.Pair, error) {
	in, out := int(info.Shape[0]), int(info.Shape[1])
	size, err := info.Type.RowSize(in)
	if err != nil {
		return lora.Pair{}, err
	}
	row := make([]float32, in)
	if err := gguf.Dequantize(info.Type, data[:size], row); err != nil {
		return lora.Pair{}, err
	}
	var ss float64
	for _, v := range row {
		ss += float64(v) * float64(v)
	}
	wstd := math.Sqrt(ss / float64(in))
	bstd := loraEffect * wstd * math.Sqrt(float64(in)) / (scale * math.Sqrt(float64(cfg.Rank)))
	rng := rand.New(rand.NewPCG(cfg.Seed, TensorSeed(info.Name+".lora")))
	p := lora.Pair{In: in, Out: out, A: make([]float32, cfg.Rank*in), B: make([]float32, out*cfg.Rank)}
	astd := 1 / math.Sqrt(float64(in))
	for i := range p.A {
		p.A[i] = float32(rng.NormFloat64() * astd)
	}
	for i := range p.B {
		p.B[i] = float32(rng.NormFloat64() * bstd)
	}
	p.AType, p.BType = cfg.Type, cfg.Type
	if cfg.Type != gguf.TypeF32 {
		for _, x := range [][]float32{p.A, p.B} {
			for i, v := range x {
				if cfg.Type == gguf.TypeF16 {
					x[i] = gguf.F16ToF32(gguf.F32ToF16(v))
				} else {
					x[i] = gguf.BF16ToF32(gguf.F32ToBF16(v))
				}
			}
		}
	}
	return p, nil
}

// HeadCounts reads a base model file's query and key/value head counts.
func HeadCounts(base string) (heads, kvHeads int, err error) {
	f, err := gguf.Open(base)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	arch, _ := f.String("general.architecture")
	h, ok := f.Uint(arch + ".attention.head_count")
	if !ok {
		return 0, 0, fmt.Errorf("%s: no %s.attention.head_count", base, arch)
	}
	kv, ok := f.Uint(arch + ".attention.head_count_kv")
	if !ok {
		kv = h
	}
	return int(h), int(kv), nil
}
