package kvcache

import (
	"encoding/binary"
	"fmt"
	"hash/crc64"
)

// Layout is the shape of a pool's pages: what a peer must agree on before it
// can accept pages exported from this pool.
type Layout struct {
	Layers   int
	KVHeads  int
	HeadDim  int
	PageSize int    // token slots per page
	DType    string // element type of K and V: a DType
}

// Layout returns the shape of the pool's pages.
func (p *Pool) Layout() Layout {
	return Layout{
		Layers:   p.cfg.Layers,
		KVHeads:  p.cfg.KVHeads,
		HeadDim:  p.cfg.HeadDim,
		PageSize: p.pageSize,
		DType:    string(p.cfg.DType),
	}
}

// PageBytes is the length of an exported page with written slots filled at
// every layer: per layer a 4-byte count, then written K rows and written V
// rows of DType.RowHalves(KVHeads*HeadDim) two-byte halves each, each half
// little-endian (a quantized row's halves are its blocks' bytes in pairs).
// It does not check written against PageSize.
func (l Layout) PageBytes(written int) int {
	return l.Layers * (4 + 2*2*written*DType(l.DType).RowHalves(l.KVHeads*l.HeadDim))
}

var crcTable = crc64.MakeTable(crc64.ECMA)

// Checksum is the CRC-64 (ECMA) of b. PageChecksum(i) equals
// Checksum(ExportPage(i)) for every page, so a receiver can check a page's
// bytes without a pool.
func Checksum(b []byte) uint64 { return crc64.Checksum(b, crcTable) }

// ExportPage serializes the sequence's i-th page (in position order): for
// each layer in order, the slots written at that layer as a little-endian
// uint32, then the written K halves, then the written V halves, each half
// little-endian. The result is a fresh slice of Layout().PageBytes(n) bytes
// when every layer has n slots written.
func (s *Sequence) ExportPage(i int) ([]byte, error) {
	id, err := s.ownedPage(i)
	if err != nil {
		return nil, err
	}
	p := s.pool
	size := 0
	for l := range p.layers {
		size += 4 + 4*int(p.pageWritten[id*p.layers+l].Load())*p.row
	}
	out := make([]byte, 0, size)
	p.encodePage(id, func(b []byte) { out = append(out, b...) })
	return out, nil
}

// PageChecksum returns the CRC-64 (ECMA) of the sequence's i-th page as
// ExportPage would serialize it, without building the bytes. Two pages with
// the same written contents have the same sum whatever their page ids.
func (s *Sequence) PageChecksum(i int) (uint64, error) {
	id, err := s.ownedPage(i)
	if err != nil {
		return 0, err
	}
	var crc uint64
	s.pool.encodePage(id, func(b []byte) { crc = crc64.Update(crc, crcTable, b) })
	return crc, nil
}

// ownedPage returns the id of the sequence's i-th page after checking that
// the sequence may read it: it owns the page, or holds it as a shared prefix
// page of its namespace.
func (s *Sequence) ownedPage(i int) (int, error) {
	if s.freed {
		return 0, ErrFreed
	}
	if i < 0 || i >= len(s.pages) {
		return 0, fmt.Errorf("%w: page index %d not in [0, %d)", ErrInvalidArgument, i, len(s.pages))
	}
	id := int(s.pages[i])
	if got := s.pool.pageSeq[id].Load(); got != s.id && !s.sharedReadable(i, int32(id)) {
		return 0, fmt.Errorf("%w: page %d (index %d) belongs to sequence %d, not %d", ErrNotOwner, id, i, got, s.id)
	}
	return id, nil
}

// encodePage is the one definition of the page format. It hands the
// serialized page to emit in pieces, in order; a piece is valid only during
// the call.
func (p *Pool) encodePage(id int, emit func([]byte)) {
	var buf [512]byte
	off := id * p.pageStride
	for l := range p.layers {
		w := p.pageWritten[id*p.layers+l].Load()
		binary.LittleEndian.PutUint32(buf[:4], w)
		emit(buf[:4])
		m := int(w) * p.row
		emitHalves(buf[:], p.k[l][off:off+m], emit)
		emitHalves(buf[:], p.v[l][off:off+m], emit)
	}
}

func emitHalves(buf []byte, h []uint16, emit func([]byte)) {
	for len(h) > 0 {
		n := min(len(h), len(buf)/2)
		for j, x := range h[:n] {
			binary.LittleEndian.PutUint16(buf[2*j:], x)
		}
		emit(buf[:2*n])
		h = h[n:]
	}
}

// ImportPage fills the sequence's i-th page from data in ExportPage's format,
// as if this sequence had written those slots itself: afterwards View reads
// them and Len counts them. Pages import in order into a sequence that has
// written nothing else: every layer must have exactly i*PageSize positions
// written (pages before i full, page i empty), otherwise ErrOutOfOrder.
//
// data is checked strictly against the pool's layout before anything is
// stored: the written count must be the same at every layer, in [1,
// PageSize], within the sequence's reservation, and the length must be exactly
// Layout().PageBytes(count). A violation is an error wrapping ErrBadPage and
// writes nothing. A partial page can only be the last one imported, because
// importing page i+1 requires page i to be full.
func (s *Sequence) ImportPage(i int, data []byte) error {
	if s.freed {
		return ErrFreed
	}
	p := s.pool
	if i < 0 {
		return fmt.Errorf("%w: page index %d", ErrInvalidArgument, i)
	}
	if i >= len(s.pages) {
		return fmt.Errorf("%w: page index %d, %d pages reserved", ErrNotReserved, i, len(s.pages))
	}
	id, err := s.ownedPage(i)
	if err != nil {
		return err
	}
	if got := p.pageSeq[id].Load(); got != s.id {
		return fmt.Errorf("%w: import into page %d (index %d) of sequence %d", ErrNotOwner, id, i, got)
	}
	pos0 := i * p.pageSize
	for l, w := range s.written {
		if w != pos0 {
			return fmt.Errorf("%w: import of page %d needs %d positions written at layer %d, have %d", ErrOutOfOrder, i, pos0, l, w)
		}
		if got := p.pageWritten[id*p.layers+l].Load(); got != 0 {
			panic(fmt.Sprintf("kvcache: broken invariant: page %d layer %d has %d slots written beyond the sequence's %d", id, l, got, w))
		}
	}

	n, err := p.checkPage(data)
	if err != nil {
		return fmt.Errorf("page index %d: %w", i, err)
	}
	if n > s.reserved-pos0 {
		return fmt.Errorf("%w: page index %d: %d slots from position %d exceed the %d reserved", ErrBadPage, i, n, pos0, s.reserved)
	}

	// Valid: store it. The page belongs to s, so nobody else reads these slots.
	off := id * p.pageStride
	m := n * p.row
	rest := data
	for l := range p.layers {
		rest = rest[4:]
		decodeHalves(p.k[l][off:off+m], rest)
		rest = rest[2*m:]
		decodeHalves(p.v[l][off:off+m], rest)
		rest = rest[2*m:]
		p.pageWritten[id*p.layers+l].Store(uint32(n))
		s.written[l] = pos0 + n
	}
	return nil
}

// ImportVerified is ImportPage after checking that Checksum(data) == sum, the
// sum the sender announced for this page. A mismatch is an error wrapping both
// ErrChecksum and ErrBadPage and writes nothing.
func (s *Sequence) ImportVerified(i int, data []byte, sum uint64) error {
	if got := Checksum(data); got != sum {
		return fmt.Errorf("%w: %w: page index %d: CRC-64 %#016x, want %#016x", ErrBadPage, ErrChecksum, i, got, sum)
	}
	return s.ImportPage(i, data)
}

// checkPage validates an exported page against the pool's layout and returns
// its written count. It reads data only.
func (p *Pool) checkPage(data []byte) (int, error) {
	if len(data) < 4 {
		return 0, fmt.Errorf("%w: %d bytes, shorter than a count", ErrBadPage, len(data))
	}
	c := binary.LittleEndian.Uint32(data)
	if c == 0 || c > uint32(p.pageSize) {
		return 0, fmt.Errorf("%w: written count %d not in [1, %d]", ErrBadPage, c, p.pageSize)
	}
	n := int(c)
	if want := p.Layout().PageBytes(n); len(data) != want {
		return 0, fmt.Errorf("%w: %d bytes, want %d for %d slots x %d layers", ErrBadPage, len(data), want, n, p.layers)
	}
	per := 4 + 4*n*p.row
	for l := 1; l < p.layers; l++ {
		if got := binary.LittleEndian.Uint32(data[l*per:]); got != c {
			return 0, fmt.Errorf("%w: layer %d has %d slots written, layer 0 has %d", ErrBadPage, l, got, c)
		}
	}
	return n, nil
}

func decodeHalves(dst []uint16, src []byte) {
	for j := range dst {
		dst[j] = binary.LittleEndian.Uint16(src[2*j:])
	}
}
