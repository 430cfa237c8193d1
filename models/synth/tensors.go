package synth

import (
	"fmt"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Kind is what a tensor is, which sets the distribution of its values.
type Kind int

// Tensor kinds.
const (
	KindMatrix Kind = iota // a weight matrix: normal(0, Shape.MatrixStd)
	KindNorm               // an RMS norm weight: 1 + normal(0, NormStd), always F32
	KindBias               // a bias vector: normal(0, BiasStd), always F32
)

// distribution returns the mean and standard deviation of the kind's values in
// shape s.
func (k Kind) distribution(s Shape) (mean, std float64) {
	switch k {
	case KindNorm:
		return 1, NormStd
	case KindBias:
		return 0, BiasStd
	default:
		return 0, s.MatrixStd()
	}
}

// Tensor is one tensor of a generated model.
type Tensor struct {
	Name  string
	Shape []uint64 // GGML order: Shape[0] is the row length
	Type  gguf.Type
	Kind  Kind
	Mean  float64 // of the generated values (before encoding)
	Std   float64
}

// writeHyperparameters sets general.architecture, general.name and the
// <arch>.* keys llama.cpp reads for s's architecture, as its converter writes
// them.
func writeHyperparameters(w *gguf.Writer, s Shape) {
	a := string(s.Arch)
	key := func(k string) string { return a + "." + k }
	w.SetString("general.architecture", a)
	w.SetString("general.name", "bulkhead-synth-"+s.Name)
	w.SetUint32(key("vocab_size"), uint32(s.Vocab))
	w.SetUint32(key("context_length"), uint32(s.Context))
	w.SetUint32(key("embedding_length"), uint32(s.Embd))
	w.SetUint32(key("block_count"), uint32(s.Layers))
	w.SetUint32(key("feed_forward_length"), uint32(s.FFN))
	w.SetUint32(key("rope.dimension_count"), uint32(s.HeadDim()))
	w.SetUint32(key("attention.head_count"), uint32(s.Heads))
	w.SetUint32(key("attention.head_count_kv"), uint32(s.KVHeads))
	if s.Arch.writesHeadLength() {
		w.SetUint32(key("attention.key_length"), uint32(s.HeadDim()))
		w.SetUint32(key("attention.value_length"), uint32(s.HeadDim()))
	}
	w.SetFloat32(key("attention.layer_norm_rms_epsilon"), s.RMSEps)
	w.SetFloat32(key("rope.freq_base"), s.RopeFreqBase)
	if s.RopeBaseSWA != 0 {
		w.SetFloat32(key("rope.freq_base_swa"), s.RopeBaseSWA)
	}
	if s.SlidingWindow != 0 {
		w.SetUint32(key("attention.sliding_window"), uint32(s.SlidingWindow))
	}
	if s.AttnSoftcap != 0 {
		w.SetFloat32(key("attn_logit_softcapping"), s.AttnSoftcap)
	}
	if s.FinalSoftcap != 0 {
		w.SetFloat32(key("final_logit_softcapping"), s.FinalSoftcap)
	}
	if s.Pooling != 0 {
		w.SetUint32(key("pooling_type"), uint32(s.Pooling))
	}
}

// matrixTensor is a weight matrix of shape s: type typ, or F16 where a row
// is not a whole number of typ's blocks.
func matrixTensor(s Shape, typ gguf.Type, name string, cols, rows uint64) Tensor {
	if cols%uint64(typ.BlockSize()) != 0 {
		typ = gguf.TypeF16
	}
	mean, std := KindMatrix.distribution(s)
	return Tensor{Name: name, Shape: []uint64{cols, rows}, Type: typ, Kind: KindMatrix, Mean: mean, Std: std}
}

// vectorTensor is a norm weight or bias of shape s, always F32.
func vectorTensor(s Shape, name string, n uint64, k Kind) Tensor {
	mean, std := k.distribution(s)
	return Tensor{Name: name, Shape: []uint64{n}, Type: gguf.TypeF32, Kind: k, Mean: mean, Std: std}
}

// Tensors lists the tensors of a model of shape s and type t, in file order,
// with the names and GGML shapes llama.cpp's loader asks for in s's
// architecture and the type each gets (see Build).
func Tensors(s Shape, t gguf.Type) []Tensor {
	if s.Arch == ArchBert {
		return bertTensors(s, t)
	}
	e, q, kv, ff, hd := uint64(s.Embd), uint64(s.QDim()), uint64(s.KVDim()), uint64(s.FFN), uint64(s.HeadDim())
	matrix := func(name string, cols, rows uint64, output bool) Tensor {
		typ := t
		if output && t == gguf.TypeQ4_0 {
			typ = gguf.TypeQ8_0
		}
		return matrixTensor(s, typ, name, cols, rows)
	}
	vector := func(name string, n uint64, k Kind) Tensor { return vectorTensor(s, name, n, k) }
	embedding := func(t Tensor) Tensor { t.Std = s.EmbeddingStd(); return t }
	outputNorm := func(t Tensor) Tensor {
		if s.OutputNorm != 0 {
			t.Mean = s.OutputNorm
		}
		return t
	}
	out := []Tensor{
		embedding(matrix("token_embd.weight", e, uint64(s.Vocab), s.TiedEmbedding)),
		outputNorm(vector("output_norm.weight", e, KindNorm)),
	}
	if !s.TiedEmbedding {
		out = append(out, matrix("output.weight", e, uint64(s.Vocab), true))
	}
	a := s.Arch
	for i := range s.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		out = append(out, vector(p+"attn_norm.weight", e, KindNorm))
		if a.fusedQKV() {
			out = append(out, matrix(p+"attn_qkv.weight", e, q+2*kv, false))
		} else {
			out = append(out,
				matrix(p+"attn_q.weight", e, q, false),
				matrix(p+"attn_k.weight", e, kv, false),
				matrix(p+"attn_v.weight", e, kv, false),
			)
		}
		if a.qkvBias() {
			out = append(out,
				vector(p+"attn_q.bias", q, KindBias),
				vector(p+"attn_k.bias", kv, KindBias),
				vector(p+"attn_v.bias", kv, KindBias),
			)
		}
		if a.qkNorm() {
			out = append(out,
				vector(p+"attn_q_norm.weight", hd, KindNorm),
				vector(p+"attn_k_norm.weight", hd, KindNorm),
			)
		}
		out = append(out, matrix(p+"attn_output.weight", q, e, false))
		if a.postNorms() {
			out = append(out, vector(p+"post_attention_norm.weight", e, KindNorm))
		}
		out = append(out, vector(p+"ffn_norm.weight", e, KindNorm))
		if a.fusedQKV() {
			out = append(out, matrix(p+"ffn_up.weight", e, 2*ff, false))
		} else {
			out = append(out,
				matrix(p+"ffn_gate.weight", e, ff, false),
				matrix(p+"ffn_up.weight", e, ff, false),
			)
		}
		out = append(out, matrix(p+"ffn_down.weight", ff, e, false))
		if a.postNorms() {
			out = append(out, vector(p+"post_ffw_norm.weight", e, KindNorm))
		}
	}
	return out
}
