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
	ErrUnknownArch     = errors.New("synth: unknown architecture")
	ErrArchMismatch    = errors.New("synth: shape is of another architecture")
)

// Config names a model to generate.
type Config struct {
	Shape string    // a name from Shapes, e.g. "stories15m" or "qwen3-tiny"
	Type  gguf.Type // F32, F16, Q8_0 or Q4_0
	Seed  uint64    // the same seed gives the same file
}

// Standard deviations of the generated values: weight matrices are
// normal(0, WeightStd) (the tiny shapes': TinyWeightStd), norm weights
// 1 + normal(0, NormStd), biases normal(0, BiasStd).
const (
	WeightStd     = 0.02
	TinyWeightStd = 0.1
	NormStd       = 0.2
	BiasStd       = 0.2
)

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
// Every tensor is random, norm weights and biases too (see Kind), so a missing
// operation changes the output. Gemma's norm weights are written as plain
// RMSNorm weights (about 1), as llama.cpp's converter writes them after adding
// the 1 the checkpoint omits.
//
// Tensor types follow llama-quantize for these shapes: norm weights and
// biases (1-D tensors) stay F32. In a Q4_0 model the output projection
// (output.weight, or token_embd.weight when tied) is Q8_0: llama-quantize
// makes it Q6_K, falling back to Q8_0 when a row is not a multiple of 256;
// this package has no K-quant encoder, so it writes Q8_0 for every width. A
// matrix whose rows are not a multiple of 32 (stories260k's ffn_down, rows of
// 172) cannot be Q8_0 or Q4_0: it is written F16, the last fallback
// llama-quantize itself applies (which instead refuses such tensors for Q4_0
// and Q8_0 outright).
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
	w := gguf.NewWriter()
	if s.Arch == ArchBert {
		err = writeBertMetadata(w, s, ft)
	} else {
		err = writeMetadata(w, s, ft)
	}
	if err != nil {
		return nil, err
	}
	if cfg.Type == gguf.TypeQ8_0 || cfg.Type == gguf.TypeQ4_0 {
		w.SetUint32("general.quantization_version", 2)
	}
	if err := w.Err(); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	for _, t := range Tensors(s, cfg.Type) {
		if err := w.AddTensorSource(t.Name, t.Shape, t.Type, source(cfg.Seed, t)); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
	}
	return w, nil
}

// writeMetadata writes a decoder's hyperparameters, its file type ft and
// its synthetic SentencePiece vocabulary.
func writeMetadata(w *gguf.Writer, s Shape, ft uint32) error {
	tokens, scores, types, err := vocabulary(s.Vocab)
	if err != nil {
		return err
	}
	addArchTokens(s.Arch, tokens, scores, types)
	writeHyperparameters(w, s)
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
	w.SetBool("tokenizer.ggml.add_eos_token", s.Pooling != 0) // an embedding model ends each input with EOS
	return nil
}

// writeBertMetadata writes an encoder's hyperparameters, its file type ft
// and its synthetic WordPiece or Unigram vocabulary.
func writeBertMetadata(w *gguf.Writer, s Shape, ft uint32) error {
	if s.Unigram {
		tokens, scores, types, err := unigramPieces(s.Vocab)
		if err != nil {
			return err
		}
		writeBertHyperparameters(w, s)
		w.SetUint32("general.file_type", ft)
		w.SetStrings("tokenizer.ggml.tokens", tokens)
		w.SetFloat32s("tokenizer.ggml.scores", scores)
		w.SetInt32s("tokenizer.ggml.token_type", types)
		return nil
	}
	tokens, types, err := wordPieces(s.Vocab)
	if err != nil {
		return err
	}
	writeBertHyperparameters(w, s)
	w.SetUint32("general.file_type", ft)
	w.SetStrings("tokenizer.ggml.tokens", tokens)
	w.SetInt32s("tokenizer.ggml.token_type", types)
	return nil
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

// source streams t's values, row-major, encoded as t.Type: normal(t.Mean,
// t.Std).
func source(seed uint64, t Tensor) gguf.TensorSource {
	mean, std := t.Mean, t.Std
	return func(dst io.Writer) error {
		rng := rand.New(rand.NewPCG(seed, TensorSeed(t.Name)))
		cols, rows := t.Shape[0], uint64(1)
		for _, d := range t.Shape[1:] {
			rows *= d
		}
		per := chunkRows(cols)
		vals := make([]float32, min(per, rows)*cols)
		var buf []byte
		for r := uint64(0); r < rows; r += per {
			n := min(per, rows-r)
			x := vals[:n*cols]
			for i := range x {
				// The conversion rounds the product, so no platform fuses it
				// into an FMA and every platform writes the same bytes.
				x[i] = float32(mean + float64(rng.NormFloat64()*std))
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
