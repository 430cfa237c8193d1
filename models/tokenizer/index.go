package tokenizer

import (
	"hash/maphash"
	"math/bits"
)

// vocabIndex finds a token's id by its text: open addressing (linear
// probing), the table at most two thirds full, each slot the token's id
// beside the high half of its text's hash, so a probe compares texts only
// where the hashes agree. A Go map[string]int32 of a 128k-token vocabulary
// took about 7 MB; this takes 2 MB (BenchmarkLoad), and 2 MB for qwen2's
// 151,936 tokens (4 MB while the table was at most half full).
type vocabIndex struct {
	seed   maphash.Seed
	slots  []uint64 // hash>>32<<32 | id+1; 0 is an empty slot
	tokens strTable // the texts the ids name
}

// newVocabIndex returns an empty index for the texts of tokens.
func newVocabIndex(tokens strTable) vocabIndex {
	n := max(tokens.len(), 1)
	size := 1 << bits.Len(uint(n+n/2-1)) // a power of two, at least 1.5n
	return vocabIndex{seed: maphash.MakeSeed(), slots: make([]uint64, size), tokens: tokens}
}

// find is the slot of s: the one that holds it, or the empty one where it
// would go.
func (x *vocabIndex) find(s string) (slot uint64, id int32, found bool) {
	h := maphash.String(x.seed, s)
	tag, mask := h&^(1<<32-1), uint64(len(x.slots)-1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := x.slots[i]
		if v == 0 {
			return i, noToken, false
		}
		if v&^(1<<32-1) == tag && x.tokens.at(int32(uint32(v)-1)) == s {
			return i, int32(uint32(v) - 1), true
		}
	}
}

// add indexes id under tokens[id]; if that text is indexed already, it
// leaves it and returns the id it has.
func (x *vocabIndex) add(id int32) (prev int32, dup bool) {
	s := x.tokens.at(id)
	i, prev, dup := x.find(s)
	if !dup {
		x.slots[i] = maphash.String(x.seed, s)&^(1<<32-1) | uint64(id+1)
	}
	return prev, dup
}

// get is the id of the token s, if there is one.
func (x *vocabIndex) get(s string) (int32, bool) {
	if len(x.slots) == 0 {
		return noToken, false
	}
	_, id, ok := x.find(s)
	return id, ok
}
