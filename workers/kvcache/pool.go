package kvcache

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// Owner identifies who a sequence, and every page it holds, belongs to.
type Owner struct {
	Namespace string // tenant namespace; required
	Request   string // request id within the tenant
}

// Pool is a fixed set of KV pages shared by many sequences. It is safe for
// concurrent use; each Sequence must be used by one goroutine at a time.
type Pool struct {
	cfg        Config // validated: PageSize and Pages set, MemoryBytes 0
	layers     int
	kvDim      int // values per K (or V) row
	row        int // halves per stored row (kvDim for F16)
	pageSize   int
	pageShift  uint // log2(pageSize)
	pageStride int  // halves per page per layer: pageSize*row

	// k and v hold one slice per layer, page-major. A page's contents are
	// touched only by the sequence that owns it, or by the allocator while the
	// page is on its way onto the free list (scrub), never by two at once.
	k, v [][]uint16

	// Per-page state read without the lock on the hot path.
	// pageSeq[p] is the id of the sequence owning page p, cacheSeq while the
	// prefix cache holds it, 0 while free; it is stored only with mu held.
	// pageWritten[p*layers+l] counts the slots of page p the owner has
	// written at layer l; it is stored by the owning sequence, and reset to 0
	// when the page is freed (with mu held) or evicted from the cache (by
	// scrubVictims, when no sequence can reach the page). A cached page is
	// full at every layer and its counts do not change.
	pageSeq     []atomic.Uint64
	pageWritten []atomic.Uint32
	// pageEntry[p] is the prefix-cache entry holding page p (whose pageSeq is
	// then cacheSeq), nil otherwise; stored only with mu held.
	pageEntry []atomic.Pointer[prefixEntry]

	nextSeq atomic.Uint64 // last sequence id handed out; ids start at 1

	// mu guards free (the stack of free page ids), owners (each allocated
	// page's Owner, zero while free) and prefix (the cache's index, LRU list,
	// reference counts and counters), and serializes every change of pageSeq
	// and pageEntry. It is the package's only lock.
	mu     sync.Mutex
	free   []int32
	owners []Owner
	prefix prefixCache
}

// New builds a pool, allocating all of its pages now. Every free page is zero,
// or PoisonF16 when cfg.Poison is set.
func New(cfg Config) (*Pool, error) {
	c := cfg
	if err := c.Validate(); err != nil {
		return nil, err
	}
	kvDim, row := c.KVDim(), c.rowHalves()
	perLayer := c.Pages * c.PageSize * row
	if perLayer/c.Pages/c.PageSize != row {
		return nil, fmt.Errorf("%w: %d pages of %d slots of %d values overflow", ErrConfig, c.Pages, c.PageSize, kvDim)
	}
	p := &Pool{
		cfg:         c,
		layers:      c.Layers,
		kvDim:       kvDim,
		row:         row,
		pageSize:    c.PageSize,
		pageShift:   uint(bits.TrailingZeros(uint(c.PageSize))),
		pageStride:  c.PageSize * row,
		k:           make([][]uint16, c.Layers),
		v:           make([][]uint16, c.Layers),
		pageSeq:     make([]atomic.Uint64, c.Pages),
		pageWritten: make([]atomic.Uint32, c.Pages*c.Layers),
		pageEntry:   make([]atomic.Pointer[prefixEntry], c.Pages),
		free:        make([]int32, c.Pages),
		owners:      make([]Owner, c.Pages),
	}
	p.prefix.init()
	for l := range c.Layers {
		p.k[l] = kernels.HugeHalves(perLayer)
		p.v[l] = kernels.HugeHalves(perLayer)
		if c.Poison {
			fill(p.k[l], PoisonF16)
			fill(p.v[l], PoisonF16)
		}
	}
	// A stack popped from the end: page 0 is handed out first.
	for i := range p.free {
		p.free[i] = int32(c.Pages - 1 - i)
	}
	return p, nil
}

// fill sets every element of s to x, doubling with copy (memmove) rather than
// storing one element at a time.
func fill(s []uint16, x uint16) {
	if len(s) == 0 {
		return
	}
	s[0] = x
	for n := 1; n < len(s); n *= 2 {
		copy(s[n:], s[:n])
	}
}

// Config returns the pool's configuration with defaults applied and Pages
// resolved (MemoryBytes is 0).
func (p *Pool) Config() Config { return p.cfg }

// TotalPages is the number of pages the pool was built with.
func (p *Pool) TotalPages() int { return p.cfg.Pages }

// PageSize is the number of token slots per page.
func (p *Pool) PageSize() int { return p.pageSize }

// KVDim is the number of half values in one K or V row.
func (p *Pool) KVDim() int { return p.kvDim }

// Layers is the number of layers each page covers.
func (p *Pool) Layers() int { return p.layers }

// MaxTokens is the longest sequence the whole pool could hold.
func (p *Pool) MaxTokens() int { return p.cfg.Pages * p.pageSize }

// BytesPerPage is the memory one page takes.
func (p *Pool) BytesPerPage() int64 { return 4 * int64(p.layers) * int64(p.pageStride) }

// FreePages is the number of pages on the free list: held by no sequence and
// not by the prefix cache either.
func (p *Pool) FreePages() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// UsedPages is the number of pages held by sequences or the prefix cache.
func (p *Pool) UsedPages() int { return p.TotalPages() - p.FreePages() }

// PageOwner returns the owner of page id and true while it is allocated, or
// false when it is free or id is out of range.
func (p *Pool) PageOwner(id int) (Owner, bool) {
	if id < 0 || id >= p.cfg.Pages {
		return Owner{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pageSeq[id].Load() == 0 {
		return Owner{}, false
	}
	return p.owners[id], true
}

// PageWritten returns how many slots of page id its owner has written at layer
// (0 for a free page).
func (p *Pool) PageWritten(id, layer int) (int, error) {
	if id < 0 || id >= p.cfg.Pages {
		return 0, fmt.Errorf("%w: page %d not in [0, %d)", ErrInvalidArgument, id, p.cfg.Pages)
	}
	if layer < 0 || layer >= p.layers {
		return 0, fmt.Errorf("%w: layer %d not in [0, %d)", ErrInvalidArgument, layer, p.layers)
	}
	return int(p.pageWritten[id*p.layers+layer].Load()), nil
}

// alloc moves need pages to s, all or nothing, evicting idle cached pages
// when the free list runs short.
func (p *Pool) alloc(s *Sequence, need int) error {
	p.mu.Lock()
	if avail := len(p.free) + p.prefix.lruLen; need > avail {
		p.mu.Unlock()
		return &AllocError{Need: need, Free: avail}
	}
	victims := p.allocLocked(s, need)
	p.mu.Unlock()
	p.scrubVictims(victims)
	return nil
}

// allocLocked moves need pages to s: free pages first, then idle cached
// pages, least recently used first. The caller has checked that there are
// enough, holds p.mu, and must pass the returned (evicted) pages to
// scrubVictims before s can use them. Evicted pages are cleaned outside the
// lock: they belong to s already, and s is inside Reserve.
func (p *Pool) allocLocked(s *Sequence, need int) []int32 {
	fromFree := min(need, len(p.free))
	s.pages = slices.Grow(s.pages, need) // one allocation, whatever the length
	for range fromFree {
		id := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		if prev := p.pageSeq[id].Load(); prev != 0 {
			panic(fmt.Sprintf("kvcache: broken invariant: free page %d is owned by sequence %d", id, prev))
		}
		for l := range p.layers {
			if w := p.pageWritten[int(id)*p.layers+l].Load(); w != 0 {
				panic(fmt.Sprintf("kvcache: broken invariant: free page %d has %d written slots at layer %d", id, w, l))
			}
		}
		p.pageSeq[id].Store(s.id)
		p.owners[id] = s.owner
		s.pages = append(s.pages, id)
	}
	victims := p.evictLocked(need - fromFree)
	for _, id := range victims {
		p.pageSeq[id].Store(s.id)
		p.owners[id] = s.owner
		s.pages = append(s.pages, id)
	}
	return victims
}

// release cleans s's own pages per the pool's mode and returns them to the
// free list; for its shared prefix pages it drops its reference instead.
func (p *Pool) release(s *Sequence) {
	// Clean outside the lock: the pages still belong to s, so nobody else can
	// reach them, and other sequences' reservations are not held up.
	for i, id := range s.pages {
		if s.Shared(i) {
			continue
		}
		if got := p.pageSeq[id].Load(); got != s.id {
			panic(fmt.Sprintf("kvcache: broken invariant: sequence %d frees page %d owned by sequence %d", s.id, id, got))
		}
		p.clean(id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, id := range s.pages {
		if s.Shared(i) {
			continue
		}
		for l := range p.layers {
			p.pageWritten[int(id)*p.layers+l].Store(0)
		}
		p.freeLocked(id)
	}
	// Shared pages are released deepest first, so a chain's root ends up the
	// most recently used and its tail is evicted first.
	for i := len(s.pages) - 1; i >= 0; i-- {
		if !s.Shared(i) {
			continue
		}
		if e := p.pageEntry[s.pages[i]].Load(); e != s.shared[i] {
			panic(fmt.Sprintf("kvcache: broken invariant: sequence %d releases cached page %d it does not hold", s.id, s.pages[i]))
		}
		p.unrefLocked(s.shared[i])
	}
}

// freeLocked returns a clean page with zero written counts to the free list.
// p.mu must be held.
func (p *Pool) freeLocked(id int32) {
	p.owners[id] = Owner{}
	p.pageSeq[id].Store(0)
	p.free = append(p.free, id)
}

// clean poisons or zeroes the written slots of page id at every layer. Slots
// beyond the written count are already clean: pages start clean, writes are
// append-only, and every free or Rewind cleans what was written.
func (p *Pool) clean(id int32) {
	if !p.cfg.Poison && p.cfg.Scrub == ScrubNever {
		return
	}
	off := int(id) * p.pageStride
	for l := range p.layers {
		n := int(p.pageWritten[int(id)*p.layers+l].Load()) * p.row
		k := p.k[l][off : off+n]
		v := p.v[l][off : off+n]
		if p.cfg.Poison {
			fill(k, PoisonF16)
			fill(v, PoisonF16)
		} else {
			clear(k)
			clear(v)
		}
	}
}
