package kvcache

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math"
)

// PrefixDomain opens every prefix-cache hash chain, so its keys can never
// collide with another use of SHA-256 over the same bytes.
const PrefixDomain = "bulkhead-prefix/v1"

// PrefixRequest is the Request recorded in the Owner of a page the prefix
// cache holds; its Namespace is the tenant that published it.
const PrefixRequest = "prefix-cache"

// cacheSeq is the pageSeq of a page held by the prefix cache. Sequence ids
// count up from 1 and never reach it.
const cacheSeq = math.MaxUint64

// prefixKey identifies one full block of tokens: the SHA-256 chain over the
// namespace, the model and every block up to and including this one. It is
// unexported, and so is every function that takes one: callers reach the
// cache only through a Sequence, whose owner supplies the namespace.
type prefixKey [sha256.Size]byte

// prefixEntry is one cached page. key, page and namespace never change after
// the entry is made; refs, prev and next are guarded by Pool.mu.
type prefixEntry struct {
	key       prefixKey
	page      int32
	namespace string
	refs      int          // sequences holding the page as a shared prefix page
	prev      *prefixEntry // neighbours in the LRU list while refs == 0
	next      *prefixEntry
}

// prefixCache indexes the pool's cached pages. Every field is guarded by
// Pool.mu.
type prefixCache struct {
	entries map[prefixKey]*prefixEntry
	// lru links the unreferenced entries, most recently released first:
	// lru.next is the newest, lru.prev the next to evict. Only entries in
	// this list can be evicted.
	lru    prefixEntry
	lruLen int
	stats  PrefixStats
}

func (c *prefixCache) init() {
	c.entries = make(map[prefixKey]*prefixEntry)
	c.lru.next, c.lru.prev = &c.lru, &c.lru
}

func (c *prefixCache) pushFront(e *prefixEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
	c.lruLen++
}

func (c *prefixCache) unlink(e *prefixEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	c.lruLen--
}

// PrefixStats counts the prefix cache's work since the pool was built.
type PrefixStats struct {
	Hits      uint64 // AttachPrefix calls that attached at least one cached page
	Misses    uint64 // AttachPrefix calls that attached none
	HitPages  uint64 // pages attached by all AttachPrefix calls
	Published uint64 // pages moved into the cache by PublishPrefix
	Evicted   uint64 // cached pages cleaned and returned to the free list
	Cached    int    // pages the cache holds now, referenced or not
	Idle      int    // of those, pages no sequence holds: the evictable ones
}

// PrefixStats returns the prefix cache's counters.
func (p *Pool) PrefixStats() PrefixStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.prefix.stats
	st.Cached = len(p.prefix.entries)
	st.Idle = p.prefix.lruLen
	return st
}

// prefixChain returns the keys of the full blocks of tokens (len(tokens)/
// pageSize of them): k0 = H(PrefixDomain || len(namespace) || namespace ||
// len(model) || model), lengths as little-endian uint64, and for block b,
// kb = H(k(b-1) || the block's token ids as little-endian int32). The
// namespace is in the root, so two tenants' chains share no key.
func prefixChain(namespace, model string, tokens []int32, pageSize int) []prefixKey {
	h := sha256.New()
	h.Write([]byte(PrefixDomain))
	writeLenPrefixed(h, namespace)
	writeLenPrefixed(h, model)
	var k prefixKey
	h.Sum(k[:0])
	keys := make([]prefixKey, len(tokens)/pageSize)
	buf := make([]byte, 4*pageSize)
	for b := range keys {
		for j, t := range tokens[b*pageSize : (b+1)*pageSize] {
			binary.LittleEndian.PutUint32(buf[4*j:], uint32(t))
		}
		h.Reset()
		h.Write(k[:])
		h.Write(buf)
		h.Sum(k[:0])
		keys[b] = k
	}
	return keys
}

func writeLenPrefixed(h hash.Hash, s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// AttachPrefix is Reserve(n) for an empty sequence that may start from cached
// pages. tokens are the ids of the positions the caller would accept from the
// cache (only whole blocks of PageSize count; a partial last block is
// ignored), model identifies the weights that computed the KV (a digest). The
// longest run of leading blocks that the owner's namespace cached for this
// model and these tokens becomes the sequence's first pages, read-only and
// already written at every layer; the rest of the n positions are allocated
// as Reserve would. It returns the number of positions attached (a multiple
// of PageSize): Len and Written(l) start there, and writes continue from it.
//
// The namespace is the sequence owner's, never an argument: a tenant's lookup
// can find only pages its own namespace published. It is all or nothing:
// when the pool cannot supply the pages still needed, even after evicting
// idle cached pages, it returns an *AllocError counting only those pages,
// attaches nothing and leaves the counters alone. The sequence must hold no
// pages yet, and n must cover tokens.
func (s *Sequence) AttachPrefix(model string, tokens []int32, n int) (int, error) {
	if s.freed {
		return 0, ErrFreed
	}
	if s.owner.Namespace == "" {
		return 0, fmt.Errorf("%w: empty Namespace (request %q)", ErrInvalidOwner, s.owner.Request)
	}
	switch {
	case n < 0:
		return 0, fmt.Errorf("%w: reserve %d positions", ErrInvalidArgument, n)
	case len(tokens) > n:
		return 0, fmt.Errorf("%w: %d prefix tokens exceed the %d positions reserved", ErrInvalidArgument, len(tokens), n)
	case len(s.pages) != 0 || s.reserved != 0:
		return 0, fmt.Errorf("%w: attach a prefix to a sequence that already reserved %d positions", ErrInvalidArgument, s.reserved)
	}
	p := s.pool
	keys := prefixChain(s.owner.Namespace, model, tokens, p.pageSize)

	p.mu.Lock()
	hits := make([]*prefixEntry, 0, len(keys))
	idleHits := 0
	for _, k := range keys {
		e := p.prefix.entries[k]
		// The namespace is in the key already; check the entry too, so a
		// broken chain can never hand one tenant another's page.
		if e == nil || e.namespace != s.owner.Namespace {
			break
		}
		hits = append(hits, e)
		if e.refs == 0 {
			idleHits++
		}
	}
	need := PagesForTokens(n, p.pageSize) - len(hits)
	// The hit pages are about to be referenced: they cannot be evicted to
	// make room for the rest.
	if avail := len(p.free) + p.prefix.lruLen - idleHits; need > avail {
		p.mu.Unlock()
		return 0, &AllocError{Need: need, Free: avail}
	}
	for _, e := range hits {
		if e.refs == 0 {
			p.prefix.unlink(e)
		}
		e.refs++
		if got := p.pageSeq[e.page].Load(); got != cacheSeq {
			panic(fmt.Sprintf("kvcache: broken invariant: cached page %d is owned by sequence %d", e.page, got))
		}
		s.pages = append(s.pages, e.page)
		s.shared = append(s.shared, e)
	}
	if len(hits) > 0 {
		p.prefix.stats.Hits++
		p.prefix.stats.HitPages += uint64(len(hits))
	} else {
		p.prefix.stats.Misses++
	}
	victims := p.allocLocked(s, need)
	p.mu.Unlock()
	p.scrubVictims(victims)

	attached := len(hits) * p.pageSize
	s.reserved = n
	for l := range s.written {
		s.written[l] = attached
	}
	return attached, nil
}

// PublishPrefix moves the sequence's leading full pages into the prefix cache
// of its owner's namespace, so later AttachPrefix calls of that namespace, for
// the same model and tokens, can start from them. tokens are the ids of the
// sequence's first positions, which the caller computed with model; only
// whole blocks count, and each must be written at every layer. The sequence
// keeps reading the pages, now read-only; their contents are kept (not
// scrubbed) and their owner becomes {Namespace, PrefixRequest}. A block
// already cached (attached, or published by another sequence since) is left
// as it is. It returns the number of pages newly published.
//
// Publish only what the owner's request asked to share: the pages then serve
// every request of the namespace.
func (s *Sequence) PublishPrefix(model string, tokens []int32) (int, error) {
	if s.freed {
		return 0, ErrFreed
	}
	if s.owner.Namespace == "" {
		return 0, fmt.Errorf("%w: empty Namespace (request %q)", ErrInvalidOwner, s.owner.Request)
	}
	p := s.pool
	nb := len(tokens) / p.pageSize
	if n := nb * p.pageSize; n > s.Len() {
		return 0, fmt.Errorf("%w: publish of %d positions, %d written at every layer", ErrUnwritten, n, s.Len())
	}
	keys := prefixChain(s.owner.Namespace, model, tokens, p.pageSize)
	published := 0
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, k := range keys {
		if i < len(s.shared) && s.shared[i] != nil {
			continue
		}
		if _, dup := p.prefix.entries[k]; dup {
			continue
		}
		id := s.pages[i]
		if got := p.pageSeq[id].Load(); got != s.id {
			return published, fmt.Errorf("%w: page %d (index %d) belongs to sequence %d, not %d", ErrNotOwner, id, i, got, s.id)
		}
		for l := range p.layers {
			if w := int(p.pageWritten[int(id)*p.layers+l].Load()); w != p.pageSize {
				panic(fmt.Sprintf("kvcache: broken invariant: page %d layer %d has %d of %d slots written under a written sequence", id, l, w, p.pageSize))
			}
		}
		e := &prefixEntry{key: k, page: id, namespace: s.owner.Namespace, refs: 1}
		p.prefix.entries[k] = e
		p.owners[id] = Owner{Namespace: s.owner.Namespace, Request: PrefixRequest}
		p.pageEntry[id].Store(e)
		p.pageSeq[id].Store(cacheSeq)
		if len(s.shared) < len(s.pages) {
			s.shared = append(s.shared, make([]*prefixEntry, len(s.pages)-len(s.shared))...)
		}
		s.shared[i] = e
		p.prefix.stats.Published++
		published++
	}
	return published, nil
}

// FlushPrefixes evicts every cached page no sequence holds, cleaning each
// per the pool's scrub policy before it returns to the free list, and returns
// how many it evicted. Pages held by live sequences stay cached.
func (p *Pool) FlushPrefixes() int {
	p.mu.Lock()
	n := p.prefix.lruLen
	victims := p.evictLocked(n)
	p.mu.Unlock()
	p.scrubVictims(victims)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range victims {
		p.freeLocked(id)
	}
	return n
}

// evictLocked removes the n least recently used idle entries from the cache
// and returns their pages, still marked written, with no owner recorded and
// pageSeq 0 (not on the free list: the caller cleans them and then hands
// them to a sequence or to the free list). p.mu must be held.
func (p *Pool) evictLocked(n int) []int32 {
	if n > p.prefix.lruLen {
		panic(fmt.Sprintf("kvcache: broken invariant: evicting %d of %d idle cached pages", n, p.prefix.lruLen))
	}
	victims := make([]int32, 0, n)
	for range n {
		e := p.prefix.lru.prev
		p.prefix.unlink(e)
		delete(p.prefix.entries, e.key)
		p.pageEntry[e.page].Store(nil)
		p.owners[e.page] = Owner{}
		p.pageSeq[e.page].Store(0)
		victims = append(victims, e.page)
	}
	p.prefix.stats.Evicted += uint64(n)
	return victims
}

// scrubVictims cleans evicted pages per the pool's policy and resets their
// written counts. The pages are reachable by no sequence: evictLocked took
// them out of the cache, and their new owner (if any) is still inside
// Reserve.
func (p *Pool) scrubVictims(victims []int32) {
	for _, id := range victims {
		p.clean(id)
		for l := range p.layers {
			p.pageWritten[int(id)*p.layers+l].Store(0)
		}
	}
}

// unrefLocked drops one sequence's reference to a cached page; the last one
// makes the page idle (evictable), most recently used. p.mu must be held.
func (p *Pool) unrefLocked(e *prefixEntry) {
	if e.refs <= 0 {
		panic(fmt.Sprintf("kvcache: broken invariant: cached page %d released with %d references", e.page, e.refs))
	}
	e.refs--
	if e.refs == 0 {
		p.prefix.pushFront(e)
	}
}

// sharedReadable reports whether the sequence's i-th page, id, is a shared
// prefix page it may read: the pool holds it in the prefix cache, under the
// very entry the sequence attached or published, for the sequence's own
// namespace.
func (s *Sequence) sharedReadable(i int, id int32) bool {
	if i >= len(s.shared) || s.shared[i] == nil {
		return false
	}
	p := s.pool
	e := p.pageEntry[id].Load()
	return e != nil && e == s.shared[i] && e.page == id &&
		p.pageSeq[id].Load() == cacheSeq && e.namespace == s.owner.Namespace
}

// Shared reports whether the sequence's i-th page is a read-only page of the
// prefix cache (attached or published) rather than its own.
func (s *Sequence) Shared(i int) bool {
	return i >= 0 && i < len(s.shared) && s.shared[i] != nil
}
