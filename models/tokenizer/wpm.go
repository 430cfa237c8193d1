package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// WordPiece (tokenizer.ggml.model = "bert"), as llama.cpp's WPM tokenizer
// runs it. Its GGUF vocabulary marks a word's first piece with a leading
// "▁" and continuation pieces plainly (the converter's rewrite of BERT's
// "##"), so a word is matched greedily, longest piece first, from a "▁"
// written before it.

// wpmEncode appends the ids of text.
func (t *Tokenizer) wpmEncode(text string, out []int32) []int32 {
	for _, word := range wpmWords(text) {
		w := "▁" + word
		start := len(out)
		for i := 0; i < len(w); {
			j := min(len(w), i+t.maxTokenLen+1)
			for ; j > i; j-- {
				if id, ok := t.tokenID(w[i:j]); ok {
					out = append(out, id)
					break
				}
			}
			if j == i { // no piece starts here: the whole word is unknown
				out = out[:start]
				break
			}
			i = j
		}
		if len(out) == start {
			out = append(out, t.unk)
		}
	}
	return out
}

// wpmWords normalizes text as BERT's basic tokenizer does, in llama.cpp's
// version: each code point replaced by the first code point of its NFD
// decomposition (so accents go) and lowercased; control characters
// dropped; split at whitespace; each punctuation mark, ASCII symbol and CJK
// ideograph a word of its own.
func wpmWords(text string) []string {
	var words []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			words = append(words, cur.String())
			cur.Reset()
		}
	}
	for _, r := range text {
		r = nfdFirst(r)
		switch {
		case isSpace(r):
			flush()
		case r == 0 || r == utf8.RuneError || isControlCat(r):
		case unicode.IsPunct(r) || r < 0x7F && unicode.IsSymbol(r) || isCJK(r):
			flush()
			words = append(words, string(unicode.ToLower(r)))
		default:
			cur.WriteRune(unicode.ToLower(r))
		}
	}
	flush()
	return words
}

// nfdFirst is the first code point of r's canonical decomposition.
func nfdFirst(r rune) rune {
	if r < 0xC0 {
		return r // nothing below À decomposes
	}
	if r >= 0xAC00 && r <= 0xD7A3 { // a Hangul syllable: its leading jamo
		return 0x1100 + (r-0xAC00)/588
	}
	var buf [utf8.UTFMax]byte
	d := norm.NFD.Properties(buf[:utf8.EncodeRune(buf[:], r)]).Decomposition()
	if len(d) == 0 {
		return r
	}
	first, _ := utf8.DecodeRune(d)
	return nfdFirst(first)
}

// isSpace is Unicode White_Space, as llama.cpp's whitespace flag.
func isSpace(r rune) bool { return unicode.IsSpace(r) }

// isControlCat reports general category C (Cc, Cf, Co, Cs) and code points
// no category lists (unassigned), which llama.cpp's tables also count as
// control.
func isControlCat(r rune) bool {
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) {
		return true
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z)
}

// isCJK reports the CJK ideograph blocks BERT splits one by one (with the
// upper bound of Extension E as Hugging Face's tokenizers write it).
func isCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF ||
		r >= 0x20000 && r <= 0x2A6DF || r >= 0x2A700 && r <= 0x2B73F ||
		r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}
