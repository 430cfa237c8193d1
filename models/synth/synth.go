package synth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Sentinel errors.
var (
	ErrUnknownShape    = errors.New("synth: unknown model shape")
	ErrBadShape        = errors.New("synth: inconsistent model shape")
	ErrUnsupportedType = errors.New("synth: unsupported model type")
)

// Config names a model to generate.
type Config struct {
	Shape string    // a name from Shapes, e.g. "stories15m"
	Type  gguf.Type // F32, F16, Q8_0 or Q4_0
	Seed  uint64    // the same seed gives the same file
}

// WeightStd is the standard deviation of every generated weight matrix.
const WeightStd = 0.02

// fileType maps a model type to its general.file_type (llama_ftype).
var fileType = map[gguf.Type]uint32{
	gguf.TypeF32:  0, // ALL_F32
	gguf.TypeF16:  1, // MOSTLY_F16
	gguf.TypeQ4_0: 2, // MOSTLY_Q4_0
	gguf.TypeQ8_0: 7, // MOSTLY_Q8_0
}

// Generate writes the configured model to w as a GGUF file.
func Generate(cfg Config, w io.Writer) error {
	gw, err := Build(cfg)
	if err != nil {
		return err
	}
	if _, err := gw.WriteTo(w); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// GenerateFile writes the configured model to path.
func GenerateFile(cfg Config, path string) error {
	gw, err := Build(cfg)
	if err != nil {
		return err
	}
	if err := gw.WriteFile(path); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// Build returns a Writer holding the model's metadata and tensor sources. No
// weight is generated until the Writer writes; each tensor draws from its own
// generator, seeded by the configured seed and the tensor's name, so writing is
// repeatable and the same seed gives the same underlying weights in every type.
//
// Tensor types follow llama-quantize for these shapes: norm weights stay F32; in
// a Q4_0 model the output projection (output.weight, or token_embd.weight when
// tied) is Q8_0, which is what llama-quantize falls back to when a row is not a
// multiple of 256 and Q6_K cannot be used. A matrix whose rows are not a
// multiple of 32 (stories260k's ffn_down, rows of 172) cannot be Q8_0 or Q4_0:
// it is written F16, the last fallback llama-quantize itself applies (which
// instead refuses such tensors for Q4_0 and Q8_0 outright).
func Build(cfg Config) (*gguf.Writer, error) {
	s, err := LookupShape(cfg.Shape)
	if err != nil {
		return nil, err
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	ft, ok := fileType[cfg.Type]
	if !ok {
		return nil, fmt.Errorf("%w: %s (want F32, F16, Q8_0 or Q4_0)", ErrUnsupportedType, cfg.Type)
	}
	tokens, scores, types, err := vocabulary(s.Vocab)
	if err != nil {
		return nil, err
	}
	w := gguf.NewWriter()
	w.SetString("general.architecture", "llama")
	w.SetString("general.name", "bulkhead-synth-"+s.Name)
	w.SetUint32("llama.vocab_size", uint32(s.Vocab))
	w.SetUint32("llama.context_length", uint32(s.Context))
	w.SetUint32("llama.embedding_length", uint32(s.Embd))
	w.SetUint32("llama.block_count", uint32(s.Layers))
	w.SetUint32("llama.feed_forward_length", uint32(s.FFN))
	w.SetUint32("llama.rope.dimension_count", uint32(s.HeadDim()))
	w.SetUint32("llama.attention.head_count", uint32(s.Heads))
	w.SetUint32("llama.attention.head_count_kv", uint32(s.KVHeads))
	w.SetFloat32("llama.attention.layer_norm_rms_epsilon", s.RMSEps)
	w.SetFloat32("llama.rope.freq_base", s.RopeFreqBase)
	w.SetUint32("general.file_type", ft)
	w.SetString("tokenizer.ggml.model", "llama")
	w.SetString("tokenizer.ggml.pre", "default")
	w.SetStrings("tokenizer.ggml.tokens", tokens)
	w.SetFloat32s("tokenizer.ggml.scores", scores)
	w.SetInt32s("tokenizer.ggml.token_type", types)
	w.SetUint32("tokenizer.ggml.bos_token_id", BOSID)
	w.SetUint32("tokenizer.ggml.eos_token_id", EOSID)
	w.SetUint32("tokenizer.ggml.unknown_token_id", UnkID)
	w.SetBool("tokenizer.ggml.add_bos_token", true)
	w.SetBool("tokenizer.ggml.add_eos_token", false)
	if cfg.Type == gguf.TypeQ8_0 || cfg.Type == gguf.TypeQ4_0 {
		w.SetUint32("general.quantization_version", 2)
	}
	if err := w.Err(); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	for _, t := range Tensors(s, cfg.Type) {
		src := weightSource(cfg.Seed, t)
		if t.Norm {
			src = onesSource(t)
		}
		if err := w.AddTensorSource(t.Name, t.Shape, t.Type, src); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
	}
	return w, nil
}

// Tensor is one tensor of a generated model.
type Tensor struct {
	Name  string
	Shape []uint64 // GGML order: Shape[0] is the row length
	Type  gguf.Type
	Norm  bool // an RMS norm weight: all ones, always F32
}

// Tensors lists the tensors of a model of shape s and type t, in file order,
// with the type each gets (see Build).
func Tensors(s Shape, t gguf.Type) []Tensor {
	e, kv, ff := uint64(s.Embd), uint64(s.KVDim()), uint64(s.FFN)
	matrix := func(name string, cols, rows uint64, output bool) Tensor {
		typ := t
		if output && t == gguf.TypeQ4_0 {
			typ = gguf.TypeQ8_0
		}
		if cols%uint64(typ.BlockSize()) != 0 {
			typ = gguf.TypeF16
		}
		return Tensor{Name: name, Shape: []uint64{cols, rows}, Type: typ}
	}
	norm := func(name string) Tensor {
		return Tensor{Name: name, Shape: []uint64{e}, Type: gguf.TypeF32, Norm: true}
	}
	out := []Tensor{
		matrix("token_embd.weight", e, uint64(s.Vocab), s.TiedEmbedding),
		norm("output_norm.weight"),
	}
	if !s.TiedEmbedding {
		out = append(out, matrix("output.weight", e, uint64(s.Vocab), true))
	}
	for i := range s.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		out = append(out,
			norm(p+"attn_norm.weight"),
			matrix(p+"attn_q.weight", e, e, false),
			matrix(p+"attn_k.weight", e, kv, false),
			matrix(p+"attn_v.weight", e, kv, false),
			matrix(p+"attn_output.weight", e, e, false),
			norm(p+"ffn_norm.weight"),
			matrix(p+"ffn_gate.weight", e, ff, false),
			matrix(p+"ffn_up.weight", e, ff, false),
			matrix(p+"ffn_down.weight", ff, e, false),
		)
	}
	return out
}

// TensorSeed returns the second PCG seed word of the named tensor's generator
// (the first is the configured seed): FNV-1a of the name.
func TensorSeed(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// chunkRows bounds the rows generated at once, keeping memory to about a
// megabyte of float32s whatever the tensor's size.
func chunkRows(rowLen uint64) uint64 { return max(1, (1<<18)/rowLen) }

// weightSource streams a matrix of normal(0, WeightStd) values, row-major,
// encoded as t.Type.
func weightSource(seed uint64, t Tensor) gguf.TensorSource {
	return func(dst io.Writer) error {
		rng := rand.New(rand.NewPCG(seed, TensorSeed(t.Name)))
		cols, rows := t.Shape[0], t.Shape[1]
		per := chunkRows(cols)
		vals := make([]float32, per*cols)
		var buf []byte
		for r := uint64(0); r < rows; r += per {
			n := min(per, rows-r)
			x := vals[:n*cols]
			for i := range x {
				x[i] = float32(rng.NormFloat64() * WeightStd)
			}
			var err error
			if buf, err = encode(t.Type, x, buf); err != nil {
				return err
			}
			if _, err := dst.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
}

// onesSource streams a norm weight of ones.
func onesSource(t Tensor) gguf.TensorSource {
	return func(dst io.Writer) error {
		x := make([]float32, t.Shape[0])
		for i := range x {
			x[i] = 1
		}
		buf, err := encode(t.Type, x, nil)
		if err != nil {
			return err
		}
		_, err = dst.Write(buf)
		return err
	}
}

// encode converts x to typ's bytes, reusing buf's storage.
func encode(typ gguf.Type, x []float32, buf []byte) ([]byte, error) {
	size, err := typ.RowSize(len(x))
	if err != nil {
		return nil, err
	}
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	switch typ {
	case gguf.TypeF32:
		for i, v := range x {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
	case gguf.TypeF16:
		for i, v := range x {
			binary.LittleEndian.PutUint16(buf[2*i:], gguf.F32ToF16(v))
		}
	case gguf.TypeQ8_0:
		err = gguf.QuantizeQ8_0Into(buf, x)
	case gguf.TypeQ4_0:
		err = gguf.QuantizeQ4_0Into(buf, x)
	default:
		err = fmt.Errorf("%w: cannot encode %s", ErrUnsupportedType, typ)
	}
	return buf, err
}
