package grammar

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Vocab is the index of a vocabulary that constrained decoding searches: a
// trie of the bytes each token emits, so that the tokens sharing a prefix are
// checked against the grammar once for that prefix. Build it once per model;
// it is immutable and safe to share.
type Vocab struct {
	size   int
	pieces []string
	eog    []int32

	all     trie // every token that emits bytes
	special trie // the tokens that are not plain string content

	// plain lists the tokens that can sit anywhere inside a JSON string with
	// nothing but their character count changing the state: printable,
	// no '"' or '\', complete UTF-8.
	plain      []int32
	plainRunes []int32
	plainMask  []uint64 // plain as a bitset, for strings without maxLength
}

// trie is a byte trie in first-child/next-sibling form; node 0 is the root.
type trie struct {
	b      []byte
	first  []int32
	next   []int32
	tokLo  []int32 // tokens ending at a node: ids[tokLo:tokHi]
	tokHi  []int32
	ids    []int32
	height int
}

// NewVocab indexes a vocabulary: pieces[id] is what token id emits in the
// output text ("" for tokens that emit nothing, such as control tokens, which
// the grammar never allows), and eog lists the end-of-generation tokens,
// allowed exactly where the output is complete.
func NewVocab(pieces []string, eog []int32) *Vocab {
	v := &Vocab{size: len(pieces), pieces: pieces, eog: slices.Clone(eog)}
	isEOG := make(map[int32]bool, len(eog))
	for _, id := range eog {
		isEOG[id] = true
	}
	var all, special []int32
	for id, p := range pieces {
		if p == "" || isEOG[int32(id)] {
			continue
		}
		all = append(all, int32(id))
		if isPlain(p) {
			v.plain = append(v.plain, int32(id))
			v.plainRunes = append(v.plainRunes, int32(utf8.RuneCountInString(p)))
		} else {
			special = append(special, int32(id))
		}
	}
	v.plainMask = make([]uint64, (len(pieces)+63)/64)
	for _, id := range v.plain {
		v.plainMask[id/64] |= 1 << (id % 64)
	}
	v.all = buildTrie(pieces, all)
	v.special = buildTrie(pieces, special)
	return v
}

// Piece is what token id emits ("" for none).
func (v *Vocab) Piece(id int32) string {
	if id < 0 || int(id) >= len(v.pieces) {
		return ""
	}
	return v.pieces[id]
}

// Size is the vocabulary size the masks cover.
func (v *Vocab) Size() int { return v.size }

func isPlain(p string) bool {
	if !utf8.ValidString(p) {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func buildTrie(pieces []string, ids []int32) trie {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b int32) int {
		if c := strings.Compare(pieces[a], pieces[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	t := trie{b: []byte{0}, first: []int32{-1}, next: []int32{-1}, tokLo: []int32{0}, tokHi: []int32{0}}
	// path[d] is the node at depth d along the previous piece; last[d] the
	// last child added under path[d].
	path := []int32{0}
	last := []int32{-1}
	prev := ""
	for _, id := range ids {
		p := pieces[id]
		common := 0
		for common < len(p) && common < len(prev) && p[common] == prev[common] {
			common++
		}
		path, last = path[:common+1], last[:common+1]
		for d := common; d < len(p); d++ {
			n := int32(len(t.b))
			t.b = append(t.b, p[d])
			t.first = append(t.first, -1)
			t.next = append(t.next, -1)
			t.tokLo = append(t.tokLo, 0)
			t.tokHi = append(t.tokHi, 0)
			parent := path[d]
			if l := last[d]; l >= 0 {
				t.next[l] = n
			} else {
				t.first[parent] = n
			}
			last[d] = n
			path = append(path, n)
			last = append(last, -1)
		}
		end := path[len(p)]
		if t.tokHi[end] == 0 && t.tokLo[end] == 0 {
			t.tokLo[end] = int32(len(t.ids))
			t.tokHi[end] = int32(len(t.ids))
		}
		t.ids = append(t.ids, id) // sorted, so a node's tokens are contiguous
		t.tokHi[end]++
		t.height = max(t.height, len(p))
		prev = p
	}
	return t
}

// Mask sets in allow (a bitset of v.Size() bits, which it clears first) the
// tokens that may come next: those whose bytes keep the output a prefix of
// the language, and the end-of-generation tokens where the output is
// complete. It reports whether any token is allowed.
func (m *Matcher) Mask(v *Vocab, allow []uint64) bool {
	clear(allow)
	set := func(id int32) { allow[id/64] |= 1 << (id % 64) }
	any := false
	if m.Complete() {
		for _, id := range v.eog {
			set(id)
			any = true
		}
	}
	t := &v.all
	if len(m.threads) == 1 {
		if f := m.threads[0]; f != rootFrame && f.n.kind == kString && f.phase == 1 && f.j == 0 && f.n.pattern == nil {
			room := int32(-1)
			if f.n.max >= 0 {
				room = int32(f.n.max) - f.i
			}
			if room < 0 {
				for w, bits := range v.plainMask {
					allow[w] |= bits
				}
				any = any || len(v.plain) > 0
			} else {
				for k, id := range v.plain {
					if v.plainRunes[k] <= room {
						set(id)
						any = true
					}
				}
			}
			t = &v.special
		}
	}
	for len(m.scratch) <= t.height {
		m.scratch = append(m.scratch, nil)
	}
	if m.walk(t, 0, m.threads, allow, 0) {
		any = true
	}
	return any
}

// walk marks the tokens below trie node at whose bytes the threads accept.
func (m *Matcher) walk(t *trie, at int32, threads []*frame, allow []uint64, depth int) bool {
	any := false
	for c := t.first[at]; c >= 0; c = t.next[c] {
		next := step(threads, t.b[c], m.scratch[depth][:0])
		m.scratch[depth] = next[:0]
		if len(next) == 0 {
			continue
		}
		for _, id := range t.ids[t.tokLo[c]:t.tokHi[c]] {
			allow[id/64] |= 1 << (id % 64)
			any = true
		}
		if t.first[c] >= 0 && m.walk(t, c, next, allow, depth+1) {
			any = true
		}
	}
	return any
}
