package tokenizer

import "unicode"

// Codepoint classes used by the pre-tokenizers. A position outside the piece
// being split has no bits at all, which the splitters use as "end".
const (
	clsAny    uint8 = 1 << iota // inside the piece
	clsLetter                   // \p{L}
	clsNumber                   // \p{N}
	clsSpace                    // \s (Unicode White_Space)
	clsPunct                    // \p{P}
)

// decodeRunes splits s into codepoints as llama.cpp's unicode_cpts_from_utf8
// does: a malformed byte becomes U+FFFD and decoding resumes at the next byte;
// overlong forms and surrogates are accepted as they decode.
func decodeRunes(s string, dst []rune) []rune {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c < 0x80:
			dst = append(dst, rune(c))
			i++
			continue
		case c&0x40 == 0:
		case c&0x20 == 0:
			if i+1 < len(s) && s[i+1]&0xc0 == 0x80 {
				dst = append(dst, rune(c&0x1f)<<6|rune(s[i+1]&0x3f))
				i += 2
				continue
			}
		case c&0x10 == 0:
			if i+2 < len(s) && s[i+1]&0xc0 == 0x80 && s[i+2]&0xc0 == 0x80 {
				dst = append(dst, rune(c&0x0f)<<12|rune(s[i+1]&0x3f)<<6|rune(s[i+2]&0x3f))
				i += 3
				continue
			}
		case c&0x08 == 0:
			if i+3 < len(s) && s[i+1]&0xc0 == 0x80 && s[i+2]&0xc0 == 0x80 && s[i+3]&0xc0 == 0x80 {
				r := rune(c&0x07)<<18 | rune(s[i+1]&0x3f)<<12 | rune(s[i+2]&0x3f)<<6 | rune(s[i+3]&0x3f)
				if r > unicode.MaxRune {
					r = unicode.ReplacementChar // llama.cpp cannot re-encode these either
				}
				dst = append(dst, r)
				i += 4
				continue
			}
		}
		dst = append(dst, unicode.ReplacementChar)
		i++
	}
	return dst
}

// appendRune encodes r without Go's surrogate check, matching llama.cpp's
// unicode_cpt_to_utf8.
func appendRune(b []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(b, byte(r))
	case r < 0x800:
		return append(b, 0xc0|byte(r>>6), 0x80|byte(r)&0x3f)
	case r < 0x10000:
		return append(b, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
	}
	return append(b, 0xf0|byte(r>>18), 0x80|byte(r>>12)&0x3f, 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
}

func classify(r rune) uint8 {
	c := clsAny
	if r < 0x80 {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			c |= clsLetter
		case r >= '0' && r <= '9':
			c |= clsNumber
		case r == ' ', r >= '\t' && r <= '\r':
			c |= clsSpace
		case unicode.IsPunct(r):
			c |= clsPunct
		}
		return c
	}
	switch {
	case unicode.IsSpace(r):
		c |= clsSpace
	case unicode.IsLetter(r):
		c |= clsLetter
	case unicode.IsNumber(r):
		c |= clsNumber
	case unicode.IsPunct(r):
		c |= clsPunct
	}
	return c
}

// piece is a half-open range of codepoint indices.
type piece struct{ lo, hi int }

// splitter walks one piece of a codepoint slice and appends the sub-pieces it
// cuts. It mirrors the state of llama.cpp's hand-written regex splitters.
type splitter struct {
	r    []rune
	cls  []uint8
	lo   int
	hi   int
	prev int
	out  []piece
}

func (s *splitter) get(p int) uint8 {
	if p >= s.lo && p < s.hi {
		return s.cls[p]
	}
	return 0
}

func (s *splitter) cpt(p int) rune {
	if p >= s.lo && p < s.hi {
		return s.r[p]
	}
	return -1
}

func (s *splitter) add(end int) {
	if end > s.prev {
		s.out = append(s.out, piece{s.prev, end})
	}
	s.prev = end
}

func lowerASCII(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// contraction matches 's 't 're 've 'm 'll 'd at pos and returns its length.
func (s *splitter) contraction(pos int, fold bool) int {
	if s.r[pos] != '\'' || pos+1 >= s.hi {
		return 0
	}
	c1 := s.r[pos+1]
	if fold {
		c1 = lowerASCII(c1)
	}
	if c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd' {
		return 2
	}
	if pos+2 < s.hi {
		c2 := s.r[pos+2]
		if fold {
			c2 = lowerASCII(c2)
		}
		if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
			return 3
		}
	}
	return 0
}

const clsWLN = clsSpace | clsLetter | clsNumber

// gpt2 splits with 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+.
func (s *splitter) gpt2(lo, hi int) {
	s.lo, s.hi, s.prev = lo, hi, lo
	for pos := lo; pos < hi; {
		c := s.r[pos]
		if n := s.contraction(pos, false); n > 0 {
			pos += n
			s.add(pos)
			continue
		}
		f2 := s.cls[pos]
		if c == ' ' {
			f2 = s.get(pos + 1)
		}
		if f2&clsLetter != 0 || f2&clsNumber != 0 {
			want := f2 & (clsLetter | clsNumber)
			if c == ' ' {
				pos++
			}
			for s.get(pos)&want != 0 {
				pos++
			}
			s.add(pos)
			continue
		}
		if f2&clsWLN == 0 && f2 != 0 {
			if c == ' ' {
				pos++
			}
			for g := s.get(pos); g&clsWLN == 0 && g != 0; g = s.get(pos) {
				pos++
			}
			s.add(pos)
			continue
		}
		n := 0
		for s.get(pos+n)&clsSpace != 0 {
			n++
		}
		switch {
		case n > 1 && pos+n < hi:
			pos += n - 1
		case n > 0:
			pos += n
		default:
			pos++
		}
		s.add(pos)
	}
}

// llama3 splits with Llama 3's pattern
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// and, with maxDigits 1, Qwen2's, which is the same but for \p{N}.
func (s *splitter) llama3(lo, hi, maxDigits int) {
	s.lo, s.hi, s.prev = lo, hi, lo
	for pos := lo; pos < hi; {
		c, f := s.r[pos], s.cls[pos]
		if n := s.contraction(pos, true); n > 0 {
			pos += n
			s.add(pos)
			continue
		}
		if c != '\r' && c != '\n' && f&clsNumber == 0 && (f&clsLetter != 0 || s.get(pos+1)&clsLetter != 0) {
			pos++
			for s.get(pos)&clsLetter != 0 {
				pos++
			}
			s.add(pos)
			continue
		}
		if f&clsNumber != 0 {
			start := pos
			for s.get(pos)&clsNumber != 0 {
				pos++
				if pos-start >= maxDigits {
					s.add(pos)
					start = pos
				}
			}
			s.add(pos)
			continue
		}
		f2 := f
		if c == ' ' {
			f2 = s.get(pos + 1)
		}
		if f2&clsWLN == 0 {
			if c == ' ' {
				pos++
			}
			for g := s.get(pos); g&clsWLN == 0 && g != 0; g = s.get(pos) {
				pos++
			}
			for c2 := s.cpt(pos); c2 == '\r' || c2 == '\n'; c2 = s.cpt(pos) {
				pos++
			}
			s.add(pos)
			continue
		}
		n, lastNL := 0, -1
		for s.get(pos+n)&clsSpace != 0 {
			if c2 := s.r[pos+n]; c2 == '\r' || c2 == '\n' {
				lastNL = pos + n + 1
			}
			n++
		}
		switch {
		case lastNL >= 0:
			pos = lastNL
		case n > 1 && pos+n < hi:
			pos += n - 1
		case n > 0:
			pos += n
		default:
			pos++
		}
		s.add(pos)
	}
}

// runs cuts [lo, hi) into maximal runs where in(p) is true and the gaps
// between them, as a regex split of the form [class]+ keeps both.
func (s *splitter) runs(lo, hi int, in func(p int) bool) {
	s.lo, s.hi, s.prev = lo, hi, lo
	for pos := lo; pos < hi; {
		if !in(pos) {
			pos++
			continue
		}
		s.add(pos)
		for pos < hi && in(pos) {
			pos++
		}
		s.add(pos)
	}
	s.add(hi)
}

// triples cuts out every non-overlapping run of three ASCII digits, leftmost
// first ([0-9][0-9][0-9]).
func (s *splitter) triples(lo, hi int) {
	s.lo, s.hi, s.prev = lo, hi, lo
	digit := func(p int) bool { return s.r[p] >= '0' && s.r[p] <= '9' }
	for pos := lo; pos+3 <= hi; {
		if digit(pos) && digit(pos+1) && digit(pos+2) {
			s.add(pos)
			pos += 3
			s.add(pos)
			continue
		}
		pos++
	}
	s.add(hi)
}

// pretokenize cuts r (classes in cls) into the pieces BPE merges within.
// scratch is reused between calls.
func pretokenize(kind preKind, r []rune, cls []uint8, sp *splitter) []piece {
	sp.r, sp.cls, sp.out = r, cls, sp.out[:0]
	n := len(r)
	switch kind {
	case preGPT2:
		sp.gpt2(0, n)
		return sp.out
	case preLlama3:
		sp.llama3(0, n, 3)
		return sp.out
	case preQwen2:
		sp.llama3(0, n, 1)
		return sp.out
	}
	// llama.cpp's default: [\p{P}\$\+<=>\^~\|]+, then the GPT-2 pattern, then
	// \p{N}+, then [0-9][0-9][0-9], each splitting the pieces of the last.
	punct := func(p int) bool {
		c := r[p]
		if c < 0x80 && c != '`' && (cls[p]&clsPunct != 0 || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' || c == '|') {
			return true
		}
		return c >= 0x80 && cls[p]&clsPunct != 0 && cls[p]&clsSpace == 0
	}
	number := func(p int) bool { return cls[p]&clsNumber != 0 }
	stages := []func(lo, hi int){
		func(lo, hi int) { sp.runs(lo, hi, punct) },
		func(lo, hi int) { sp.gpt2(lo, hi) },
		func(lo, hi int) { sp.runs(lo, hi, number) },
		func(lo, hi int) { sp.triples(lo, hi) },
	}
	cur := []piece{{0, n}}
	if n == 0 {
		cur = nil
	}
	for _, stage := range stages {
		sp.out = sp.out[:0]
		for _, p := range cur {
			stage(p.lo, p.hi)
		}
		cur = append(cur[:0:0], sp.out...)
	}
	return cur
}
