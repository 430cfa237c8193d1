package kernels

import (
	"sync"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the targets that have
// them (x86-64 and arm64 Linux with 4 KiB base pages).
const hugePage = 2 << 20

// Weight copies of arenaMin bytes or more are placed one after another in
// arena chunks of arenaChunk bytes, so that a model's many matrices, most of
// them not a whole number of huge pages, still share huge pages; a copy of
// over half a chunk gets its own.
const (
	arenaChunk = 32 << 20
	arenaMin   = 64 << 10
)

// arena holds the unused tails of the chunks made so far. A chunk stays
// allocated while any copy in it is reachable.
var arena struct {
	mu    sync.Mutex // guards tails
	tails [][]byte
}

// hugeCopy returns a copy of src in huge pages (hugeMake).
func hugeCopy(src []byte) []byte {
	b := hugeMake(len(src))
	copy(b, src)
	hugeCollapse(b)
	return b
}

// hugeMake returns n zero bytes in the Go heap that, where the system offers
// it, are backed by transparent huge pages (hugeAdvise; a caller that has
// filled them calls hugeCollapse, for pages the runtime had touched before
// the advice): streaming a matrix of weights then takes a TLB entry per
// 2 MiB instead of per 4 KiB. They start on a 64-byte boundary.
func hugeMake(n int) []byte {
	if n < arenaMin {
		return make([]byte, n)
	}
	if n > arenaChunk/2 {
		return hugeAlloc(n)
	}
	arena.mu.Lock()
	defer arena.mu.Unlock()
	// The first tail it fits: a copy that does not fit the newest chunk's
	// tail starts a new chunk, and later, smaller copies fill the old tail,
	// whose last huge page, once touched, is resident whole.
	t := 0
	for t < len(arena.tails) && len(arena.tails[t]) < n {
		t++
	}
	if t == len(arena.tails) {
		arena.tails = append(arena.tails, hugeAlloc(arenaChunk))
	}
	free := arena.tails[t]
	b := free[:n:n]
	if free = free[min(len(free), (n+63)&^63):]; len(free) < arenaMin {
		arena.tails = append(arena.tails[:t], arena.tails[t+1:]...)
	} else {
		arena.tails[t] = free
	}
	return b
}

// hugeAlloc returns n zero bytes starting on a hugePage boundary, advised to
// be backed by huge pages as they are faulted in. A fresh large allocation is
// memory the runtime has usually not touched yet, so the advice applies to it.
func hugeAlloc(n int) []byte {
	b := make([]byte, n+hugePage)
	off := 0
	if r := int(uintptrOf(b) % hugePage); r != 0 {
		off = hugePage - r
	}
	b = b[off : off+n : off+n]
	hugeAdvise(b)
	return b
}

// HugeHalves returns n zero halves laid out as the matrices' copies are (huge
// pages where the system offers them), with every page faulted in now: a KV
// pool. Attention reads a batch's pages at random, more of them than the TLB
// covers in 4 KiB pages; and the pool's memory is taken at start-up, not by
// the first requests that reach its far pages.
func HugeHalves(n int) []uint16 {
	if n <= 0 {
		return nil
	}
	b := hugeMake(2 * n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
	hugeCollapse(b)
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n)
}
