package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Sentinel errors. Every error from FromGGUF wraps one of them.
var (
	ErrUnsupportedModel = errors.New("tokenizer: unsupported tokenizer model")
	ErrUnsupportedPre   = errors.New("tokenizer: unsupported pre-tokenizer")
	ErrMissing          = errors.New("tokenizer: missing tokenizer metadata")
	ErrCorrupt          = errors.New("tokenizer: corrupt vocabulary")
)

// Metadata keys read by FromGGUF.
const (
	keyModel        = "tokenizer.ggml.model"
	keyPre          = "tokenizer.ggml.pre"
	keyTokens       = "tokenizer.ggml.tokens"
	keyScores       = "tokenizer.ggml.scores"
	keyTokenType    = "tokenizer.ggml.token_type"
	keyMerges       = "tokenizer.ggml.merges"
	keyAddBOS       = "tokenizer.ggml.add_bos_token"
	keyAddEOS       = "tokenizer.ggml.add_eos_token"
	keyAddPrefix    = "tokenizer.ggml.add_space_prefix"
	keyChatTemplate = "tokenizer.chat_template"
	keyGeneralName  = "general.name"
)

// noToken marks an absent special token (LLAMA_TOKEN_NULL).
const noToken int32 = -1

// tokenAttr mirrors llama.cpp's llama_token_attr bit set.
type tokenAttr uint16

const (
	attrUnknown tokenAttr = 1 << iota
	attrUnused
	attrNormal
	attrControl
	attrUserDefined
	attrByte
	attrNormalized
	attrLstrip
	attrRstrip
)

// GGUF token_type values (llama_token_type).
const (
	typeNormal      = 1
	typeUnknown     = 2
	typeControl     = 3
	typeUserDefined = 4
	typeUnused      = 5
	typeByte        = 6
)

type vocabKind uint8

const (
	kindSPM vocabKind = iota
	kindBPE
	kindWPM // WordPiece (wpm.go)
	kindUGM // SentencePiece Unigram (ugm.go)
)

// preKind selects a BPE pre-tokenizer.
type preKind uint8

const (
	preDefault preKind = iota // llama.cpp's default chain of four splits
	preGPT2
	preLlama3
	preQwen2
)

// preInfo is what a tokenizer.ggml.pre name means, as llama.cpp's vocab loader
// decides it.
type preInfo struct {
	kind         preKind
	cleanSpaces  bool // clean_up_tokenization_spaces when decoding
	ignoreMerges bool // a pre-token that is already in the vocabulary skips merging
	addBOS       bool // default for add_bos_token
}

var preTypes = map[string]preInfo{
	"default":          {kind: preDefault, cleanSpaces: true},
	"gpt-2":            {kind: preGPT2, cleanSpaces: true},
	"phi-2":            {kind: preGPT2, cleanSpaces: true},
	"mpt":              {kind: preGPT2, cleanSpaces: true},
	"olmo":             {kind: preGPT2, cleanSpaces: true},
	"jais":             {kind: preGPT2, cleanSpaces: true},
	"llama3":           {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"llama-v3":         {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"llama-bpe":        {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"falcon3":          {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"pixtral":          {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"dbrx":             {kind: preLlama3, cleanSpaces: true},
	"smaug-bpe":        {kind: preLlama3, cleanSpaces: true},
	"qwen2":            {kind: preQwen2},
	"deepseek-r1-qwen": {kind: preQwen2},
	"stablelm2":        {kind: preQwen2, cleanSpaces: true},
	"megrez":           {kind: preQwen2, cleanSpaces: true},
}

// eogTexts are token texts llama.cpp treats as end of generation.
var eogTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
	"<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
	"_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
	"<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
}

// eotTexts are the texts llama.cpp auto-detects as the end-of-turn token.
var eotTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
	"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
	"<end_of_utterance>",
}

// fimGroups are the fill-in-the-middle tokens llama.cpp detects; pad, repo and
// file-separator also end generation.
var fimGroups = []struct {
	keys, texts []string
	eog         bool
}{
	{[]string{"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
		[]string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}, false},
	{[]string{"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
		[]string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}, false},
	{[]string{"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
		[]string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"}, false},
	{[]string{"tokenizer.ggml.fim_pad_token_id"}, []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}, true},
	{[]string{"tokenizer.ggml.fim_rep_token_id"}, []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}, true},
	{[]string{"tokenizer.ggml.fim_sep_token_id"}, []string{"<|file_sep|>"}, true},
}

// Tokenizer converts between text and token ids for one vocabulary.
type Tokenizer struct {
	model, pre   string
	kind         vocabKind
	pretok       preKind
	chatTemplate string

	tokens strTable
	scores []float32
	attrs  []tokenAttr
	index  vocabIndex // token ids by text (tokenID)
	pieces strTable   // each token rendered as bytes, control tokens included

	// BPE merges: of two tokens by their ids (pairKey), and the rare ones
	// with a side that is no token by its two strings.
	merges    map[uint64]int32
	mergeStrs map[[2]string]int32
	charTok   [charToks]int32 // the token of each character below charToks (BPE), noToken if none

	bos, eos, unk int32
	eog           map[int32]bool
	special       []int32    // partition order: control, user-defined, unknown tokens, longest first
	byteTok       [256]int32 // SPM byte-fallback token per byte, noToken if none

	addBOS, addEOS, addSpacePrefix bool
	cleanSpaces, ignoreMerges      bool
	maxTokenLen                    int  // the longest token's bytes (WordPiece matching)
	ugm                            *ugm // Unigram matching state; nil for other kinds
	sep                            int32
	addSep                         bool // a pair of texts gets sep between them (PairSeparator)
}

// FromGGUF builds a tokenizer from a file's tokenizer.* metadata. The tokenizer
// copies what it needs, so f may be closed afterwards.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: nil file", ErrMissing)
	}
	model, ok := f.String(keyModel)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrMissing, keyModel)
	}
	t := &Tokenizer{model: model, bos: noToken, eos: noToken, unk: noToken, sep: noToken}
	var pre preInfo
	switch model {
	case "llama":
		t.kind = kindSPM
		t.bos, t.eos, t.unk = 1, 2, 0
		t.addBOS, t.addSpacePrefix = true, true
	case "gpt2":
		t.kind = kindBPE
		t.bos, t.eos = 11, 11
		t.pre, _ = f.String(keyPre)
		name := t.pre
		if name == "" {
			name = "default" // llama.cpp falls back to its default splitter
		}
		pre, ok = preTypes[name]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnsupportedPre, t.pre)
		}
		t.pretok, t.cleanSpaces, t.ignoreMerges, t.addBOS = pre.kind, pre.cleanSpaces, pre.ignoreMerges, pre.addBOS
	case "bert":
		t.kind = kindWPM
		// llama.cpp's defaults: [CLS] first, [SEP] last, [UNK].
		t.bos, t.eos, t.unk = 101, 102, 100
		t.addBOS, t.addEOS = true, true
	case "t5":
		t.kind = kindUGM
		// llama.cpp's defaults: no BOS, </s> (1) last, <unk> (2).
		t.eos, t.unk = 1, 2
		t.addEOS = true
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedModel, model)
	}
	if v, ok := f.Bool(keyAddPrefix); ok {
		t.addSpacePrefix = v
	}
	t.chatTemplate, _ = f.String(keyChatTemplate)

	if err := t.loadVocab(f); err != nil {
		return nil, err
	}
	if t.kind == kindBPE {
		if err := t.loadMerges(f); err != nil {
			return nil, err
		}
	}
	if err := t.loadSpecialIDs(f); err != nil {
		return nil, err
	}
	if t.kind == kindUGM {
		if err := t.loadUGM(f); err != nil {
			return nil, err
		}
	}
	t.markEOG(f)
	name, _ := f.String(keyGeneralName)
	t.buildCaches(strings.ToLower(name))
	return t, nil
}

func (t *Tokenizer) loadVocab(f *gguf.File) error {
	toks, ok := f.Strings(keyTokens)
	if !ok {
		return fmt.Errorf("%w: %s (want an array of strings)", ErrMissing, keyTokens)
	}
	n := len(toks)
	if n == 0 || n > math.MaxInt32 {
		return fmt.Errorf("%w: %d tokens", ErrCorrupt, n)
	}
	size := 0
	for _, s := range toks {
		size += len(s)
	}
	var err error
	t.tokens, err = newStrTable(n, size, func(i int) string {
		if toks[i] == "" {
			return "[EMPTY_" + strconv.Itoa(i) + "]" // as llama.cpp renames empty tokens
		}
		return toks[i]
	})
	if err != nil {
		return err
	}
	t.scores = make([]float32, n)
	t.attrs = make([]tokenAttr, n)
	t.index = newVocabIndex(t.tokens)
	if _, present := f.KV[keyScores]; present {
		if s, ok := f.Float32s(keyScores); ok {
			copy(t.scores, s)
			if len(s) != n {
				return fmt.Errorf("%w: %d scores for %d tokens", ErrCorrupt, len(s), n)
			}
		} else if s, ok := f.Int32s(keyScores); ok {
			if len(s) != n {
				return fmt.Errorf("%w: %d scores for %d tokens", ErrCorrupt, len(s), n)
			}
			for i, v := range s {
				t.scores[i] = float32(v)
			}
		} else {
			return fmt.Errorf("%w: %s is not a numeric array", ErrCorrupt, keyScores)
		}
	}
	var types []int32
	if _, present := f.KV[keyTokenType]; present {
		types, ok = f.Int32s(keyTokenType)
		if !ok || len(types) != n {
			return fmt.Errorf("%w: %s has %d entries for %d tokens", ErrCorrupt, keyTokenType, len(types), n)
		}
	}
	for i := range n {
		s := t.tokens.at(int32(i))
		if prev, dup := t.index.add(int32(i)); dup {
			return fmt.Errorf("%w: token %q has ids %d and %d", ErrCorrupt, s, prev, i)
		}
		t.attrs[i] = attrNormal
		if types != nil {
			t.attrs[i] = attrFromType(types[i])
		}
		if t.attrs[i]&attrByte != 0 {
			if _, ok := parseByteToken(s); !ok {
				return fmt.Errorf("%w: byte token %d is %q, not <0xXX>", ErrCorrupt, i, s)
			}
		}
	}
	return nil
}

func attrFromType(tt int32) tokenAttr {
	switch tt {
	case typeNormal:
		return attrNormal
	case typeUnknown:
		return attrUnknown
	case typeControl:
		return attrControl
	case typeUserDefined:
		return attrUserDefined
	case typeUnused:
		return attrUnused
	case typeByte:
		return attrByte
	}
	return 0 // undefined
}

// parseByteToken reads a "<0xXX>" byte-fallback token.
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[3:5], 16, 8)
	return byte(v), err == nil
}

// pairKey is the merges key of the pair of tokens (left, right).
func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// loadMerges reads the merge list into ids: a map of 280k [2]string keys
// took 20-30 MB of a 128k-vocabulary tokenizer and kept the file's merge
// strings alive (BenchmarkLoad).
func (t *Tokenizer) loadMerges(f *gguf.File) error {
	merges, ok := f.Strings(keyMerges)
	if !ok {
		return fmt.Errorf("%w: %s (want an array of strings)", ErrMissing, keyMerges)
	}
	if len(merges) > math.MaxInt32 {
		return fmt.Errorf("%w: %d merges", ErrCorrupt, len(merges))
	}
	for r := range t.charTok {
		t.charTok[r] = t.lookup(string(rune(r)))
	}
	t.merges = make(map[uint64]int32, len(merges))
	for i, m := range merges {
		// The separator is the first space after the first byte, so a merge of a
		// literal space token still splits right.
		sp := -1
		if len(m) > 1 {
			if j := strings.IndexByte(m[1:], ' '); j >= 0 {
				sp = j + 1
			}
		}
		if sp < 0 {
			continue // llama.cpp records an empty pair, which can never match
		}
		left, right := m[:sp], m[sp+1:]
		l, lok := t.tokenID(left)
		r, rok := t.tokenID(right)
		if lok && rok {
			if _, dup := t.merges[pairKey(l, r)]; !dup {
				t.merges[pairKey(l, r)] = int32(i)
			}
			continue
		}
		if t.mergeStrs == nil {
			t.mergeStrs = make(map[[2]string]int32)
		}
		k := [2]string{strings.Clone(left), strings.Clone(right)}
		if _, dup := t.mergeStrs[k]; !dup {
			t.mergeStrs[k] = int32(i)
		}
	}
	return nil
}

// charToks bounds the characters whose tokens BPE keeps in a table: GPT-2's
// stand-ins for the 256 bytes, which every BPE word is spelled in, are below
// it (byteChars).
const charToks = 0x180

// symbolToken is the token of the symbol s: a table lookup for a character
// below charToks, as BPE's first symbols are.
func (t *Tokenizer) symbolToken(s string) int32 {
	if r, n := utf8.DecodeRuneInString(s); n == len(s) && r < charToks && r != utf8.RuneError {
		return t.charTok[r]
	}
	return t.lookup(s)
}

// tokenID is the id of the token s, if there is one.
func (t *Tokenizer) tokenID(s string) (int32, bool) { return t.index.get(s) }

// lookup is s's token, or noToken.
func (t *Tokenizer) lookup(s string) int32 {
	if id, ok := t.tokenID(s); ok {
		return id
	}
	return noToken
}

// mergeOf is the rank of the merge of the adjacent symbols a and b of word,
// whose tokens are ta and tb (noToken for a symbol that is no token), if
// they merge.
func (t *Tokenizer) mergeOf(word string, ta, tb int32, a, b symbol) (int32, bool) {
	if ta != noToken && tb != noToken {
		rank, ok := t.merges[pairKey(ta, tb)]
		return rank, ok
	}
	if t.mergeStrs == nil {
		return 0, false
	}
	rank, ok := t.mergeStrs[[2]string{word[a.start : a.start+a.n], word[b.start : b.start+b.n]}]
	return rank, ok
}

// loadSpecialIDs reads the special token ids and the add_bos / add_eos flags.
// An id of all ones (-1) means "none"; any other id outside the vocabulary is
// corrupt for BOS, EOS and UNK and ignored for the ids only used as hints.
func (t *Tokenizer) loadSpecialIDs(f *gguf.File) error {
	n := int64(t.tokens.len())
	inRange := func(id int32) int32 {
		if id >= 0 && int64(id) >= n {
			return noToken // a default that does not fit this vocabulary
		}
		return id
	}
	t.bos, t.eos, t.unk = inRange(t.bos), inRange(t.eos), inRange(t.unk)
	for _, s := range []struct {
		key    string
		dst    *int32
		strict bool
	}{
		{"tokenizer.ggml.bos_token_id", &t.bos, true},
		{"tokenizer.ggml.eos_token_id", &t.eos, true},
		{"tokenizer.ggml.unknown_token_id", &t.unk, true},
	} {
		v, present := f.KV[s.key]
		if !present {
			continue
		}
		id, ok := specialID(v)
		if !ok {
			return fmt.Errorf("%w: %s is %v", ErrCorrupt, s.key, v.V)
		}
		if id >= 0 && int64(id) >= n {
			return fmt.Errorf("%w: %s = %d is outside a vocabulary of %d", ErrCorrupt, s.key, id, n)
		}
		*s.dst = id
	}
	if v, ok := f.Bool(keyAddBOS); ok {
		t.addBOS = v
	}
	if v, ok := f.Bool(keyAddEOS); ok {
		t.addEOS = v
	}
	t.sep = t.optionalID(f, "tokenizer.ggml.seperator_token_id") // llama.cpp's spelling
	if v, ok := f.Bool("tokenizer.ggml.add_sep_token"); ok && t.sep != noToken {
		t.addSep = v
	}
	if t.addBOS && t.bos == noToken {
		return fmt.Errorf("%w: %s is true but there is no BOS token", ErrCorrupt, keyAddBOS)
	}
	if t.addEOS && t.eos == noToken {
		return fmt.Errorf("%w: %s is true but there is no EOS token", ErrCorrupt, keyAddEOS)
	}
	return nil
}

// specialID reads an id metadata value; all-ones of any width means "none".
func specialID(v gguf.Value) (int32, bool) {
	switch x := v.V.(type) {
	case uint32:
		if x == math.MaxUint32 {
			return noToken, true
		}
		if x > math.MaxInt32 {
			return 0, false
		}
		return int32(x), true
	case int32:
		if x < -1 {
			return 0, false
		}
		return x, true
	case uint64:
		if x == math.MaxUint64 {
			return noToken, true
		}
		if x > math.MaxInt32 {
			return 0, false
		}
		return int32(x), true
	case int64:
		if x < -1 || x > math.MaxInt32 {
			return 0, false
		}
		return int32(x), true
	case uint16:
		return int32(x), true
	case int16:
		if x < -1 {
			return 0, false
		}
		return int32(x), true
	case uint8:
		return int32(x), true
	case int8:
		if x < -1 {
			return 0, false
		}
		return int32(x), true
	}
	return 0, false
}

// optionalID reads an id that only refines end-of-generation detection; like
// llama.cpp, a missing or out-of-range value is ignored.
func (t *Tokenizer) optionalID(f *gguf.File, key string) int32 {
	v, ok := f.KV[key]
	if !ok {
		return noToken
	}
	id, ok := specialID(v)
	if !ok || id < 0 || int(id) >= t.tokens.len() {
		return noToken
	}
	return id
}

// markEOG builds the end-of-generation set and upgrades end-of-turn, FIM and
// other control-looking tokens to control tokens, following llama.cpp's
// text-based detection.
func (t *Tokenizer) markEOG(f *gguf.File) {
	t.eog = map[int32]bool{}
	// detect returns the id named by key, or else the first token whose text is
	// in texts, which llama.cpp then treats as a control token.
	detect := func(keys []string, texts []string) int32 {
		for _, k := range keys {
			if id := t.optionalID(f, k); id != noToken {
				return id
			}
		}
		// llama.cpp walks a hash map, so which of several candidates wins is
		// unspecified there; the lowest id is our deterministic choice.
		best := noToken
		for _, s := range texts {
			if id, ok := t.tokenID(s); ok && (best == noToken || id < best) {
				best = id
			}
		}
		if best != noToken {
			t.attrs[best] |= attrControl
		}
		return best
	}
	eot := detect([]string{"tokenizer.ggml.eot_token_id"}, eotTexts)
	eom := detect([]string{"tokenizer.ggml.eom_token_id"}, []string{"<|eom_id|>"})
	for _, g := range fimGroups {
		id := detect(g.keys, g.texts)
		if g.eog && id != noToken {
			t.eog[id] = true
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.tokenID(s); ok {
			t.eog[id] = true
			t.attrs[id] |= attrControl
		}
	}
	// gpt-oss: these structural tokens always render.
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := t.tokenID(s); ok {
			t.attrs[id] = attrUserDefined
		}
	}
	for _, id := range []int32{t.eos, eot, eom} {
		if id != noToken {
			t.eog[id] = true
		}
	}
	// Control tokens named "unused" are unused.
	for id := range t.tokens.len() {
		if t.attrs[id]&attrControl != 0 && strings.Contains(t.tokens.at(int32(id)), "unused") {
			t.attrs[id] |= attrUnused
		}
	}
	// o200k_harmony / solar-open: "<|end|>" is not end of generation there.
	has := func(s string) bool { id, ok := t.tokenID(s); return ok && t.eog[id] }
	if end, ok := t.tokenID("<|end|>"); ok && t.eog[end] &&
		((has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>"))) {
		delete(t.eog, end)
		t.attrs[end] = attrUserDefined
	}
}

// buildCaches fills the special-token partition order, the byte-fallback table,
// the decoded pieces and the per-model strip attributes.
func (t *Tokenizer) buildCaches(modelName string) {
	for id, a := range t.attrs {
		if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.special = append(t.special, int32(id))
		}
	}
	sort.SliceStable(t.special, func(i, j int) bool {
		return len(t.tokens.at(t.special[i])) > len(t.tokens.at(t.special[j]))
	})
	for b := range t.byteTok {
		t.byteTok[b] = noToken
		if id, ok := t.tokenID(fmt.Sprintf("<0x%02X>", b)); ok {
			t.byteTok[b] = id
		} else if id, ok := t.tokenID(string([]byte{byte(b)})); ok {
			t.byteTok[b] = id
		} else {
			t.byteTok[b] = t.unk // llama.cpp would throw here
		}
	}
	for id := range t.tokens.len() {
		t.maxTokenLen = max(t.maxTokenLen, len(t.tokens.at(int32(id))))
	}
	// A piece is rarely longer than its token's text ("Ġ" renders as a
	// space, "<0x0A>" as one byte), so the texts, which fitted, fit here too.
	t.pieces, _ = newStrTable(t.tokens.len(), len(t.tokens.data), func(id int) string { return t.renderPiece(int32(id)) })
	// Phi-3 strips whitespace to the right of its special tokens, as llama.cpp
	// sets by model name.
	if strings.Contains(modelName, "phi-3") || strings.Contains(modelName, "phi3") {
		for _, id := range t.special {
			t.attrs[id] |= attrRstrip
		}
		if id, ok := t.tokenID("</s>"); ok {
			t.attrs[id] |= attrRstrip
		}
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			if id, ok := t.tokenID(s); ok {
				t.attrs[id] &^= attrRstrip
			}
		}
	}
}

// ChatTemplate returns tokenizer.chat_template, or "" when the file has none.
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }

// Model returns tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (BPE) or
// "bert" (WordPiece) or "t5" (Unigram).
func (t *Tokenizer) Model() string { return t.model }

// Pre returns tokenizer.ggml.pre as read ("" for SentencePiece or when absent).
func (t *Tokenizer) Pre() string { return t.pre }

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return t.tokens.len() }

// BOS returns the beginning-of-sequence id, or -1 when there is none.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence id, or -1 when there is none.
func (t *Tokenizer) EOS() int32 { return t.eos }

// AddBOS reports whether Encode with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Encode with addSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// EncodePair returns the ids of a pair of texts (a reranker's query and
// document) as llama.cpp's server joins them for its rerank endpoint
// (format_prompt_rerank): the first text with the special tokens Encode
// adds, then PairSeparator if any, the second text, and the closing token
// where the vocabulary adds one (add_eos): <s> a </s></s> b </s> for
// XLM-RoBERTa, [CLS] a [SEP] b for BERT, whose [SEP] llama.cpp adds as a
// separator, not as an end token (transformers' pair encoding also closes
// b with [SEP]). No special token is parsed from either text.
func (t *Tokenizer) EncodePair(a, b string) []int32 {
	ids := t.Encode(a, true, false)
	if sep := t.PairSeparator(); sep >= 0 {
		ids = append(ids, sep)
	}
	ids = append(ids, t.Encode(b, false, false)...)
	if t.addEOS && t.eos >= 0 && t.kind != kindWPM {
		ids = append(ids, t.eos)
	}
	return ids
}

// PairSeparator returns the token a pair of texts (a reranker's query and
// document) gets between the first text's closing token and the second
// text, as llama.cpp joins a pair: RoBERTa's second </s>
// (tokenizer.ggml.add_sep_token with seperator_token_id), or noToken (-1)
// when there is none. BERT's single [SEP] is its closing token (EOS) here,
// so WordPiece vocabularies have none.
func (t *Tokenizer) PairSeparator() int32 {
	if t.addSep && t.kind != kindWPM {
		return t.sep
	}
	return noToken
}

// IsEOG reports whether id ends generation: EOS, the end-of-turn and
// end-of-message tokens, and the tokens llama.cpp recognises by text
// ("<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>", ...).
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// TokenID returns the id of the token whose text is exactly piece, as stored in
// the vocabulary (SentencePiece spaces are "▁", BPE bytes are GPT-2 characters).
func (t *Tokenizer) TokenID(piece string) (int32, bool) {
	id, ok := t.tokenID(piece)
	return id, ok
}

// Piece returns the bytes token id stands for, with control tokens rendered as
// their text. It may be a fragment of a UTF-8 sequence. An id outside the
// vocabulary gives "".
func (t *Tokenizer) Piece(id int32) string {
	if id < 0 || int(id) >= t.pieces.len() {
		return ""
	}
	return t.pieces.at(id)
}
