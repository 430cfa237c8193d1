package kvcache

import (
	"fmt"

	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// Sequence is one request's KV: the pages it reserved, in order, and how far it
// has written at each layer. It must be used by one goroutine at a time.
type Sequence struct {
	pool     *Pool
	id       uint64 // unique within the pool, never 0
	owner    Owner
	pages    []int32 // page ids; position pos lives in pages[pos/PageSize]
	reserved int     // tokens reserved; len(pages) == PagesForTokens(reserved)
	written  []int   // per layer: positions [0, written[l]) are written
	// shared[i], when i < len(shared) and it is not nil, is the prefix-cache
	// entry of pages[i]: a read-only page the sequence attached or published.
	shared []*prefixEntry
	freed  bool
}

// NewSequence starts an empty sequence for owner. It holds no pages until
// Reserve; Reserve refuses an owner without a Namespace.
func (p *Pool) NewSequence(owner Owner) *Sequence {
	return &Sequence{
		pool:    p,
		id:      p.nextSeq.Add(1),
		owner:   owner,
		written: make([]int, p.layers),
	}
}

// Owner returns the owner the sequence was created for.
func (s *Sequence) Owner() Owner { return s.owner }

// Len is the number of positions written at every layer.
func (s *Sequence) Len() int {
	if s.freed || len(s.written) == 0 {
		return 0
	}
	n := s.written[0]
	for _, w := range s.written[1:] {
		n = min(n, w)
	}
	return n
}

// Cap is the number of positions reserved.
func (s *Sequence) Cap() int { return s.reserved }

// Written is the number of positions written at layer (0 when out of range).
func (s *Sequence) Written(layer int) int {
	if layer < 0 || layer >= len(s.written) {
		return 0
	}
	return s.written[layer]
}

// Pages returns a copy of the ids of the pages the sequence holds, in position
// order, shared prefix pages included.
func (s *Sequence) Pages() []int {
	out := make([]int, len(s.pages))
	for i, id := range s.pages {
		out[i] = int(id)
	}
	return out
}

// Reserve makes room for n more positions beyond Cap, allocating whole pages.
// It is all or nothing: when the pool has too few free pages it returns an
// *AllocError (errors.Is ErrPoolExhausted) and the sequence is unchanged.
func (s *Sequence) Reserve(n int) error {
	if s.freed {
		return ErrFreed
	}
	if s.owner.Namespace == "" {
		return fmt.Errorf("%w: empty Namespace (request %q)", ErrInvalidOwner, s.owner.Request)
	}
	if n < 0 {
		return fmt.Errorf("%w: reserve %d positions", ErrInvalidArgument, n)
	}
	p := s.pool
	slack := len(s.pages)*p.pageSize - s.reserved
	if n > slack {
		rest := n - slack
		need := rest >> p.pageShift
		if rest&(p.pageSize-1) != 0 {
			need++
		}
		if err := p.alloc(s, need); err != nil {
			return err
		}
	}
	s.reserved += n
	return nil
}

// Write stores one position's K and V rows (KVDim values each, rounded to
// half precision) at layer. pos must be the next unwritten position of that
// layer (ErrOutOfOrder) and below Cap (ErrNotReserved).
func (s *Sequence) Write(layer, pos int, k, v []float32) error {
	return s.WriteRows(layer, pos, k, v, 1)
}

// WriteRows stores n consecutive positions starting at pos0 at layer; k and v
// hold n rows of KVDim values each. Every check is made before anything is
// stored, so a failed call writes nothing.
func (s *Sequence) WriteRows(layer, pos0 int, k, v []float32, n int) error {
	if s.freed {
		return ErrFreed
	}
	p := s.pool
	if layer < 0 || layer >= p.layers {
		return fmt.Errorf("%w: layer %d not in [0, %d)", ErrInvalidArgument, layer, p.layers)
	}
	if n < 0 {
		return fmt.Errorf("%w: write %d rows", ErrInvalidArgument, n)
	}
	if pos0 != s.written[layer] {
		return fmt.Errorf("%w: layer %d position %d, next is %d", ErrOutOfOrder, layer, pos0, s.written[layer])
	}
	if n > s.reserved-pos0 {
		return fmt.Errorf("%w: layer %d positions [%d, %d), reserved %d", ErrNotReserved, layer, pos0, pos0+n, s.reserved)
	}
	if len(k) != n*p.kvDim || len(v) != n*p.kvDim {
		return fmt.Errorf("%w: %d rows need %d K and V values, got %d and %d", ErrInvalidArgument, n, n*p.kvDim, len(k), len(v))
	}
	dk, dv := p.k[layer], p.v[layer]
	mask := p.pageSize - 1
	for r := 0; r < n; {
		pos := pos0 + r
		id := int(s.pages[pos>>p.pageShift])
		slot := pos & mask
		rows := min(p.pageSize-slot, n-r) // rows that land in this page
		if got := p.pageSeq[id].Load(); got != s.id {
			// Append-only writes never reach a full shared page; refuse
			// anyway rather than trust that.
			return fmt.Errorf("%w: write to page %d (index %d) of sequence %d", ErrNotOwner, id, pos>>p.pageShift, got)
		}
		off := (id<<p.pageShift + slot) * p.row
		m := rows * p.kvDim
		p.store(dk[off:off+rows*p.row], k[r*p.kvDim:r*p.kvDim+m])
		p.store(dv[off:off+rows*p.row], v[r*p.kvDim:r*p.kvDim+m])
		p.pageWritten[id*p.layers+layer].Store(uint32(slot + rows))
		r += rows
	}
	s.written[layer] = pos0 + n
	return nil
}

// store writes rows of kvDim values (len(src) a multiple of it) into dst in
// the pool's element type.
func (p *Pool) store(dst []uint16, src []float32) {
	switch p.cfg.DType {
	case DTypeQ8_0:
		for r := 0; r < len(src); r += p.kvDim {
			kernels.QuantizeQ8Halves(dst[r/p.kvDim*p.row:], src[r:r+p.kvDim])
		}
	case DTypeQ4_0:
		for r := 0; r < len(src); r += p.kvDim {
			kernels.QuantizeQ4Halves(dst[r/p.kvDim*p.row:], src[r:r+p.kvDim])
		}
	default:
		p.cfg.Kernels.F32ToF16s(dst, src)
	}
}

// View checks that this sequence owns every page covering positions [0, n) and
// wrote every one of those slots at layer, and returns unchecked accessors for
// them. A page the sequence holds as a shared prefix page counts as its own
// only while the prefix cache holds it, under the entry the sequence took, for
// the sequence's own namespace. It does not allocate. The View is valid until
// the sequence is freed.
func (s *Sequence) View(layer, n int) (View, error) {
	if s.freed {
		return View{}, ErrFreed
	}
	p := s.pool
	if layer < 0 || layer >= p.layers {
		return View{}, fmt.Errorf("%w: layer %d not in [0, %d)", ErrInvalidArgument, layer, p.layers)
	}
	if n < 0 {
		return View{}, fmt.Errorf("%w: view of %d positions", ErrInvalidArgument, n)
	}
	if n > s.reserved {
		return View{}, fmt.Errorf("%w: view of %d positions, reserved %d", ErrNotReserved, n, s.reserved)
	}
	if n > s.written[layer] {
		return View{}, fmt.Errorf("%w: layer %d view of %d positions, written %d", ErrUnwritten, layer, n, s.written[layer])
	}
	np := PagesForTokens(n, p.pageSize)
	if np > len(s.pages) {
		panic(fmt.Sprintf("kvcache: broken invariant: %d positions reserved in %d pages", s.reserved, len(s.pages)))
	}
	for i, id := range s.pages[:np] {
		if got := p.pageSeq[id].Load(); got != s.id && !s.sharedReadable(i, id) {
			return View{}, fmt.Errorf("%w: page %d (index %d) belongs to sequence %d, not %d", ErrNotOwner, id, i, got, s.id)
		}
		want := min(p.pageSize, n-i*p.pageSize)
		if got := int(p.pageWritten[int(id)*p.layers+layer].Load()); got < want {
			return View{}, fmt.Errorf("%w: page %d (index %d) layer %d has %d of %d slots written", ErrUnwritten, id, i, layer, got, want)
		}
	}
	return View{
		k:         p.k[layer],
		v:         p.v[layer],
		pages:     s.pages[:np:np],
		n:         n,
		row:       p.row,
		dtype:     p.cfg.DType,
		pageShift: p.pageShift,
		seq:       s,
	}, nil
}

// Rewind forgets every position from n on, at every layer: speculative
// decoding's rejected draft tokens. The forgotten slots are cleaned as a
// freed page's are (poisoned or zeroed per the pool's config) and count as
// unwritten, so View refuses them until the sequence writes them again, in
// order. The reservation is kept. A shared prefix page is never rewound:
// n below the end of the sequence's last shared page is ErrInvalidArgument,
// as is n beyond what is written (at a layer written less than n nothing
// changes).
func (s *Sequence) Rewind(n int) error {
	if s.freed {
		return ErrFreed
	}
	p := s.pool
	hi := 0
	for _, w := range s.written {
		hi = max(hi, w)
	}
	if n < 0 || n > hi {
		return fmt.Errorf("%w: rewind to %d of %d written positions", ErrInvalidArgument, n, hi)
	}
	for i := len(s.shared) - 1; i >= 0; i-- {
		if s.shared[i] != nil {
			if n < (i+1)*p.pageSize {
				return fmt.Errorf("%w: rewind to %d into shared prefix page %d", ErrInvalidArgument, n, i)
			}
			break
		}
	}
	for l, w := range s.written {
		if w <= n {
			continue
		}
		for pos := n; pos < w; {
			i := pos >> p.pageShift
			id := s.pages[i]
			if got := p.pageSeq[id].Load(); got != s.id {
				panic(fmt.Sprintf("kvcache: broken invariant: sequence %d rewinds page %d (index %d) of sequence %d", s.id, id, i, got))
			}
			slot := pos & (p.pageSize - 1)
			end := min((i+1)<<p.pageShift, w)
			off := (int(id)<<p.pageShift + slot) * p.row
			m := (end - pos) * p.row
			if p.cfg.Poison {
				fill(p.k[l][off:off+m], PoisonF16)
				fill(p.v[l][off:off+m], PoisonF16)
			} else if p.cfg.Scrub != ScrubNever {
				clear(p.k[l][off : off+m])
				clear(p.v[l][off : off+m])
			}
			p.pageWritten[int(id)*p.layers+l].Store(uint32(slot))
			pos = end
		}
		s.written[l] = n
	}
	return nil
}

// Free returns every page of its own to the pool, zeroing or poisoning what
// was written per the pool's config, and clears their owner and written
// counts. Shared prefix pages stay cached: Free drops the sequence's
// reference, and the last one makes the page evictable. It is idempotent;
// afterwards the sequence refuses every call with ErrFreed.
func (s *Sequence) Free() {
	if s.freed {
		return
	}
	s.freed = true
	s.pool.release(s)
	s.pages = nil
	s.shared = nil
	s.reserved = 0
	clear(s.written)
}

// Pool returns the pool the sequence draws its pages from.
func (s *Sequence) Pool() *Pool { return s.pool }
