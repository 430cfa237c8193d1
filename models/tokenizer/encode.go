package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// fragment is a piece of input text or an already-decided special token.
type fragment struct {
	text  string
	tok   int32 // noToken for text
	plain bool  // text in which control and unknown tokens are not matched
}

// Segment is a piece of text to encode, with special-token parsing on
// (control tokens written in it become their ids) or off.
type Segment struct {
	Text    string
	Special bool
}

// Encode converts text to token ids exactly as llama.cpp's llama_tokenize does.
// addSpecial adds BOS (and EOS) where the model's metadata asks for them.
// parseSpecial lets control tokens written literally in text ("<|im_start|>",
// "<s>", ...) become their ids; user-defined tokens are always matched, as in
// llama.cpp.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	var frags []fragment
	if text != "" {
		frags = t.partition([]fragment{{text: text, tok: noToken, plain: !parseSpecial}})
	}
	return t.encodeFrags(frags, len(text)/3+2, addSpecial)
}

// EncodeSegments encodes text made of segments, each with special-token
// parsing on or off, as one text: Encode(text, addSpecial, true) of the
// segments' concatenation gives the same ids whenever the segments without
// Special hold no control-token text and no token's text spans a boundary
// between a Special segment and a plain one. Adjacent segments of one kind
// are joined first, and text between tokens is encoded as one piece, so
// where the segments are cut does not otherwise change the ids.
func (t *Tokenizer) EncodeSegments(segs []Segment, addSpecial bool) []int32 {
	frags := make([]fragment, 0, len(segs))
	n := 0
	for _, s := range segs {
		if s.Text == "" {
			continue
		}
		n += len(s.Text)
		if k := len(frags) - 1; k >= 0 && frags[k].plain == !s.Special {
			frags[k].text += s.Text
			continue
		}
		frags = append(frags, fragment{text: s.Text, tok: noToken, plain: !s.Special})
	}
	frags = t.partition(frags)
	// Join text that only a segment boundary separates.
	joined := frags[:0]
	for _, fr := range frags {
		if k := len(joined) - 1; k >= 0 && fr.tok == noToken && joined[k].tok == noToken {
			joined[k].text += fr.text
			continue
		}
		joined = append(joined, fr)
	}
	// A token's lstrip and rstrip reach across segment boundaries, as they
	// would in the joined text.
	for i, fr := range joined {
		if fr.tok == noToken {
			continue
		}
		a := t.attrs[fr.tok]
		if a&attrLstrip != 0 && i > 0 && joined[i-1].tok == noToken {
			joined[i-1].text = strings.TrimRight(joined[i-1].text, cSpaces)
		}
		if a&attrRstrip != 0 && i+1 < len(joined) && joined[i+1].tok == noToken {
			joined[i+1].text = strings.TrimLeft(joined[i+1].text, cSpaces)
		}
	}
	kept := joined[:0]
	for _, fr := range joined {
		if fr.tok != noToken || fr.text != "" {
			kept = append(kept, fr)
		}
	}
	return t.encodeFrags(kept, n/3+2, addSpecial)
}

// ControlTokens returns the texts of the tokens that are only matched with
// special-token parsing on (control and unknown tokens), longest first.
func (t *Tokenizer) ControlTokens() []string {
	var out []string
	for _, id := range t.special {
		if t.attrs[id]&(attrControl|attrUnknown) != 0 && t.tokens.at(id) != "" {
			out = append(out, t.tokens.at(id))
		}
	}
	return out
}

// IsControl reports whether id is a control or unknown token: one that
// Decode renders as nothing unless asked (WithSpecial).
func (t *Tokenizer) IsControl(id int32) bool {
	return id >= 0 && int(id) < len(t.attrs) && t.attrs[id]&(attrControl|attrUnknown) != 0
}

func (t *Tokenizer) encodeFrags(frags []fragment, size int, addSpecial bool) []int32 {
	out := make([]int32, 0, size)
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	switch t.kind {
	case kindSPM:
		var s spmState
		prevSpecial := true // the first text gets the space prefix
		for _, fr := range frags {
			if fr.tok != noToken {
				out = append(out, fr.tok)
				prevSpecial = true
				continue
			}
			txt := fr.text
			if t.addSpacePrefix && prevSpecial {
				txt = " " + txt
			}
			out = s.encode(t, strings.ReplaceAll(txt, " ", "▁"), out)
			prevSpecial = false
		}
	case kindBPE:
		var s bpeState
		for _, fr := range frags {
			if fr.tok != noToken {
				out = append(out, fr.tok)
				continue
			}
			out = s.encode(t, fr.text, out)
		}
	case kindWPM:
		for _, fr := range frags {
			if fr.tok != noToken {
				out = append(out, fr.tok)
				continue
			}
			out = t.wpmEncode(fr.text, out)
		}
	case kindUGM:
		for _, fr := range frags {
			if fr.tok != noToken {
				out = append(out, fr.tok)
				continue
			}
			out = t.ugmEncode(fr.text, out)
		}
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

// partition splits text fragments around special tokens, longest token
// first, as llama.cpp's tokenizer_st_partition does. Control and unknown
// tokens are not matched in plain fragments (parseSpecial off).
func (t *Tokenizer) partition(frags []fragment) []fragment {
	var next []fragment
	for _, id := range t.special {
		a := t.attrs[id]
		control := a&(attrControl|attrUnknown) != 0
		tok := t.tokens.at(id)
		split := false
		for _, fr := range frags {
			if fr.tok == noToken && !(control && fr.plain) && strings.Contains(fr.text, tok) {
				split = true
				break
			}
		}
		if !split {
			continue
		}
		next = next[:0]
		for _, fr := range frags {
			if fr.tok != noToken || (control && fr.plain) {
				next = append(next, fr)
				continue
			}
			rest := fr.text
			for {
				i := strings.Index(rest, tok)
				if i < 0 {
					if rest != "" {
						next = append(next, fragment{text: rest, tok: noToken})
					}
					break
				}
				left := rest[:i]
				if a&attrLstrip != 0 {
					left = strings.TrimRight(left, cSpaces)
				}
				if left != "" {
					next = append(next, fragment{text: left, tok: noToken, plain: fr.plain})
				}
				next = append(next, fragment{tok: id})
				rest = rest[i+len(tok):]
				if a&attrRstrip != 0 {
					rest = strings.TrimLeft(rest, cSpaces)
				}
			}
		}
		frags, next = next, frags
	}
	return frags
}

// cSpaces is what C's isspace accepts.
const cSpaces = " \t\n\v\f\r"

// bigram is a candidate merge of two adjacent symbols. Higher key wins; on a
// tie the leftmost pair does.
type bigram struct {
	key         float64
	left, right int32
	size        int32
}

// bigramQueue is a binary max-heap of bigrams.
type bigramQueue []bigram

func (q bigramQueue) less(i, j int) bool { // i ranks above j
	if q[i].key != q[j].key {
		return q[i].key > q[j].key
	}
	return q[i].left < q[j].left
}

func (q *bigramQueue) push(b bigram) {
	*q = append(*q, b)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *bigramQueue) pop() bigram {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, best := 2*i+1, i
		if l < len(h) && h.less(l, best) {
			best = l
		}
		if r := l + 1; r < len(h) && h.less(r, best) {
			best = r
		}
		if best == i {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	*q = h
	return top
}

// symbol is a run of bytes [start, start+n) of the text being merged, linked to
// its live neighbours. n == 0 marks a symbol merged into its left neighbour.
type symbol struct {
	start, n   int32
	prev, next int32
}

// utf8Len is the sequence length a lead byte announces (llama.cpp's
// unicode_len_utf8): continuation and invalid bytes count as one.
func utf8Len(b byte) int {
	switch b >> 4 {
	case 0xc, 0xd:
		return 2
	case 0xe:
		return 3
	case 0xf:
		return 4
	}
	return 1
}

// splitSymbols makes one symbol per UTF-8 sequence of text.
func splitSymbols(text string, syms []symbol) []symbol {
	if cap(syms) < len(text) {
		syms = make([]symbol, 0, len(text))
	}
	syms = syms[:0]
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		idx := int32(len(syms))
		next := idx + 1
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, symbol{start: int32(off), n: int32(n), prev: idx - 1, next: next})
		off += n
	}
	return syms
}

// merge removes the right symbol of b from the chain, folding it into the left.
func mergeSymbols(syms []symbol, b bigram) {
	l, r := &syms[b.left], &syms[b.right]
	l.n += r.n
	r.n = 0
	l.next = r.next
	if r.next >= 0 {
		syms[r.next].prev = b.left
	}
}

// mergeAll merges adjacent symbols of syms, the best-keyed pair first (see
// bigram), until no adjacent pair is left that key accepts; key gives a pair's
// key and whether it may merge at all. q is emptied and reused as the heap.
func (q *bigramQueue) mergeAll(syms []symbol, key func(a, b symbol) (float64, bool)) {
	if cap(*q) < len(syms) {
		*q = make(bigramQueue, 0, len(syms))
	}
	*q = (*q)[:0]
	try := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		a, b := syms[l], syms[r]
		if k, ok := key(a, b); ok {
			q.push(bigram{key: k, left: l, right: r, size: a.n + b.n})
		}
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		try(i-1, i)
	}
	for len(*q) > 0 {
		b := q.pop()
		l, r := syms[b.left], syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // stale
		}
		mergeSymbols(syms, b)
		try(syms[b.left].prev, b.left)
		try(b.left, syms[b.left].next)
	}
}

// spmState holds the buffers of one SentencePiece encoding.
type spmState struct {
	syms []symbol
	q    bigramQueue
}

// encode is llama.cpp's llm_tokenizer_spm_session: merge the adjacent pair
// whose concatenation is the best-scoring token until none is left, then emit
// each symbol as a token or as byte-fallback tokens.
func (s *spmState) encode(t *Tokenizer, text string, out []int32) []int32 {
	s.syms = splitSymbols(text, s.syms)
	syms := s.syms
	s.q.mergeAll(syms, func(a, b symbol) (float64, bool) {
		id, ok := t.tokenID(text[a.start : a.start+a.n+b.n])
		if !ok {
			return 0, false
		}
		return float64(t.scores[id]), true
	})
	if len(syms) == 0 {
		return out
	}
	for i := int32(0); i != -1; i = syms[i].next {
		sym := text[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := t.tokenID(sym); ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(sym); j++ {
			if id := t.byteTok[sym[j]]; id != noToken {
				out = append(out, id)
			}
		}
	}
	return out
}

// bpeState holds the buffers of one BPE encoding.
type bpeState struct {
	runes []rune
	cls   []uint8
	sp    splitter
	word  []byte
	syms  []symbol
	q     bigramQueue
	// tokens caches the token of each symbol of the word being merged.
	tokens symbolTokens
}

// symbolTokens caches the tokens of a word's symbols by where they start: a
// symbol's token is looked up once, and again only once a merge has made it
// longer. Merges are keyed by the two symbols' tokens (Tokenizer.merges).
type symbolTokens []struct{ n, id int32 }

// reset empties the cache for a word of n bytes.
func (c symbolTokens) reset(n int) symbolTokens {
	if cap(c) < n {
		c = make(symbolTokens, n)
	}
	c = c[:n]
	clear(c)
	return c
}

// of is the token of the symbol a of word, noToken if none.
func (c symbolTokens) of(t *Tokenizer, word string, a symbol) int32 {
	e := &c[a.start]
	if e.n != a.n {
		e.n, e.id = a.n, t.symbolToken(word[a.start:a.start+a.n])
	}
	return e.id
}

// encode is llama.cpp's llm_tokenizer_bpe_session for one text fragment.
func (s *bpeState) encode(t *Tokenizer, text string, out []int32) []int32 {
	s.runes = decodeRunes(text, s.runes[:0])
	s.cls = s.cls[:0]
	for _, r := range s.runes {
		s.cls = append(s.cls, classify(r))
	}
	var enc [4]byte
	for _, p := range pretokenize(t.pretok, s.runes, s.cls, &s.sp) {
		s.word = s.word[:0]
		for _, r := range s.runes[p.lo:p.hi] {
			for _, b := range appendRune(enc[:0], r) {
				s.word = append(s.word, byteChars[b]...)
			}
		}
		out = s.mergeWord(t, string(s.word), out)
	}
	return out
}

func (s *bpeState) mergeWord(t *Tokenizer, word string, out []int32) []int32 {
	if t.ignoreMerges {
		if id, ok := t.tokenID(word); ok {
			return append(out, id)
		}
	}
	s.syms = splitSymbols(word, s.syms)
	syms := s.syms
	s.tokens = s.tokens.reset(len(word))
	s.q.mergeAll(syms, func(a, b symbol) (float64, bool) {
		rank, ok := t.mergeOf(word, s.tokens.of(t, word, a), s.tokens.of(t, word, b), a, b)
		return -float64(rank), ok
	})
	if len(syms) == 0 {
		return out
	}
	for i := int32(0); i != -1; i = syms[i].next {
		sym := word[syms[i].start : syms[i].start+syms[i].n]
		if id := s.tokens.of(t, word, syms[i]); id != noToken {
			out = append(out, id)
			continue
		}
		// llama.cpp looks each byte up on its own and drops the misses.
		for j := 0; j < len(sym); j++ {
			if id, ok := t.tokenID(sym[j : j+1]); ok {
				out = append(out, id)
			}
		}
	}
	return out
}

// byteChars maps each byte to GPT-2's printable stand-in: printable Latin-1
// bytes stand for themselves, the rest are moved to U+0100 and up in order.
var byteChars = func() [256]string {
	var m [256]string
	n := 0
	for b := range 256 {
		if (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			m[b] = string(rune(b))
		} else {
			m[b] = string(rune(256 + n))
			n++
		}
	}
	return m
}()

// charByte inverts byteChars.
var charByte = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b, s := range byteChars {
		r, _ := utf8.DecodeRuneInString(s)
		m[r] = byte(b)
	}
	return m
}()
