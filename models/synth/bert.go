package synth

import (
	"fmt"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// ArchBert is the encoder architecture llama.cpp loads as "bert" (the bge
// embedding and reranking models): token, type and position embeddings,
// LayerNorms with biases after each sub-block, biased projections, a GELU
// feed-forward, bidirectional attention and a pooling type.
const ArchBert Arch = "bert"

// EncoderArchs lists the encoder architectures synth writes.
func EncoderArchs() []Arch { return []Arch{ArchBert} }

// Pooling types as <arch>.pooling_type numbers them.
const (
	PoolMean = 1
	PoolCLS  = 2
	PoolLast = 3
	PoolRank = 4
)

// Special ids of the synthetic WordPiece vocabulary: BERT's own layout, which
// llama.cpp's WordPiece defaults assume.
const (
	bertPad  = 0
	bertUnk  = 100
	bertCLS  = 101
	bertSEP  = 102
	bertMask = 103
)

// bertTokenTypes is the number of token types (sentence A and B) of the
// token_types tensor.
const bertTokenTypes = 2

// bertShapes are the encoder shapes: bert-tiny (CLS pooling), bert-rank-tiny
// (the same with a classification head and rank pooling), and bge-small and
// bge-base with the published checkpoints' dimensions and their CLS pooling;
// then the XLM-RoBERTa family (llama.cpp loads it as "bert" with a Unigram
// vocabulary and one token type): xlmr-tiny (mean pooling, as the
// multilingual E5 models), xlmr-rank-tiny (bge-reranker-v2-m3's layout) and
// e5-small (multilingual-e5-small's dimensions).
func bertShapes() []Shape {
	tiny := Shape{Name: TinyShape(ArchBert), Arch: ArchBert, Vocab: 1024, Embd: 256, Layers: 2, Heads: 4, KVHeads: 4,
		FFN: 1024, Context: 512, RMSEps: 1e-12, Std: TinyWeightStd, Pooling: PoolCLS}
	rank := tiny
	rank.Name, rank.Pooling = "bert-rank-tiny", PoolRank
	xlmr := tiny
	xlmr.Name, xlmr.Unigram, xlmr.Pooling, xlmr.RMSEps = "xlmr-tiny", true, PoolMean, 1e-5
	xrank := xlmr
	xrank.Name, xrank.Pooling = "xlmr-rank-tiny", PoolRank
	return []Shape{
		tiny, rank, xlmr, xrank,
		{Name: "e5-small", Arch: ArchBert, Vocab: 250037, Embd: 384, Layers: 12, Heads: 12, KVHeads: 12, FFN: 1536,
			Context: 512, RMSEps: 1e-12, Pooling: PoolMean, Unigram: true},
		{Name: "bge-small", Arch: ArchBert, Vocab: 30522, Embd: 384, Layers: 12, Heads: 12, KVHeads: 12, FFN: 1536,
			Context: 512, RMSEps: 1e-12, Pooling: PoolCLS},
		{Name: "bge-base", Arch: ArchBert, Vocab: 30522, Embd: 768, Layers: 12, Heads: 12, KVHeads: 12, FFN: 3072,
			Context: 512, RMSEps: 1e-12, Pooling: PoolCLS},
	}
}

// writeBertHyperparameters sets the bert.* keys llama.cpp's converter writes
// for a BERT model, and its WordPiece tokenizer's keys but the vocabulary.
func writeBertHyperparameters(w *gguf.Writer, s Shape) {
	key := func(k string) string { return "bert." + k }
	w.SetString("general.architecture", string(ArchBert))
	w.SetString("general.name", "bulkhead-synth-"+s.Name)
	w.SetUint32(key("context_length"), uint32(s.Context))
	w.SetUint32(key("embedding_length"), uint32(s.Embd))
	w.SetUint32(key("feed_forward_length"), uint32(s.FFN))
	w.SetUint32(key("block_count"), uint32(s.Layers))
	w.SetUint32(key("attention.head_count"), uint32(s.Heads))
	w.SetFloat32(key("attention.layer_norm_epsilon"), s.RMSEps)
	w.SetBool(key("attention.causal"), false)
	w.SetUint32(key("pooling_type"), uint32(s.Pooling))
	w.SetString("tokenizer.ggml.pre", "default")
	if s.Unigram {
		// What llama.cpp's converter writes for XLM-RoBERTa's SentencePiece
		// model (RobertaProcessing: <s> A </s>, pairs <s> A </s></s> B </s>).
		w.SetString("tokenizer.ggml.model", "t5")
		w.SetUint32("tokenizer.ggml.token_type_count", 1)
		w.SetBool("tokenizer.ggml.add_space_prefix", true)
		w.SetBool("tokenizer.ggml.remove_extra_whitespaces", true)
		w.SetUint32("tokenizer.ggml.bos_token_id", xlmrBOS)
		w.SetUint32("tokenizer.ggml.eos_token_id", xlmrEOS)
		w.SetUint32("tokenizer.ggml.unknown_token_id", xlmrUnk)
		w.SetUint32("tokenizer.ggml.seperator_token_id", xlmrEOS)
		w.SetUint32("tokenizer.ggml.padding_token_id", xlmrPad)
		w.SetUint32("tokenizer.ggml.cls_token_id", xlmrBOS)
		w.SetBool("tokenizer.ggml.add_bos_token", true)
		w.SetBool("tokenizer.ggml.add_eos_token", true)
		w.SetBool("tokenizer.ggml.add_sep_token", true)
		return
	}
	w.SetString("tokenizer.ggml.model", "bert")
	w.SetUint32("tokenizer.ggml.token_type_count", bertTokenTypes)
	w.SetUint32("tokenizer.ggml.unknown_token_id", bertUnk)
	w.SetUint32("tokenizer.ggml.cls_token_id", bertCLS)
	w.SetUint32("tokenizer.ggml.seperator_token_id", bertSEP) // llama.cpp's spelling
	w.SetUint32("tokenizer.ggml.padding_token_id", bertPad)
	w.SetUint32("tokenizer.ggml.mask_token_id", bertMask)
}

// Special ids of the synthetic Unigram vocabulary: XLM-RoBERTa's layout.
const (
	xlmrBOS = 0
	xlmrPad = 1
	xlmrEOS = 2
	xlmrUnk = 3
)

// unigramPieces returns n Unigram tokens with their scores and types:
// <s>, <pad>, </s>, <unk>, then the normal pieces of the synthetic
// SentencePiece vocabulary (no byte tokens: XLM-R has none), scores
// descending.
func unigramPieces(n int) (tokens []string, scores []float32, types []int32, err error) {
	if n <= xlmrUnk+1 {
		return nil, nil, nil, fmt.Errorf("%w: a Unigram vocabulary needs more than %d tokens", ErrBadShape, xlmrUnk+1)
	}
	all, allScores, _, err := vocabulary(n - (xlmrUnk + 1) + firstPiece)
	if err != nil {
		return nil, nil, nil, err
	}
	tokens = append([]string{"<s>", "<pad>", "</s>", "<unk>"}, all[firstPiece:]...)
	scores = append([]float32{0, 0, 0, 0}, allScores[firstPiece:]...)
	types = make([]int32, len(tokens))
	for i := range types {
		types[i] = TokenNormal
	}
	types[xlmrBOS], types[xlmrPad], types[xlmrEOS], types[xlmrUnk] = TokenControl, TokenControl, TokenControl, TokenUnknown
	return tokens, scores, types, nil
}

// wordPieces returns n WordPiece tokens and their types in the GGUF form
// llama.cpp's converter writes (a word's first piece with a leading "▁",
// continuations bare): [PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK],
// then each printable ASCII character as a first piece and as a
// continuation, common words, and lowercase combinations of 2, 3 and 4
// letters, as first pieces and continuations, until n are filled.
func wordPieces(n int) (tokens []string, types []int32, err error) {
	if n <= bertMask {
		return nil, nil, fmt.Errorf("%w: a WordPiece vocabulary needs more than %d tokens", ErrBadShape, bertMask+1)
	}
	seen := make(map[string]bool, n)
	add := func(tok string, typ int32) bool {
		if len(tokens) < n && !seen[tok] {
			seen[tok] = true
			tokens = append(tokens, tok)
			types = append(types, typ)
		}
		return len(tokens) == n
	}
	add("[PAD]", TokenControl)
	for i := 0; len(tokens) < bertUnk; i++ {
		add(fmt.Sprintf("[unused%d]", i), TokenNormal)
	}
	for _, s := range []string{"[UNK]", "[CLS]", "[SEP]", "[MASK]"} {
		add(s, TokenControl)
	}
	for c := byte('!'); c <= '~'; c++ {
		if add(spaceMark+string(c), TokenNormal) || add(string(c), TokenNormal) {
			return tokens, types, nil
		}
	}
	for _, w := range commonWords {
		if add(spaceMark+w, TokenNormal) {
			return tokens, types, nil
		}
	}
	for length := 2; length <= 4; length++ {
		full := false
		combinations(length, func(s string) bool {
			full = add(s, TokenNormal) || add(spaceMark+s, TokenNormal)
			return full
		})
		if full {
			return tokens, types, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: cannot generate %d unique WordPiece tokens (at most %d)", ErrBadShape, n, len(tokens))
}

// bertTensors lists a BERT model's tensors in the order llama.cpp's converter
// writes them, with the names and GGML shapes its loader asks for. Matrices
// take the model's type (F16 where a row is not a whole number of blocks);
// norms, biases and the small token-type table stay F32.
func bertTensors(s Shape, t gguf.Type) []Tensor {
	e, ff := uint64(s.Embd), uint64(s.FFN)
	matrix := func(name string, cols, rows uint64) Tensor { return matrixTensor(s, t, name, cols, rows) }
	vector := func(name string, n uint64, k Kind) Tensor { return vectorTensor(s, name, n, k) }
	nTypes := uint64(bertTokenTypes)
	if s.Unigram {
		nTypes = 1
	}
	types := matrix("token_types.weight", e, nTypes)
	types.Type = gguf.TypeF32
	out := []Tensor{
		matrix("token_embd.weight", e, uint64(s.Vocab)),
		types,
		matrix("position_embd.weight", e, uint64(s.Context)),
		vector("token_embd_norm.weight", e, KindNorm),
		vector("token_embd_norm.bias", e, KindBias),
	}
	for i := range s.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		out = append(out,
			matrix(p+"attn_q.weight", e, e), vector(p+"attn_q.bias", e, KindBias),
			matrix(p+"attn_k.weight", e, e), vector(p+"attn_k.bias", e, KindBias),
			matrix(p+"attn_v.weight", e, e), vector(p+"attn_v.bias", e, KindBias),
			matrix(p+"attn_output.weight", e, e), vector(p+"attn_output.bias", e, KindBias),
			vector(p+"attn_output_norm.weight", e, KindNorm), vector(p+"attn_output_norm.bias", e, KindBias),
			matrix(p+"ffn_up.weight", e, ff), vector(p+"ffn_up.bias", ff, KindBias),
			matrix(p+"ffn_down.weight", ff, e), vector(p+"ffn_down.bias", e, KindBias),
			vector(p+"layer_output_norm.weight", e, KindNorm), vector(p+"layer_output_norm.bias", e, KindBias),
		)
	}
	if s.Pooling == PoolRank {
		out = append(out,
			matrix("cls.weight", e, e), vector("cls.bias", e, KindBias),
			matrix("cls.output.weight", e, 1), vector("cls.output.bias", 1, KindBias),
		)
	}
	return out
}
