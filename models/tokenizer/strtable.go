package tokenizer

import (
	"fmt"
	"math"
	"strings"
)

// strTable holds a vocabulary's texts, one per id, in one string with their
// offsets. A 151,936-token vocabulary costs its texts' bytes (about 1 MB)
// plus 0.6 MB of offsets, where a []string costs 2.4 MB of string headers
// beside as many small allocations. The texts never change once built.
type strTable struct {
	data string
	off  []uint32 // text i is data[off[i]:off[i+1]]
}

// newStrTable builds the table of n texts, text(i) for each i, calling text
// once per text. size is the texts' bytes, or a guess: a good one spares the
// copies of a growing buffer.
func newStrTable(n, size int, text func(i int) string) (strTable, error) {
	var b strings.Builder
	b.Grow(size)
	off := make([]uint32, n+1)
	for i := range n {
		b.WriteString(text(i))
		if b.Len() > math.MaxUint32 {
			return strTable{}, fmt.Errorf("%w: over %d bytes of token texts", ErrCorrupt, uint64(math.MaxUint32))
		}
		off[i+1] = uint32(b.Len())
	}
	return strTable{data: b.String(), off: off}, nil
}

// at is text i.
func (s *strTable) at(i int32) string { return s.data[s.off[i]:s.off[i+1]] }

// len is the number of texts.
func (s *strTable) len() int { return max(len(s.off)-1, 0) }
