package grammar

import (
	"fmt"
	"math/bits"
)

// bitset is a set of small integers; nil is the empty set. Bitsets in frames
// are never modified once built.
type bitset []uint64

func (s bitset) has(i int) bool { return i/64 < len(s) && s[i/64]&(1<<(i%64)) != 0 }

func (s bitset) set(i int) { s[i/64] |= 1 << (i % 64) }

// byteSet is a set of bytes.
type byteSet [4]uint64

func (s *byteSet) add(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s[c/64] |= 1 << (c % 64)
	}
}

func (s *byteSet) has(c byte) bool { return s[c/64]&(1<<(c%64)) != 0 }

// patternBytes is what a pattern-constrained string may contain: printable
// ASCII other than '"' and '\', so that no escape is ever needed.
var patternBytes = func() byteSet {
	var s byteSet
	s.add(0x20, 0x7E)
	s[0] &^= 1 << '"'
	s[1] &^= 1 << ('\\' - 64)
	return s
}()

// regex is a compiled simple regular expression (the subset CompileSchema
// accepts for "pattern") as an NFA over the bytes of the string's content.
type regex struct {
	states  []rstate
	closure []bitset // per state: the char and match states reachable by ε moves, live only
	start   bitset
	match   int
	words   int
	dist    []int // per state: the fewest bytes from it to the match
}

// rstate is an NFA state: a byte class with one successor, an ε split, or the
// match state.
type rstate struct {
	eps  bool
	set  byteSet
	next int
	outs []int
}

// maxRepeat bounds the counts of {m,n}, which compile by copying.
const maxRepeat = 64

// maxRegexStates bounds the NFA of one pattern.
const maxRegexStates = 2048

// rast is a parsed pattern.
type rast struct {
	op       byte // 'c' class, '.' concat, '|' alternation, 'r' repeat
	set      byteSet
	subs     []*rast
	min, max int // 'r': max -1 = unbounded
}

type regexParser struct {
	src string
	pos int
}

// compileRegex compiles a JSON Schema pattern. Patterns are searched, not
// anchored, unless they start with ^ and end with $, as ECMA-262 does.
func compileRegex(src string) (*regex, error) {
	p := &regexParser{src: src}
	anchoredStart := len(src) > 0 && src[0] == '^'
	if anchoredStart {
		p.pos = 1
	}
	ast, err := p.alt()
	if err != nil {
		return nil, err
	}
	anchoredEnd := false
	if p.pos < len(src) && src[p.pos] == '$' && p.pos == len(src)-1 {
		anchoredEnd = true
		p.pos++
	}
	if p.pos != len(src) {
		return nil, fmt.Errorf("unsupported regex syntax %q at offset %d", src[p.pos:p.pos+1], p.pos)
	}
	anyStar := &rast{op: 'r', subs: []*rast{{op: 'c', set: patternBytes}}, max: -1}
	seq := []*rast{ast}
	if !anchoredStart {
		seq = append([]*rast{anyStar}, seq...)
	}
	if !anchoredEnd {
		seq = append(seq, anyStar)
	}
	r := &regex{}
	r.states = append(r.states, rstate{}) // 0: match
	start := r.build(&rast{op: '.', subs: seq}, 0)
	if len(r.states) > maxRegexStates {
		return nil, fmt.Errorf("pattern too large (more than %d states)", maxRegexStates)
	}
	r.finish(start)
	if r.start == nil {
		return nil, fmt.Errorf("pattern matches no string of printable ASCII")
	}
	return r, nil
}

func (p *regexParser) alt() (*rast, error) {
	var subs []*rast
	for {
		c, err := p.concat()
		if err != nil {
			return nil, err
		}
		subs = append(subs, c)
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			continue
		}
		break
	}
	if len(subs) == 1 {
		return subs[0], nil
	}
	return &rast{op: '|', subs: subs}, nil
}

func (p *regexParser) concat() (*rast, error) {
	cat := &rast{op: '.'}
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if c == '|' || c == ')' || (c == '$' && p.pos == len(p.src)-1) {
			break
		}
		a, err := p.atom()
		if err != nil {
			return nil, err
		}
		a, err = p.quantifiers(a)
		if err != nil {
			return nil, err
		}
		cat.subs = append(cat.subs, a)
	}
	return cat, nil
}

func (p *regexParser) quantifiers(a *rast) (*rast, error) {
	for p.pos < len(p.src) {
		min, max := 0, 0
		switch p.src[p.pos] {
		case '*':
			min, max = 0, -1
			p.pos++
		case '+':
			min, max = 1, -1
			p.pos++
		case '?':
			min, max = 0, 1
			p.pos++
		case '{':
			var ok bool
			min, max, ok = p.braces()
			if !ok {
				return nil, fmt.Errorf("unsupported regex syntax: bad repeat at offset %d", p.pos)
			}
		default:
			return a, nil
		}
		if min > maxRepeat || max > maxRepeat {
			return nil, fmt.Errorf("regex repeat count above %d", maxRepeat)
		}
		if p.pos < len(p.src) && p.src[p.pos] == '?' { // lazy: same language
			p.pos++
		}
		a = &rast{op: 'r', subs: []*rast{a}, min: min, max: max}
	}
	return a, nil
}

// braces parses {n}, {n,} or {n,m}.
func (p *regexParser) braces() (int, int, bool) {
	i := p.pos + 1
	num := func() (int, bool) {
		v, start := 0, i
		for i < len(p.src) && isDigit(p.src[i]) && v <= maxRepeat*10 {
			v = v*10 + int(p.src[i]-'0')
			i++
		}
		return v, i > start
	}
	min, ok := num()
	if !ok {
		return 0, 0, false
	}
	max := min
	if i < len(p.src) && p.src[i] == ',' {
		i++
		if m, ok := num(); ok {
			max = m
		} else {
			max = -1
		}
	}
	if i >= len(p.src) || p.src[i] != '}' || (max >= 0 && max < min) {
		return 0, 0, false
	}
	p.pos = i + 1
	return min, max, true
}

func (p *regexParser) atom() (*rast, error) {
	c := p.src[p.pos]
	switch c {
	case '(':
		p.pos++
		if len(p.src)-p.pos >= 2 && p.src[p.pos:p.pos+2] == "?:" {
			p.pos += 2
		} else if p.pos < len(p.src) && p.src[p.pos] == '?' {
			return nil, fmt.Errorf("unsupported regex syntax: group modifier (?%c", p.peek(1))
		}
		a, err := p.alt()
		if err != nil {
			return nil, err
		}
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return nil, fmt.Errorf("unbalanced parenthesis in pattern")
		}
		p.pos++
		return a, nil
	case '[':
		return p.class()
	case '.':
		p.pos++
		return &rast{op: 'c', set: patternBytes}, nil
	case '\\':
		var s byteSet
		if err := p.escape(&s); err != nil {
			return nil, err
		}
		return &rast{op: 'c', set: s}, nil
	case '*', '+', '?', '{', ')', '^', '$':
		return nil, fmt.Errorf("unsupported regex syntax %q at offset %d", c, p.pos)
	}
	if c >= 0x80 {
		return nil, fmt.Errorf("unsupported regex syntax: non-ASCII character at offset %d", p.pos)
	}
	p.pos++
	var s byteSet
	s.add(c, c)
	return &rast{op: 'c', set: s}, nil
}

func (p *regexParser) peek(k int) byte {
	if p.pos+k < len(p.src) {
		return p.src[p.pos+k]
	}
	return ' '
}

// escape reads a backslash escape into s.
func (p *regexParser) escape(s *byteSet) error {
	if p.pos+1 >= len(p.src) {
		return fmt.Errorf("pattern ends in a backslash")
	}
	c := p.src[p.pos+1]
	p.pos += 2
	var neg bool
	var t byteSet
	switch c {
	case 'd', 'D':
		t.add('0', '9')
		neg = c == 'D'
	case 'w', 'W':
		t.add('0', '9')
		t.add('a', 'z')
		t.add('A', 'Z')
		t.add('_', '_')
		neg = c == 'W'
	case 's', 'S':
		t.add(' ', ' ')
		t.add('\t', '\r')
		neg = c == 'S'
	case 'n':
		t.add('\n', '\n')
	case 't':
		t.add('\t', '\t')
	default:
		if c < 0x80 && !isDigit(c) && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') {
			t.add(c, c)
			break
		}
		return fmt.Errorf("unsupported regex syntax \\%c", c)
	}
	if neg {
		for i := range t {
			t[i] = ^t[i]
		}
	}
	for i := range s {
		s[i] |= t[i]
	}
	return nil
}

func (p *regexParser) class() (*rast, error) {
	p.pos++ // '['
	neg := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		neg = true
		p.pos++
	}
	var s byteSet
	first := true
	for {
		if p.pos >= len(p.src) {
			return nil, fmt.Errorf("unterminated character class in pattern")
		}
		c := p.src[p.pos]
		if c == ']' && !first {
			p.pos++
			break
		}
		first = false
		if c == '\\' {
			if err := p.escape(&s); err != nil {
				return nil, err
			}
			continue
		}
		if c >= 0x80 {
			return nil, fmt.Errorf("unsupported regex syntax: non-ASCII character in class")
		}
		if c == '[' && p.peek(1) == ':' {
			return nil, fmt.Errorf("unsupported regex syntax: POSIX class")
		}
		p.pos++
		hi := c
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			hi = p.src[p.pos+1]
			if hi == '\\' || hi >= 0x80 || hi < c {
				return nil, fmt.Errorf("unsupported regex syntax: range %c-%c", c, hi)
			}
			p.pos += 2
		}
		s.add(c, hi)
	}
	if neg {
		for i := range s {
			s[i] = ^s[i]
		}
	}
	return &rast{op: 'c', set: s}, nil
}

// build adds states matching a and then continuing at next; it returns the
// entry state.
func (r *regex) build(a *rast, next int) int {
	add := func(s rstate) int {
		r.states = append(r.states, s)
		return len(r.states) - 1
	}
	if len(r.states) > maxRegexStates {
		return next // compileRegex reports the overflow
	}
	switch a.op {
	case 'c':
		s := a.set
		for i := range s {
			s[i] &= patternBytes[i]
		}
		return add(rstate{set: s, next: next})
	case '.':
		for i := len(a.subs) - 1; i >= 0; i-- {
			next = r.build(a.subs[i], next)
		}
		return next
	case '|':
		outs := make([]int, len(a.subs))
		for i, s := range a.subs {
			outs[i] = r.build(s, next)
		}
		return add(rstate{eps: true, outs: outs})
	case 'r':
		sub := a.subs[0]
		t := next
		if a.max < 0 {
			loop := add(rstate{eps: true})
			body := r.build(sub, loop)
			r.states[loop].outs = []int{body, next}
			t = loop
		} else {
			for k := a.min; k < a.max; k++ {
				t = add(rstate{eps: true, outs: []int{r.build(sub, t), next}})
			}
		}
		for k := 0; k < a.min; k++ {
			t = r.build(sub, t)
		}
		return t
	}
	panic("grammar: unknown regex op")
}

// finish computes closures restricted to live states (those that can still
// reach the match), the start set, and each state's shortest distance to the
// match (a backward breadth-first search over the byte transitions).
func (r *regex) finish(start int) {
	n := len(r.states)
	r.words = (n + 63) / 64
	raw := make([]bitset, n) // ε-closure, char and match states only
	stack := []int{}
	for i := range r.states {
		set := make(bitset, r.words)
		seen := make(bitset, r.words)
		stack = append(stack[:0], i)
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen.has(s) {
				continue
			}
			seen.set(s)
			if r.states[s].eps {
				stack = append(stack, r.states[s].outs...)
			} else {
				set.set(s)
			}
		}
		raw[i] = set
	}
	// rev[t] lists the char states with a byte transition into t.
	rev := make([][]int32, n)
	for i, st := range r.states {
		if st.eps || i == r.match {
			continue
		}
		for w, word := range raw[st.next] {
			for x := word; x != 0; x &= x - 1 {
				t := w*64 + bits.TrailingZeros64(x)
				rev[t] = append(rev[t], int32(i))
			}
		}
	}
	const far = 1 << 30
	r.dist = make([]int, n)
	for i := range r.dist {
		r.dist[i] = far
	}
	r.dist[r.match] = 0
	queue := []int{r.match}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		for _, s := range rev[t] {
			if r.dist[s] == far {
				r.dist[s] = r.dist[t] + 1
				queue = append(queue, int(s))
			}
		}
	}
	r.closure = make([]bitset, n)
	for i, c := range raw {
		empty := true
		for w := range c {
			for x := c[w]; x != 0; x &= x - 1 {
				if s := w*64 + bits.TrailingZeros64(x); r.dist[s] == far {
					c[w] &^= 1 << (s % 64)
				}
			}
			if c[w] != 0 {
				empty = false
			}
		}
		if !empty {
			r.closure[i] = c
		}
	}
	r.start = r.closure[start]
}

// minDist is the fewest bytes that complete a match from any state in cur.
func (r *regex) minDist(cur bitset) int {
	best := 1 << 30
	for w, word := range cur {
		for x := word; x != 0; x &= x - 1 {
			best = min(best, r.dist[w*64+bits.TrailingZeros64(x)])
		}
	}
	return best
}

// step returns the states after byte b, or nil if none is live.
func (r *regex) step(cur bitset, b byte) bitset {
	var out bitset
	for w, word := range cur {
		for x := word; x != 0; x &= x - 1 {
			s := w*64 + bits.TrailingZeros64(x)
			st := &r.states[s]
			if s == r.match || !st.set.has(b) {
				continue
			}
			c := r.closure[st.next]
			if c == nil {
				continue
			}
			if out == nil {
				out = make(bitset, r.words)
			}
			for k := range c {
				out[k] |= c[k]
			}
		}
	}
	return out
}

func (r *regex) accepts(cur bitset) bool { return cur.has(r.match) }
