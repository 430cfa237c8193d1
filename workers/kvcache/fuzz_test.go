package kvcache

import (
	"errors"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// FuzzSequenceOps drives three sequences on a five-page pool with an arbitrary
// stream of Reserve, Write, WriteRows, View and Free calls, and checks each
// result against a model: errors are the documented ones, accounting is exact,
// and every value a View returns is one this sequence wrote at that slot.
func FuzzSequenceOps(f *testing.F) {
	f.Add(byte(0), []byte{0, 4, 1, 0, 1, 1, 2, 1, 3, 0})
	f.Add(byte(1), []byte{0, 9, 5, 9, 10, 9, 1, 0, 6, 0, 2, 1, 3, 0, 5, 9, 7, 1})
	f.Add(byte(2), []byte{4, 3, 0, 3, 4, 2, 4, 3, 2, 2, 3, 0, 0, 5, 2, 9})
	f.Fuzz(func(t *testing.T, mode byte, ops []byte) {
		cfg := Config{Layers: 2, KVHeads: 1, HeadDim: 2, PageSize: 2, Pages: 5}
		switch mode % 3 {
		case 1:
			cfg.Poison = true
		case 2:
			cfg.Scrub = ScrubNever
		}
		p := newTestPool(t, cfg)
		type model struct {
			s        *Sequence
			serial   int
			reserved int
			written  [2]int
		}
		var seqs [3]model
		serial := 0
		fresh := func(i int) {
			serial++
			seqs[i] = model{s: p.NewSequence(Owner{Namespace: "ns", Request: string(rune('a' + i))}), serial: serial}
		}
		for i := range seqs {
			fresh(i)
		}
		defer func() {
			for _, m := range seqs {
				m.s.Free()
			}
		}()
		val := func(m *model, l, pos, j int) float32 {
			return float32(m.serial%16*128 + l*64 + pos*2 + j)
		}
		usedPages := func() int {
			n := 0
			for _, m := range seqs {
				n += PagesForTokens(m.reserved, 2)
			}
			return n
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := int(ops[i]), int(ops[i+1])
			m := &seqs[(op/5)%3]
			switch op % 5 {
			case 0: // Reserve
				n := arg % 5
				needPages := PagesForTokens(m.reserved+n, 2) - PagesForTokens(m.reserved, 2)
				err := m.s.Reserve(n)
				if free := cfg.Pages - usedPages(); needPages > free {
					var ae *AllocError
					if !errors.As(err, &ae) || ae.Need != needPages || ae.Free != free {
						t.Fatalf("Reserve(%d) = %v, want AllocError{%d %d}", n, err, needPages, free)
					}
				} else if err != nil {
					t.Fatalf("Reserve(%d) = %v", n, err)
				} else {
					m.reserved += n
				}
			case 1, 4: // Write / WriteRows at the next position, or a wrong one
				l := arg % 2
				pos := m.written[l]
				if arg&4 != 0 {
					pos += 1 + arg>>3%2
				}
				n := 1
				if op%5 == 4 {
					n = arg >> 4 % 4
				}
				k := make([]float32, 2*n)
				v := make([]float32, 2*n)
				for r := range n {
					for j := range 2 {
						k[2*r+j], v[2*r+j] = val(m, l, pos+r, j), -val(m, l, pos+r, j)
					}
				}
				err := m.s.WriteRows(l, pos, k, v, n)
				switch {
				case pos != m.written[l]:
					if !errors.Is(err, ErrOutOfOrder) {
						t.Fatalf("WriteRows at %d, next %d = %v", pos, m.written[l], err)
					}
				case pos+n > m.reserved:
					if !errors.Is(err, ErrNotReserved) {
						t.Fatalf("WriteRows [%d,%d) reserved %d = %v", pos, pos+n, m.reserved, err)
					}
				case err != nil:
					t.Fatalf("WriteRows: %v", err)
				default:
					m.written[l] += n
				}
			case 2: // View and read everything
				l, n := arg%2, arg/2%12
				w, err := m.s.View(l, n)
				switch {
				case n > m.reserved:
					if !errors.Is(err, ErrNotReserved) {
						t.Fatalf("View(%d, %d) reserved %d = %v", l, n, m.reserved, err)
					}
					continue
				case n > m.written[l]:
					if !errors.Is(err, ErrUnwritten) {
						t.Fatalf("View(%d, %d) written %d = %v", l, n, m.written[l], err)
					}
					continue
				case err != nil:
					t.Fatalf("View(%d, %d): %v", l, n, err)
				}
				for pos := range n {
					for j := range 2 {
						if got := gguf.F16ToF32(w.K(pos)[j]); got != val(m, l, pos, j) {
							t.Fatalf("seq %d layer %d pos %d K[%d] = %v, want %v", m.serial, l, pos, j, got, val(m, l, pos, j))
						}
						if got := gguf.F16ToF32(w.V(pos)[j]); got != -val(m, l, pos, j) {
							t.Fatalf("seq %d layer %d pos %d V[%d] = %v", m.serial, l, pos, j, got)
						}
					}
				}
			case 3: // Free and start a new sequence in this slot
				m.s.Free()
				fresh((op / 5) % 3)
			}
			if got, want := p.UsedPages(), usedPages(); got != want {
				t.Fatalf("UsedPages = %d, model says %d", got, want)
			}
			if got, want := m.s.Len(), min(m.written[0], m.written[1]); got != want {
				t.Fatalf("Len = %d, want %d", got, want)
			}
		}
	})
}
