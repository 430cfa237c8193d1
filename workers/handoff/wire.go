package handoff

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// The wire format. Every message starts with wireVersion.
//
// A request, receiver to sender, on Subject(TransferID) with a reply inbox:
//
//	[0] version  [1] op  [2:6] page  [6:10] offset  [10:14] max bytes  [14:] reason (abort only)
//
// An answer, sender to the request's reply inbox:
//
//	[0] version  [1] kind  [2:6] pages the sender holds  [6:10] page  [10:14] offset
//	[14:18] page total bytes  [18:22] body length  [22:26] CRC-32C of body  [26:] body
//
// A data answer's body is bytes [offset, offset+length) of the page; an error
// answer's body is a message. All integers are little-endian uint32.
const (
	wireVersion = 1

	opPull  = 1 // send me a chunk
	opDone  = 2 // every page verified; release them
	opAbort = 3 // giving up; release them

	kindData  = 1
	kindError = 2

	requestLen = 14
	headerLen  = 26

	maxReason = 256 // longest abort reason or error message carried
)

var crc32cTable = crc32.MakeTable(crc32.Castagnoli)

type request struct {
	op     byte
	page   uint32
	offset uint32
	max    uint32
	reason string
}

func (r request) encode() []byte {
	b := make([]byte, requestLen, requestLen+len(r.reason))
	b[0], b[1] = wireVersion, r.op
	binary.LittleEndian.PutUint32(b[2:], r.page)
	binary.LittleEndian.PutUint32(b[6:], r.offset)
	binary.LittleEndian.PutUint32(b[10:], r.max)
	return append(b, r.reason...)
}

func decodeRequest(b []byte) (request, error) {
	if len(b) < requestLen {
		return request{}, fmt.Errorf("%w: request of %d bytes, want at least %d", ErrProtocol, len(b), requestLen)
	}
	if b[0] != wireVersion {
		return request{}, fmt.Errorf("%w: request version %d", ErrProtocol, b[0])
	}
	r := request{
		op:     b[1],
		page:   binary.LittleEndian.Uint32(b[2:]),
		offset: binary.LittleEndian.Uint32(b[6:]),
		max:    binary.LittleEndian.Uint32(b[10:]),
	}
	rest := b[requestLen:]
	switch r.op {
	case opPull:
		if r.max == 0 {
			return request{}, fmt.Errorf("%w: pull of 0 bytes", ErrProtocol)
		}
		if len(rest) != 0 {
			return request{}, fmt.Errorf("%w: pull with %d trailing bytes", ErrProtocol, len(rest))
		}
	case opDone:
		if len(rest) != 0 {
			return request{}, fmt.Errorf("%w: done with %d trailing bytes", ErrProtocol, len(rest))
		}
	case opAbort:
		r.reason = clip(string(rest))
	default:
		return request{}, fmt.Errorf("%w: request op %d", ErrProtocol, r.op)
	}
	return r, nil
}

// chunk is a decoded answer. body aliases the message.
type chunk struct {
	kind   byte
	pages  uint32
	page   uint32
	offset uint32
	total  uint32
	crc    uint32
	body   []byte
}

// append appends the answer's header and body to dst. The CRC is computed
// over body (c.crc is not read).
func (c chunk) append(dst []byte) []byte {
	var h [headerLen]byte
	h[0], h[1] = wireVersion, c.kind
	binary.LittleEndian.PutUint32(h[2:], c.pages)
	binary.LittleEndian.PutUint32(h[6:], c.page)
	binary.LittleEndian.PutUint32(h[10:], c.offset)
	binary.LittleEndian.PutUint32(h[14:], c.total)
	binary.LittleEndian.PutUint32(h[18:], uint32(len(c.body)))
	binary.LittleEndian.PutUint32(h[22:], crc32.Checksum(c.body, crc32cTable))
	dst = append(dst, h[:]...)
	return append(dst, c.body...)
}

// decodeChunk checks an answer's structure: version, kind, a length that
// matches the body, and a data range inside the page. It does not check the
// CRC; the receiver does, to report which page failed.
func decodeChunk(b []byte) (chunk, error) {
	if len(b) < headerLen {
		return chunk{}, fmt.Errorf("%w: answer of %d bytes, want at least %d", ErrProtocol, len(b), headerLen)
	}
	if b[0] != wireVersion {
		return chunk{}, fmt.Errorf("%w: answer version %d", ErrProtocol, b[0])
	}
	c := chunk{
		kind:   b[1],
		pages:  binary.LittleEndian.Uint32(b[2:]),
		page:   binary.LittleEndian.Uint32(b[6:]),
		offset: binary.LittleEndian.Uint32(b[10:]),
		total:  binary.LittleEndian.Uint32(b[14:]),
		crc:    binary.LittleEndian.Uint32(b[22:]),
		body:   b[headerLen:],
	}
	if n := binary.LittleEndian.Uint32(b[18:]); uint64(n) != uint64(len(c.body)) {
		return chunk{}, fmt.Errorf("%w: answer says %d body bytes, carries %d", ErrProtocol, n, len(c.body))
	}
	switch c.kind {
	case kindData:
		if uint64(c.offset)+uint64(len(c.body)) > uint64(c.total) {
			return chunk{}, fmt.Errorf("%w: page %d chunk [%d, +%d) past its end %d",
				ErrProtocol, c.page, c.offset, len(c.body), c.total)
		}
	case kindError:
		if len(c.body) > maxReason {
			return chunk{}, fmt.Errorf("%w: error answer of %d bytes, limit %d", ErrProtocol, len(c.body), maxReason)
		}
	default:
		return chunk{}, fmt.Errorf("%w: answer kind %d", ErrProtocol, c.kind)
	}
	return c, nil
}

// clip bounds a peer-supplied message and quotes it so it cannot forge log
// lines.
func clip(s string) string {
	if len(s) > maxReason {
		s = s[:maxReason]
	}
	return fmt.Sprintf("%q", s)
}
