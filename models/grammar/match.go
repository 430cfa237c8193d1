package grammar

import "errors"

// ErrGrammar is returned by Matcher.Accept for bytes the grammar does not
// allow at that point.
var ErrGrammar = errors.New("grammar: output leaves the grammar")

// maxThreads bounds how many parses of an ambiguous grammar a Matcher follows
// at once; dropping one never makes the output invalid, since every kept parse
// is itself a viable prefix.
const maxThreads = 64

// frame is one open value on a parse stack. Frames are immutable once built:
// a step makes new ones and shares the rest, so a mask search can try every
// token from the same state without copying stacks.
type frame struct {
	n     *node // nil for the root: the value is complete
	up    *frame
	phase uint8
	depth uint8 // nesting of free values (kAny)
	neg   bool  // kNumber: a minus sign was read
	i     int32 // property index, item count, runes, digits or literal offset
	j     int32 // key offset, pending UTF-8 continuation bytes, fraction/exponent/hex digits
	v     int64 // kNumber: integer part; kString: next continuation byte range (lo<<8 | hi)
	nfa   bitset
}

// rootFrame stands for "the whole value is complete".
var rootFrame = &frame{}

// Matcher follows one sequence's output through a Grammar, byte by byte. It is
// not safe for concurrent use: hold one per sequence.
type Matcher struct {
	g       *Grammar
	threads []*frame
	scratch [][]*frame // per trie depth, for Mask
}

// NewMatcher starts matching at the beginning of the grammar's language.
func (g *Grammar) NewMatcher() *Matcher {
	return &Matcher{g: g, threads: open(g.root, rootFrame, 0, nil)}
}

// Accept advances past the bytes of one token. On ErrGrammar the matcher is
// left unchanged.
func (m *Matcher) Accept(piece []byte) error {
	cur := m.threads
	for _, b := range piece {
		next := step(cur, b, nil)
		if len(next) == 0 {
			return ErrGrammar
		}
		cur = next
	}
	m.threads = cur
	return nil
}

// Complete reports whether the output so far is a whole value of the language:
// the end of the sequence is allowed here.
func (m *Matcher) Complete() bool {
	for _, f := range m.threads {
		if accepting(f) {
			return true
		}
	}
	return false
}

// Done reports whether the output is complete and nothing can follow it.
func (m *Matcher) Done() bool {
	for _, f := range m.threads {
		if f != rootFrame {
			return false
		}
	}
	return len(m.threads) > 0
}

// step feeds b to every thread, appending the survivors to out.
func step(threads []*frame, b byte, out []*frame) []*frame {
	for _, f := range threads {
		out = feed(f, b, out)
		if len(out) >= maxThreads {
			break
		}
	}
	return out
}

// accepting reports whether the parse f may end here.
func accepting(f *frame) bool {
	if f == rootFrame {
		return true
	}
	if f.n.kind == kNumber && numberTerminal(f) {
		return accepting(advance(f.up))
	}
	return false
}

// open appends the starting frames of a value of n under up.
func open(n *node, up *frame, depth uint8, out []*frame) []*frame {
	if n.kind == kAlt {
		for _, a := range n.alts {
			out = open(a, up, depth, out)
		}
		return out
	}
	f := &frame{n: n, up: up, depth: depth}
	if n.kind == kString && n.pattern != nil {
		f.nfa = n.pattern.start
	}
	return append(out, f)
}

// with returns a copy of f with a new phase.
func (f *frame) with(phase uint8) *frame {
	c := *f
	c.phase = phase
	return &c
}

// advance returns up after one of its child values completed.
func advance(up *frame) *frame {
	if up == rootFrame {
		return rootFrame
	}
	switch up.n.kind {
	case kObject: // phase 3, in the value of property i
		c := up.with(4)
		c.i++
		return c
	case kMap: // phase 2 (in the key) or 4 (in the value)
		return up.with(up.phase + 1)
	case kArray: // phase 2, in item i
		c := up.with(3)
		c.i++
		return c
	}
	panic("grammar: advance into a scalar frame")
}

// feed appends the successors of f on byte b.
func feed(f *frame, b byte, out []*frame) []*frame {
	if f == rootFrame {
		return out
	}
	n := f.n
	switch n.kind {
	case kAny:
		var c *node
		switch {
		case b == '{' && f.depth < maxAnyDepth:
			c = anyObject
		case b == '[' && f.depth < maxAnyDepth:
			c = anyArray
		case b == '"':
			c = anyString
		case b == '-' || isDigit(b):
			c = anyNumber
		case b == 't':
			c = trueNode
		case b == 'f':
			c = falseNode
		case b == 'n':
			c = nullNode
		default:
			return out
		}
		return feed(&frame{n: c, up: f.up, depth: f.depth}, b, out)
	case kLiteral:
		if n.lit[f.i] != b {
			return out
		}
		if int(f.i)+1 == len(n.lit) {
			return append(out, advance(f.up))
		}
		c := *f
		c.i++
		return append(out, &c)
	case kObject:
		return feedObject(f, b, out)
	case kMap:
		return feedMap(f, b, out)
	case kArray:
		return feedArray(f, b, out)
	case kString:
		return feedString(f, b, out)
	case kNumber:
		return feedNumber(f, b, out)
	}
	return out
}

// optionalFrom reports whether every property from i on may be left out.
func optionalFrom(n *node, i int32) bool {
	for _, p := range n.props[i:] {
		if p.required {
			return false
		}
	}
	return true
}

// Object phases: 0 before '{'; 1 after '{'; 2 in key i (j bytes matched);
// 3 in value i; 4 after a value (i is the next property); 5 after ','.
func feedObject(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	switch f.phase {
	case 0:
		if b == '{' {
			c := f.with(1)
			c.i = 0
			return append(out, c)
		}
	case 1, 5:
		if b == '}' && f.phase == 1 && optionalFrom(n, f.i) {
			return append(out, advance(f.up))
		}
		if b == '"' {
			for q := f.i; int(q) < len(n.props); q++ {
				c := f.with(2)
				c.i, c.j = q, 1
				out = append(out, c)
				if n.props[q].required {
					break
				}
			}
		}
	case 2:
		key := n.props[f.i].key
		if key[f.j] != b {
			return out
		}
		if int(f.j)+1 == len(key) {
			return open(n.props[f.i].value, f.with(3), f.depth, out)
		}
		c := *f
		c.j++
		return append(out, &c)
	case 4:
		if b == ',' && int(f.i) < len(n.props) {
			return append(out, f.with(5))
		}
		if b == '}' && optionalFrom(n, f.i) {
			return append(out, advance(f.up))
		}
	}
	return out
}

// Map phases: 0 before '{'; 1 after '{'; 2 in a key; 3 after the key;
// 4 in a value; 5 after a value; 6 after ','.
func feedMap(f *frame, b byte, out []*frame) []*frame {
	switch f.phase {
	case 0:
		if b == '{' {
			return append(out, f.with(1))
		}
	case 1, 6:
		if b == '}' && f.phase == 1 {
			return append(out, advance(f.up))
		}
		if b == '"' {
			return append(out, &frame{n: anyString, up: f.with(2), phase: 1})
		}
	case 3:
		if b == ':' {
			return open(f.n.items, f.with(4), f.depth+1, out)
		}
	case 5:
		if b == ',' {
			return append(out, f.with(6))
		}
		if b == '}' {
			return append(out, advance(f.up))
		}
	}
	return out
}

// Array phases: 0 before '['; 1 after '['; 2 in item i; 3 after item i-1;
// 4 after ','.
func feedArray(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	switch f.phase {
	case 0:
		if b == '[' {
			c := f.with(1)
			c.i = 0
			return append(out, c)
		}
	case 1, 4:
		if b == ']' && f.phase == 1 && n.min == 0 {
			return append(out, advance(f.up))
		}
		if n.max >= 0 && int(f.i) >= n.max {
			return out
		}
		start := len(out)
		out = open(n.items, f.with(2), f.depth+1, out)
		kids := append([]*frame(nil), out[start:]...)
		out = out[:start]
		for _, k := range kids {
			out = feed(k, b, out)
		}
	case 3:
		if b == ',' && (n.max < 0 || int(f.i) < n.max) {
			return append(out, f.with(4))
		}
		if b == ']' && int(f.i) >= n.min {
			return append(out, advance(f.up))
		}
	}
	return out
}

// String phases: 0 before '"'; 1 inside (j continuation bytes pending);
// 2 after '\'; 3 in a \u escape (j hex digits read).
func feedString(f *frame, b byte, out []*frame) []*frame {
	switch f.phase {
	case 0:
		if b == '"' {
			return append(out, f.with(1))
		}
	case 1:
		return feedStringChar(f, b, out)
	case 2:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			c := f.with(1)
			c.i++
			return append(out, c)
		case 'u':
			c := f.with(3)
			c.j, c.v = 0, 0
			return append(out, c)
		}
	case 3:
		return feedUnicodeEscape(f, b, out)
	}
	return out
}

// feedStringChar feeds a byte inside a string: a continuation byte of a
// UTF-8 sequence, the closing quote, a backslash, or the next character.
func feedStringChar(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	roomy := n.max < 0 || int(f.i) < n.max
	if f.j > 0 {
		lo, hi := byte(f.v>>8), byte(f.v)
		if b < lo || b > hi {
			return out
		}
		c := *f
		c.j--
		c.v = 0x80BF
		return append(out, &c)
	}
	switch {
	case b == '"':
		if int(f.i) >= n.min && (n.pattern == nil || n.pattern.accepts(f.nfa)) {
			return append(out, advance(f.up))
		}
	case b == '\\':
		if n.pattern == nil && roomy {
			return append(out, f.with(2))
		}
	case b < 0x20:
	case b < 0x80:
		if !roomy {
			return out
		}
		if n.pattern == nil && n.max < 0 && int(f.i) >= n.min {
			return append(out, f) // nothing the grammar tracks changes
		}
		c := *f
		c.i++
		if n.pattern != nil {
			c.nfa = n.pattern.step(f.nfa, b)
			if c.nfa == nil || (n.max >= 0 && int(c.i)+n.pattern.minDist(c.nfa) > n.max) {
				return out
			}
		}
		return append(out, &c)
	default:
		if n.pattern != nil || !roomy {
			return out
		}
		pending, next, ok := utf8Lead(b)
		if !ok {
			return out
		}
		c := *f
		c.i++
		c.j, c.v = pending, next
		return append(out, &c)
	}
	return out
}

// utf8Lead reads the first byte of a multi-byte UTF-8 sequence: how many
// continuation bytes follow, and the range of the next one (lo<<8 | hi),
// which excludes overlong forms, surrogates and code points past U+10FFFF.
func utf8Lead(b byte) (pending int32, next int64, ok bool) {
	switch {
	case b >= 0xC2 && b <= 0xDF:
		return 1, 0x80BF, true
	case b == 0xE0:
		return 2, 0xA0BF, true
	case b == 0xED:
		return 2, 0x809F, true
	case b >= 0xE1 && b <= 0xEF:
		return 2, 0x80BF, true
	case b == 0xF0:
		return 3, 0x90BF, true
	case b >= 0xF1 && b <= 0xF3:
		return 3, 0x80BF, true
	case b == 0xF4:
		return 3, 0x808F, true
	}
	return 0, 0, false
}

// feedUnicodeEscape feeds a hex digit of a \u escape.
func feedUnicodeEscape(f *frame, b byte, out []*frame) []*frame {
	if !isHex(b) {
		return out
	}
	c := *f
	// No surrogates (\uD800-\uDFFF): a pair would count as one
	// character where the grammar counts two.
	switch {
	case f.j == 0 && (b == 'd' || b == 'D'):
		c.v = 1
	case f.j == 1 && f.v == 1 && b >= '8':
		return out
	}
	c.j++
	if c.j == 4 {
		c.phase, c.j, c.v = 1, 0, 0
		c.i++
	}
	return append(out, &c)
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

func isHex(b byte) bool {
	return isDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}
