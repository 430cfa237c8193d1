package lora

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// MaxRank is the largest rank accepted (Workers AI's limit).
const MaxRank = 32

// Errors returned for files that cannot be used.
var (
	// ErrNotAdapter: the file is not a LoRA adapter at all (another GGUF,
	// not safetensors, no adapter_config.json).
	ErrNotAdapter = errors.New("lora: not a LoRA adapter")
	// ErrBadAdapter: an adapter, but one that cannot be used (rank over
	// MaxRank, an unknown target module, inconsistent shapes).
	ErrBadAdapter = errors.New("lora: invalid adapter")
)

// Target names a projection an adapter applies to, by its GGUF tensor name
// within a block ("attn_q" for blk.N.attn_q.weight).
type Target string

// The projections an adapter may target.
const (
	AttnQ      Target = "attn_q"
	AttnK      Target = "attn_k"
	AttnV      Target = "attn_v"
	AttnQKV    Target = "attn_qkv" // fused Q, K, V (phi3)
	AttnOutput Target = "attn_output"
	FFNGate    Target = "ffn_gate"
	FFNUp      Target = "ffn_up" // for phi3, fused gate and up
	FFNDown    Target = "ffn_down"
)

// Pair is one projection's low-rank update, W' = W + scale·B·A: A is Rank
// rows of In (the projection's input width), B is Out rows of Rank, both
// row-major, in GGUF's row order (for a PEFT file of a llama model, Q and K
// rows are still in Hugging Face's order: see Adapter.Format).
type Pair struct {
	Layer   int
	Target  Target
	In, Out int
	A, B    []float32
	// AType and BType are the types the file stores A and B in: a product
	// with an F16 or BF16 matrix rounds its input to that type first, as
	// llama.cpp's does.
	AType, BType gguf.Type
}

// Adapter is a parsed adapter file.
type Adapter struct {
	Format string  // "gguf" or "peft"
	Arch   string  // the base architecture the file names ("" if it names none)
	Rank   int     // the largest rank of its pairs
	Alpha  float32 // scale = Alpha/Rank (0: scale 1, llama.cpp's convention)
	Pairs  []Pair
}

// ParseTargets reads a comma-separated list of projections: their names,
// "attn" (every attention projection) or "all" (attention and feed-forward).
func ParseTargets(s string) ([]Target, error) {
	var ts []Target
	for _, name := range strings.Split(s, ",") {
		switch name = strings.TrimSpace(name); name {
		case "attn":
			ts = append(ts, AttnQ, AttnK, AttnV, AttnQKV, AttnOutput)
		case "all":
			ts = append(ts, AttnQ, AttnK, AttnV, AttnQKV, AttnOutput, FFNGate, FFNUp, FFNDown)
		default:
			if !known[Target(name)] {
				return nil, fmt.Errorf("%w: unknown projection %q", ErrBadAdapter, name)
			}
			ts = append(ts, Target(name))
		}
	}
	return ts, nil
}
