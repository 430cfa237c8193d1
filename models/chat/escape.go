package chat

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// mark is the escape rune. Untrusted text is rendered with mark written
// after the first rune of every place a control token starts in it (so no
// control token survives in it) and with its own marks doubled; after the
// render, every control token left in the output was written by the
// template, and the marks are taken out again.
const mark = '\U0010FFFD'

const markStr = string(mark)

// escaper knows one vocabulary's control tokens.
type escaper struct {
	tokens  []string          // longest first, so a scan takes the longest match
	byFirst map[byte][]string // tokens by first byte, longest first
}

// newEscaper returns nil when there is nothing to protect.
func newEscaper(tokens []string) *escaper {
	e := &escaper{byFirst: map[byte][]string{}}
	seen := map[string]bool{}
	for _, t := range tokens {
		// A one-rune token cannot be broken by a mark, and a token holding
		// the mark cannot be told from an escape; neither is matched.
		if t == "" || utf8.RuneCountInString(t) < 2 || strings.Contains(t, markStr) || seen[t] {
			continue
		}
		seen[t] = true
		e.tokens = append(e.tokens, t)
	}
	if len(e.tokens) == 0 {
		return nil
	}
	sort.SliceStable(e.tokens, func(i, j int) bool { return len(e.tokens[i]) > len(e.tokens[j]) })
	for _, t := range e.tokens {
		e.byFirst[t[0]] = append(e.byFirst[t[0]], t)
	}
	return e
}

// match returns the longest control token at the start of s, or "".
func (e *escaper) match(s string) string {
	for _, t := range e.byFirst[s[0]] {
		if strings.HasPrefix(s, t) {
			return t
		}
	}
	return ""
}

// escape marks untrusted text. A nil escaper returns s.
func (e *escaper) escape(s string) string {
	if e == nil || !e.needs(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		b.WriteString(s[i : i+n])
		if s[i:i+n] == markStr {
			b.WriteString(markStr)
		} else if e.match(s[i:]) != "" {
			b.WriteString(markStr)
		}
		i += n
	}
	return b.String()
}

func (e *escaper) needs(s string) bool {
	if strings.Contains(s, markStr) {
		return true
	}
	for i := 0; i < len(s); i++ {
		if _, ok := e.byFirst[s[i]]; ok && e.match(s[i:]) != "" {
			return true
		}
	}
	return false
}

// segments splits rendered output at the control tokens left in it and
// takes the marks out of the text between them.
func (e *escaper) segments(out string) []Segment {
	var segs []Segment
	start := 0
	for i := 0; i < len(out); {
		if _, ok := e.byFirst[out[i]]; ok {
			if t := e.match(out[i:]); t != "" {
				if i > start {
					segs = append(segs, Segment{Text: unescape(out[start:i])})
				}
				segs = append(segs, Segment{Text: t, Special: true})
				i += len(t)
				start = i
				continue
			}
		}
		i++
	}
	if start < len(out) {
		segs = append(segs, Segment{Text: unescape(out[start:])})
	}
	return segs
}

// unescape takes the marks out: a doubled mark is one mark of the user's
// text, a single one is dropped.
func unescape(s string) string {
	if !strings.Contains(s, markStr) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.Index(s, markStr)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		s = s[i+len(markStr):]
		if strings.HasPrefix(s, markStr) {
			b.WriteString(markStr)
			s = s[len(markStr):]
		}
	}
}
