package lora

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// WriteGGUF writes a as llama.cpp's GGUF adapter, for the base
// architecture a.Arch: each matrix in its pair's AType or BType, F32, F16
// or BF16 (values rounded to it).
func WriteGGUF(w io.Writer, a *Adapter) error {
	g := gguf.NewWriter()
	g.SetString("general.architecture", a.Arch)
	g.SetString("general.type", "adapter")
	g.SetString("adapter.type", "lora")
	g.SetFloat32("adapter.lora.alpha", a.Alpha)
	for _, p := range a.Pairs {
		rank := uint64(len(p.A) / p.In)
		name := fmt.Sprintf("blk.%d.%s.weight", p.Layer, p.Target)
		ab, err := encode(p.A, p.AType)
		if err != nil {
			return err
		}
		bb, err := encode(p.B, p.BType)
		if err != nil {
			return err
		}
		if err := g.AddTensor(name+".lora_a", []uint64{uint64(p.In), rank}, p.AType, ab); err != nil {
			return err
		}
		if err := g.AddTensor(name+".lora_b", []uint64{rank, uint64(p.Out)}, p.BType, bb); err != nil {
			return err
		}
	}
	if err := g.Err(); err != nil {
		return err
	}
	_, err := g.WriteTo(w)
	return err
}

// hfModule names a target's Hugging Face module (phi3 fuses gate and up).
func hfModule(t Target, arch string) string {
	if t == FFNUp && arch == "phi3" {
		return "gate_up_proj"
	}
	for name, tt := range hfTargets {
		if tt == t && name != "gate_up_proj" {
			return name
		}
	}
	return string(t)
}

// WritePEFT writes a into dir as PEFT's adapter_model.safetensors (each
// matrix in its pair's type, F32, F16 or BF16) and
// adapter_config.json. Its pairs must already be in Hugging Face's row order
// (ToHFOrder for llama's Q and K).
func WritePEFT(dir string, a *Adapter, baseModel string) error {
	type entry struct {
		name string
		rows int
		data []float32
		typ  gguf.Type
	}
	var es []entry
	var mods []string
	for _, p := range a.Pairs {
		mod := hfModule(p.Target, a.Arch)
		if !slices.Contains(mods, mod) {
			mods = append(mods, mod)
		}
		block := "self_attn"
		if p.Target == FFNGate || p.Target == FFNUp || p.Target == FFNDown {
			block = "mlp"
		}
		base := fmt.Sprintf("base_model.model.model.layers.%d.%s.%s", p.Layer, block, mod)
		es = append(es, entry{base + ".lora_A.weight", len(p.A) / p.In, p.A, p.AType}, entry{base + ".lora_B.weight", p.Out, p.B, p.BType})
	}
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	var data []byte
	for _, e := range es {
		b, err := encode(e.data, e.typ)
		if err != nil {
			return err
		}
		data = append(data, b...)
		hdr[e.name] = safetensorsEntry{DType: strings.ToUpper(e.typ.String()), Shape: []int{e.rows, len(e.data) / e.rows}, Offsets: [2]int64{off, off + int64(len(b))}}
		off += int64(len(b))
	}
	hj, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	buf := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
	buf = append(append(buf, hj...), data...)
	if err := os.WriteFile(filepath.Join(dir, PEFTWeights), buf, 0o644); err != nil {
		return err
	}
	cfg := map[string]any{"peft_type": "LORA", "r": a.Rank, "lora_alpha": a.Alpha, "target_modules": mods,
		"bias": "none", "lora_dropout": 0.0, "task_type": "CAUSAL_LM", "base_model_name_or_path": baseModel}
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, PEFTConfig), append(cj, '\n'), 0o644)
}

// encode writes x as F32, F16 or BF16 (rounded to nearest even).
func encode(x []float32, t gguf.Type) ([]byte, error) {
	switch t {
	case gguf.TypeF32:
		b := make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b, nil
	case gguf.TypeF16, gguf.TypeBF16:
		b := make([]byte, 2*len(x))
		for i, v := range x {
			h := gguf.F32ToF16(v)
			if t == gguf.TypeBF16 {
				h = gguf.F32ToBF16(v)
			}
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: cannot write %s matrices", ErrBadAdapter, t)
}

// ToGGUFOrder reorders the rows of b (rows of cols floats) from Hugging
// Face's rotary layout to GGUF's for heads heads: llama.cpp's converter
// permutes llama's Q and K weights so each head's rotated pairs are
// adjacent, and a PEFT adapter's B for them must be permuted the same way.
// Within a head of d rows, GGUF row 2j+i is Hugging Face row i·d/2+j.
func ToGGUFOrder(b []float32, cols, heads int) []float32 { return permuteRows(b, cols, heads, false) }

// ToHFOrder is the inverse of ToGGUFOrder.
func ToHFOrder(b []float32, cols, heads int) []float32 { return permuteRows(b, cols, heads, true) }

func permuteRows(b []float32, cols, heads int, inverse bool) []float32 {
	out := make([]float32, len(b))
	d := len(b) / cols / heads
	for h := range heads {
		for j := range d / 2 {
			for i := range 2 {
				g := h*d + 2*j + i
				hf := h*d + i*d/2 + j
				src, dst := hf, g
				if inverse {
					src, dst = g, hf
				}
				copy(out[dst*cols:(dst+1)*cols], b[src*cols:(src+1)*cols])
			}
		}
	}
	return out
}

// Permuted returns a copy of a whose Q and K updates have their B rows moved
// to Hugging Face's order (toHF) or back to GGUF's, for a base model of
// heads query and kvHeads key heads (see ToGGUFOrder). Other pairs are shared.
func (a *Adapter) Permuted(heads, kvHeads int, toHF bool) *Adapter {
	c := *a
	c.Pairs = slices.Clone(a.Pairs)
	for i, p := range c.Pairs {
		n := 0
		switch p.Target {
		case AttnQ:
			n = heads
		case AttnK:
			n = kvHeads
		default:
			continue
		}
		c.Pairs[i].B = permuteRows(p.B, len(p.B)/p.Out, n, toHF)
	}
	return &c
}
