package handoff

import (
	"bytes"
	"errors"
	"testing"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    request
		want request
	}{
		{"pull", request{op: opPull, page: 3, offset: 1 << 20, max: 4096}, request{op: opPull, page: 3, offset: 1 << 20, max: 4096}},
		{"done", request{op: opDone}, request{op: opDone}},
		{"abort quotes its reason", request{op: opAbort, reason: "bad\npage"}, request{op: opAbort, reason: `"bad\npage"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRequest(tc.r.encode())
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("decoded %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeRequestRejects(t *testing.T) {
	pull := request{op: opPull, page: 1, offset: 2, max: 3}.encode()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"short", pull[:requestLen-1]},
		{"version", append([]byte{9}, pull[1:]...)},
		{"unknown op", append([]byte{wireVersion, 7}, pull[2:]...)},
		{"pull of nothing", request{op: opPull, page: 1}.encode()},
		{"pull with trailer", append(append([]byte(nil), pull...), 'x')},
		{"done with trailer", append(request{op: opDone}.encode(), 'x')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeRequest(tc.data); !errors.Is(err, ErrProtocol) {
				t.Fatalf("decodeRequest = %v, want ErrProtocol", err)
			}
		})
	}
}

func TestChunkRoundTrip(t *testing.T) {
	body := []byte("0123456789")
	b := chunk{kind: kindData, pages: 5, page: 2, offset: 100, total: 200, body: body}.append(nil)
	c, err := decodeChunk(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.kind != kindData || c.pages != 5 || c.page != 2 || c.offset != 100 || c.total != 200 || !bytes.Equal(c.body, body) {
		t.Fatalf("decoded %+v", c)
	}
	if c.crc != 0x280c069e { // CRC-32C of "0123456789"
		t.Fatalf("crc %08x", c.crc)
	}
}

func TestDecodeChunkRejects(t *testing.T) {
	good := chunk{kind: kindData, pages: 1, total: 10, body: []byte("abcd")}.append(nil)
	edit := func(i int, v byte) []byte {
		b := append([]byte(nil), good...)
		b[i] = v
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"header only part", good[:headerLen-1]},
		{"version", edit(0, 2)},
		{"unknown kind", edit(1, 9)},
		{"length longer than body", edit(18, 5)},
		{"length shorter than body", edit(18, 3)},
		{"past the page end", chunk{kind: kindData, pages: 1, offset: 8, total: 10, body: []byte("abcd")}.append(nil)},
		{"offset overflow", chunk{kind: kindData, pages: 1, offset: ^uint32(0), total: 10, body: []byte("a")}.append(nil)},
		{"long error", chunk{kind: kindError, pages: 1, body: make([]byte, maxReason+1)}.append(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeChunk(tc.data); !errors.Is(err, ErrProtocol) {
				t.Fatalf("decodeChunk = %v, want ErrProtocol", err)
			}
		})
	}
}

func FuzzDecodeChunk(f *testing.F) {
	f.Add(chunk{kind: kindData, pages: 3, page: 1, total: 8, body: []byte("abcdefgh")}.append(nil))
	f.Add(chunk{kind: kindData, pages: 3, page: 1, offset: 4, total: 8, body: []byte("efgh")}.append(nil))
	f.Add(chunk{kind: kindError, pages: 3, body: []byte("page 9 out of range")}.append(nil))
	f.Add([]byte{wireVersion, kindData})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeChunk(data)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if c.kind == kindData && uint64(c.offset)+uint64(len(c.body)) > uint64(c.total) {
			t.Fatalf("accepted a chunk past its page: %+v", c)
		}
		// Re-encoding what was accepted gives the same header fields back.
		again := c.append(nil)
		if !bytes.Equal(again[:22], data[:22]) || !bytes.Equal(again[headerLen:], data[headerLen:]) {
			t.Fatalf("re-encoded %x, input %x", again, data)
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(request{op: opPull, page: 1, offset: 2, max: 3}.encode())
	f.Add(request{op: opDone}.encode())
	f.Add(request{op: opAbort, reason: "sink: pool exhausted"}.encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRequest(data)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if r.op == opPull && r.max == 0 {
			t.Fatalf("accepted an empty pull: %+v", r)
		}
		// A quoted reason turns each byte into at most 4 (\xNN), plus quotes.
		if len(r.reason) > 4*maxReason+2 {
			t.Fatalf("abort reason of %d bytes", len(r.reason))
		}
	})
}
