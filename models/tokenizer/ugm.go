package tokenizer

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// SentencePiece Unigram (tokenizer.ggml.model = "t5": T5, XLM-RoBERTa and
// the bge-m3 family), as llama.cpp's UGM tokenizer runs it: the text is
// normalised with the model's precompiled character map, spaces become "▁"
// (runs merged and one put before each word when the file says so), then
// the Viterbi path of highest total score is taken one code point at a time,
// a code point no token starts with costing the lowest normal score minus
// 10 as [UNK], and runs of [UNK] merged into one.

// Metadata keys of the Unigram tokenizer.
const (
	keyCharsmap      = "tokenizer.ggml.precompiled_charsmap"
	keyRemoveExtraWS = "tokenizer.ggml.remove_extra_whitespaces"
)

// ugmUnknownPenalty is how far below the lowest normal score an unknown code
// point scores (llama.cpp's unknown_token_score_penalty).
const ugmUnknownPenalty = 10

// ugm is a Unigram vocabulary's matching state, built once at load.
type ugm struct {
	maxLen        int     // the longest matchable token, in bytes
	unkScore      float64 // an unknown code point's score
	userMaxLen    int     // the longest user-defined token, in bytes
	removeExtraWS bool    // merge whitespace runs and put one space before each word
	xcda          []uint32
	repl          []byte // null-terminated replacements the XCDA's leaves index
}

// loadUGM reads the Unigram tokenizer's settings and its character map.
func (t *Tokenizer) loadUGM(f *gguf.File) error {
	u := &ugm{}
	if v, ok := f.Bool(keyRemoveExtraWS); ok {
		u.removeExtraWS = v
	}
	minScore := math.MaxFloat32
	for id, a := range t.attrs {
		if a&attrNormal != 0 {
			minScore = min(minScore, float64(t.scores[id]))
		}
		if a&(attrNormal|attrUserDefined|attrUnused) != 0 {
			u.maxLen = max(u.maxLen, len(t.tokens.at(int32(id))))
		}
		if a&attrUserDefined != 0 {
			u.userMaxLen = max(u.userMaxLen, len(t.tokens.at(int32(id))))
		}
	}
	u.unkScore = float64(float32(minScore) - ugmUnknownPenalty)
	if v, present := f.KV[keyCharsmap]; present {
		raw, ok := charsmapBytes(v)
		if !ok || len(raw) < 4 {
			return fmt.Errorf("%w: %s is not a byte array", ErrCorrupt, keyCharsmap)
		}
		n := int(uint32(raw[0]) | uint32(raw[1])<<8 | uint32(raw[2])<<16 | uint32(raw[3])<<24)
		if n%4 != 0 || n > len(raw)-4 {
			return fmt.Errorf("%w: %s holds a character map of %d bytes in %d", ErrCorrupt, keyCharsmap, n, len(raw)-4)
		}
		u.xcda = make([]uint32, n/4)
		for i := range u.xcda {
			b := raw[4+4*i:]
			u.xcda[i] = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		}
		u.repl = raw[4+n:]
	}
	t.ugm = u
	return nil
}

// charsmapBytes returns a GGUF int8 or uint8 array's bytes.
func charsmapBytes(v gguf.Value) ([]byte, bool) {
	switch a := v.V.(type) {
	case []uint8:
		return a, true
	case []int8:
		b := make([]byte, len(a))
		for i, x := range a {
			b[i] = byte(x)
		}
		return b, true
	}
	return nil, false
}

// ugmEncode appends the ids of text.
func (t *Tokenizer) ugmEncode(text string, out []int32) []int32 {
	s := t.ugmNormalize(text)
	n := len(s)
	if n == 0 {
		return out
	}
	type best struct {
		id    int32
		from  int
		score float64
	}
	path := make([]best, n+1)
	for i := range path {
		path[i] = best{t.unk, 0, -math.MaxFloat64}
	}
	path[0].score = 0
	for off := 0; off < n; {
		cp := min(utf8SeqLen(s[off]), n-off)
		cur := path[off]
		whole := false
		for end := off + 1; end <= min(n, off+t.ugm.maxLen); end++ {
			id, ok := t.tokenID(s[off:end])
			if !ok || t.attrs[id]&(attrNormal|attrUserDefined|attrUnused) == 0 {
				continue
			}
			if end-off == cp {
				whole = true
			}
			score := float64(t.scores[id])
			if t.attrs[id]&attrUserDefined != 0 {
				score = 0
			}
			if c := cur.score + score; c > path[end].score {
				path[end] = best{id, off, c}
			}
		}
		if !whole {
			if c := cur.score + t.ugm.unkScore; c > path[off+cp].score {
				path[off+cp] = best{t.unk, off, c}
			}
		}
		off += cp
	}
	start := len(out)
	prevUnk := false
	for i := n; ; i = path[i].from {
		unk := path[i].id == t.unk
		if !(prevUnk && unk) {
			out = append(out, path[i].id)
		}
		if path[i].from == 0 {
			break
		}
		prevUnk = unk
	}
	for i, j := start, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// utf8SeqLen is the length of the UTF-8 sequence a lead byte starts, as
// llama.cpp's unicode_len_utf8 reads it (a stray continuation byte is 1).
func utf8SeqLen(b byte) int {
	return [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}[b>>4]
}

// ugmNormalize maps text through the character map, then writes its spaces
// as "▁": with remove_extra_whitespaces, runs of spaces go and each word
// gets one before it; otherwise every space is kept and, with
// add_space_prefix, one is put before the first word.
func (t *Tokenizer) ugmNormalize(text string) string {
	const space = "▁"
	merge := t.ugm.removeExtraWS
	out := make([]byte, 0, len(text)*3)
	word, prepended := false, false
	for off := 0; off < len(text); {
		repl, used := t.ugmNormalizePrefix(text, off)
		for i := 0; i < len(repl); i++ {
			c := repl[i]
			if c != ' ' {
				if !word {
					word = true
					if (t.addSpacePrefix && !prepended) || merge {
						out = append(out, space...)
						prepended = true
					}
				}
				out = append(out, c)
				continue
			}
			word = false
			if !merge {
				out = append(out, space...)
			}
		}
		off += used
	}
	return string(out)
}

// ugmNormalizePrefix returns the normalised form of the text at off and how
// many bytes of the text it stands for: a user-defined token unchanged, else
// the character map's replacement of its longest matching prefix, else one
// code point unchanged (an invalid byte becomes U+FFFD).
func (t *Tokenizer) ugmNormalizePrefix(text string, off int) (string, int) {
	for l := min(t.ugm.userMaxLen, len(text)-off); l > 0; l-- {
		if id, ok := t.tokenID(text[off : off+l]); ok && t.attrs[id]&attrUserDefined != 0 {
			return text[off : off+l], l
		}
	}
	if l, at := t.ugm.longestMapped(text, off); l > 0 {
		end := at
		for end < len(t.ugm.repl) && t.ugm.repl[end] != 0 {
			end++
		}
		return string(t.ugm.repl[at:end]), l
	}
	r, size := utf8.DecodeRuneInString(text[off:])
	if r == utf8.RuneError && size <= 1 {
		return "\uFFFD", 1
	}
	return text[off : off+size], size
}

// longestMapped walks the character map's XOR-compressed double array
// (Kanda 2018, as SentencePiece builds it) along the text at off and returns
// the length of the longest prefix it maps and where its replacement starts
// in repl (0, 0: none). A node packs BASE in bits 10-30 (shifted by 8 when
// bit 9 is set), LEAF in bit 8 and LCHECK in bits 0-7 and 31.
func (u *ugm) longestMapped(text string, off int) (length, at int) {
	node := func(i uint32) (uint32, bool) {
		if int(i) >= len(u.xcda) {
			return 0, false
		}
		return u.xcda[i], true
	}
	base := func(v uint32) uint32 { return (v >> 10) << ((v & (1 << 9)) >> 6) }
	root, ok := node(0)
	if !ok {
		return 0, 0
	}
	idx := base(root)
	for p := off; p < len(text); p++ {
		c := uint32(text[p])
		if c == 0 {
			break
		}
		idx ^= c
		v, ok := node(idx)
		if !ok || v&(1<<31|0xff) != c {
			break
		}
		leaf := (v>>8)&1 == 1
		idx ^= base(v)
		if leaf {
			w, ok := node(idx)
			if !ok {
				break
			}
			if val := int(w & (1<<31 - 1)); val < len(u.repl) {
				length, at = p-off+1, val
			}
		}
	}
	return length, at
}
