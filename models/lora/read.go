package lora

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// PEFT's file names inside an adapter directory.
const (
	PEFTWeights = "adapter_model.safetensors"
	PEFTConfig  = "adapter_config.json"
)

// MaxFileBytes bounds an adapter file: rank 32 over every projection of an
// 8B model in F32 is about 340 MB.
const MaxFileBytes = 1 << 30

// Read reads an adapter from path: a GGUF adapter file, or a directory
// holding PEFT's adapter_model.safetensors and adapter_config.json.
func Read(path string) (*Adapter, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	if st.IsDir() {
		w, err := readBounded(filepath.Join(path, PEFTWeights))
		if err != nil {
			return nil, err
		}
		c, err := readBounded(filepath.Join(path, PEFTConfig))
		if err != nil {
			return nil, err
		}
		return ParsePEFT(w, c)
	}
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	return ParseGGUF(b)
}

func readBounded(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotAdapter, err)
	}
	if st.Size() > MaxFileBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrBadAdapter, path, st.Size(), MaxFileBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	return b, nil
}

// ggufName is a GGUF adapter tensor's name: blk.N.<target>.weight.lora_a|b.
var ggufName = regexp.MustCompile(`^blk\.(\d+)\.([a-z_]+)\.weight\.lora_([ab])$`)

// ParseGGUF parses a GGUF adapter file's bytes (llama.cpp's
// convert_lora_to_gguf output: general.type "adapter", adapter.type "lora",
// adapter.lora.alpha, and blk.N.<target>.weight.lora_a / .lora_b tensors,
// A with GGML shape [in, rank], B [rank, out]). Norm tensors, which
// llama.cpp skips too, are skipped.
func ParseGGUF(b []byte) (*Adapter, error) {
	f, err := gguf.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotAdapter, err)
	}
	if t, _ := f.String("general.type"); t != "adapter" {
		return nil, fmt.Errorf("%w: general.type is %q, not \"adapter\"", ErrNotAdapter, t)
	}
	if t, _ := f.String("adapter.type"); t != "lora" {
		return nil, fmt.Errorf("%w: adapter.type is %q, not \"lora\"", ErrBadAdapter, t)
	}
	a := &Adapter{Format: "gguf"}
	a.Arch, _ = f.String("general.architecture")
	alpha, ok := f.Float("adapter.lora.alpha")
	if !ok {
		return nil, fmt.Errorf("%w: no adapter.lora.alpha", ErrBadAdapter)
	}
	a.Alpha = float32(alpha)
	var ts []tensor
	for _, info := range f.Tensors {
		if strings.HasSuffix(info.Name, "_norm.weight") {
			continue
		}
		m := ggufName.FindStringSubmatch(info.Name)
		if m == nil {
			return nil, fmt.Errorf("%w: tensor %q is not blk.N.<projection>.weight.lora_a or lora_b", ErrBadAdapter, info.Name)
		}
		layer, err := strconv.Atoi(m[1])
		if err != nil || len(info.Shape) != 2 {
			return nil, fmt.Errorf("%w: tensor %q: layer or shape", ErrBadAdapter, info.Name)
		}
		_, data, err := f.Tensor(info.Name)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadAdapter, err)
		}
		// GGML shape [cols, rows].
		ts = append(ts, tensor{name: info.Name, layer: layer, target: Target(m[2]), isB: m[3] == "b",
			rows: int(info.Shape[1]), cols: int(info.Shape[0]), typ: info.Type, data: data})
	}
	if err := a.pair(ts); err != nil {
		return nil, err
	}
	return a, nil
}

// tensor is one A or B matrix as a file holds it, before decoding.
type tensor struct {
	name       string
	layer      int
	target     Target
	isB        bool
	rows, cols int
	typ        gguf.Type
	data       []byte
}

// known lists the projections an adapter may target.
var known = map[Target]bool{AttnQ: true, AttnK: true, AttnV: true, AttnQKV: true, AttnOutput: true, FFNGate: true, FFNUp: true, FFNDown: true}

// pair matches each A with its B, checks ranks and shapes, and decodes them
// into a.Pairs, ordered by layer then target.
func (a *Adapter) pair(ts []tensor) error {
	type key struct {
		layer  int
		target Target
	}
	as, bs := map[key]tensor{}, map[key]tensor{}
	var order []key
	for _, t := range ts {
		if !known[t.target] {
			return fmt.Errorf("%w: %s: unknown target module %q (an adapter may target attn_q, attn_k, attn_v, attn_qkv, attn_output, ffn_gate, ffn_up, ffn_down)", ErrBadAdapter, t.name, t.target)
		}
		k := key{t.layer, t.target}
		half := as
		if t.isB {
			half = bs
		}
		if _, dup := half[k]; dup {
			return fmt.Errorf("%w: %s given twice", ErrBadAdapter, t.name)
		}
		if _, ok := as[k]; !ok {
			if _, ok := bs[k]; !ok {
				order = append(order, k)
			}
		}
		half[k] = t
	}
	if len(order) == 0 {
		return fmt.Errorf("%w: no lora_a/lora_b tensors", ErrBadAdapter)
	}
	for _, k := range order {
		ta, okA := as[k]
		tb, okB := bs[k]
		if !okA || !okB {
			return fmt.Errorf("%w: layer %d %s has lora_a without lora_b or the reverse", ErrBadAdapter, k.layer, k.target)
		}
		p, err := decodePair(ta, tb)
		if err != nil {
			return err
		}
		a.Rank = max(a.Rank, len(p.A)/p.In)
		a.Pairs = append(a.Pairs, p)
	}
	sortPairs(a.Pairs)
	return nil
}

// decodePair checks A (rank rows of in) against B (out rows of rank) and
// decodes both.
func decodePair(ta, tb tensor) (Pair, error) {
	rank := ta.rows
	switch {
	case rank < 1 || ta.cols < 1 || tb.rows < 1:
		return Pair{}, fmt.Errorf("%w: %s: empty shape", ErrBadAdapter, ta.name)
	case rank > MaxRank:
		return Pair{}, fmt.Errorf("%w: %s: rank %d is over the limit of %d", ErrBadAdapter, ta.name, rank, MaxRank)
	case tb.cols != rank:
		return Pair{}, fmt.Errorf("%w: %s has rank %d but %s %d (is lora_a transposed?)", ErrBadAdapter, ta.name, rank, tb.name, tb.cols)
	case ta.cols > 1<<20 || tb.rows > 1<<20:
		return Pair{}, fmt.Errorf("%w: %s: %d x %d is too large", ErrBadAdapter, ta.name, tb.rows, ta.cols)
	}
	p := Pair{Layer: ta.layer, Target: ta.target, In: ta.cols, Out: tb.rows,
		A: make([]float32, rank*ta.cols), B: make([]float32, tb.rows*rank), AType: ta.typ, BType: tb.typ}
	if err := decode(ta, p.A); err != nil {
		return Pair{}, err
	}
	if err := decode(tb, p.B); err != nil {
		return Pair{}, err
	}
	return p, nil
}

func decode(t tensor, dst []float32) error {
	if err := gguf.Dequantize(t.typ, t.data, dst); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadAdapter, t.name, err)
	}
	return nil
}

// errShort is a PEFT file cut short or with offsets outside it.
var errShort = errors.New("truncated")
