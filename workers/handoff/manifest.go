package handoff

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc64"
	"io"
)

// ManifestVersion is the manifest format this package writes and accepts.
const ManifestVersion = 1

// MaxManifestBytes bounds an encoded manifest DecodeManifest accepts.
const MaxManifestBytes = 4 << 20

// subjectPrefix starts every transfer's subject.
const subjectPrefix = "bulkhead.handoff."

var crc64Table = crc64.MakeTable(crc64.ECMA)

// PageChecksum is the CRC-64 (ECMA) of a serialized page, the sum a manifest
// records for it.
func PageChecksum(page []byte) uint64 { return crc64.Checksum(page, crc64Table) }

// PromptHash is the hex SHA-256 of the prompt's token ids, each written as a
// little-endian int32.
func PromptHash(tokens []int32) string {
	h := sha256.New()
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// NewTransferID returns a fresh random transfer id (26 base32 characters,
// 130 random bits), unguessable by other clients of the same NATS server.
func NewTransferID() string {
	return rand.Text()
}

// Subject is the NATS subject a transfer's sender listens on.
func Subject(transferID string) string { return subjectPrefix + transferID }

// PageInfo describes one serialized page.
type PageInfo struct {
	Bytes    int    `json:"bytes"`
	Checksum uint64 `json:"crc64"`
}

// Manifest describes a request's KV handoff. The decode side verifies it
// before it allocates anything or pulls a byte.
type Manifest struct {
	Version       int    `json:"version"`
	TransferID    string `json:"transfer_id"`
	RequestID     string `json:"request_id"`
	Tenant        string `json:"tenant"`
	Model         string `json:"model"`
	WeightsDigest string `json:"weights_digest"`
	// AdapterKey is the key of the LoRA adapter the KV was computed under
	// (engine.Adapter.Key); "" for none. KV computed under one adapter is
	// wrong under any other, so it must be the decode side's own.
	AdapterKey   string     `json:"adapter_key,omitempty"`
	PromptTokens int        `json:"prompt_tokens"`
	PromptHash   string     `json:"prompt_hash"` // PromptHash of the prompt
	FirstToken   int32      `json:"first_token"` // sampled by prefill from the last prompt position
	Layout       Layout     `json:"layout"`
	Pages        []PageInfo `json:"pages"`
}

// Source is what the prefill side knows about a finished prefill.
type Source struct {
	TransferID    string // empty: NewManifest draws one with NewTransferID
	RequestID     string
	Tenant        string
	Model         string
	WeightsDigest string
	AdapterKey    string  // the LoRA adapter's key; "" for none
	Prompt        []int32 // every prompt token whose KV the pages hold
	FirstToken    int32
	Layout        Layout
}

// NewManifest describes pages, the serialized KV of src.Prompt, computing the
// prompt hash and every page's checksum. It refuses (ErrManifest) anything
// Verify would refuse: a missing field, an empty prompt, or pages whose count
// or sizes do not match the prompt and layout.
func NewManifest(src Source, pages [][]byte) (*Manifest, error) {
	id := src.TransferID
	if id == "" {
		id = NewTransferID()
	}
	m := &Manifest{
		Version:       ManifestVersion,
		TransferID:    id,
		RequestID:     src.RequestID,
		Tenant:        src.Tenant,
		Model:         src.Model,
		WeightsDigest: src.WeightsDigest,
		AdapterKey:    src.AdapterKey,
		PromptTokens:  len(src.Prompt),
		PromptHash:    PromptHash(src.Prompt),
		FirstToken:    src.FirstToken,
		Layout:        src.Layout,
		Pages:         make([]PageInfo, len(pages)),
	}
	for i, p := range pages {
		m.Pages[i] = PageInfo{Bytes: len(p), Checksum: PageChecksum(p)}
	}
	err := m.Verify(Expect{
		RequestID:     src.RequestID,
		Tenant:        src.Tenant,
		Model:         src.Model,
		WeightsDigest: src.WeightsDigest,
		AdapterKey:    src.AdapterKey,
		PromptTokens:  src.Prompt,
		Layout:        src.Layout,
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Expect is what the decode side knows without trusting the sender: the
// request from its job, the tenant from the verified token, the model and
// weights it has loaded, the prompt as it tokenized it, and its pool's layout.
type Expect struct {
	RequestID     string
	Tenant        string
	Model         string
	WeightsDigest string
	// AdapterKey is the key of the LoRA adapter the decode side runs the
	// job with; "" for none (and then the manifest must name none).
	AdapterKey   string
	PromptTokens []int32
	Layout       Layout
	MaxPageBytes int // largest page the caller accepts; 0 means no limit beyond Layout
}

// Verify checks the manifest against want, field by field, and its pages
// against the prompt and layout: exactly ceil(PromptTokens/PageSize) pages,
// every one full but the last, which holds the remainder. It names the first
// mismatch and wraps ErrManifest. An empty field of want is itself an error,
// so a caller cannot skip a check by leaving it out. Page checksums are
// checked by Fetch as the bytes arrive.
func (m *Manifest) Verify(want Expect) error {
	if m == nil {
		return fmt.Errorf("%w: no manifest", ErrManifest)
	}
	if m.Version != ManifestVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrManifest, m.Version, ManifestVersion)
	}
	if !validTransferID(m.TransferID) {
		return fmt.Errorf("%w: transfer id %q is not 1-64 letters, digits, '-' or '_'", ErrManifest, m.TransferID)
	}
	for _, f := range []struct{ name, got, want string }{
		{"request id", m.RequestID, want.RequestID},
		{"tenant", m.Tenant, want.Tenant},
		{"model", m.Model, want.Model},
		{"weights digest", m.WeightsDigest, want.WeightsDigest},
	} {
		if f.want == "" {
			return fmt.Errorf("%w: transfer %s: no expected %s to check against", ErrManifest, m.TransferID, f.name)
		}
		if f.got != f.want {
			return fmt.Errorf("%w: transfer %s: %s is %q, want %q", ErrManifest, m.TransferID, f.name, f.got, f.want)
		}
	}
	if m.AdapterKey != want.AdapterKey {
		return fmt.Errorf("%w: transfer %s: KV computed under adapter %q, want %q", ErrManifest, m.TransferID, m.AdapterKey, want.AdapterKey)
	}
	if len(want.PromptTokens) == 0 {
		return fmt.Errorf("%w: transfer %s: no expected prompt to check against", ErrManifest, m.TransferID)
	}
	if m.PromptTokens != len(want.PromptTokens) {
		return fmt.Errorf("%w: transfer %s: prompt tokens %d, want %d", ErrManifest, m.TransferID, m.PromptTokens, len(want.PromptTokens))
	}
	if h := PromptHash(want.PromptTokens); m.PromptHash != h {
		return fmt.Errorf("%w: transfer %s: prompt hash %q, want %q", ErrManifest, m.TransferID, m.PromptHash, h)
	}
	if m.FirstToken < 0 {
		return fmt.Errorf("%w: transfer %s: first token %d", ErrManifest, m.TransferID, m.FirstToken)
	}
	if err := want.Layout.Validate(); err != nil {
		return fmt.Errorf("transfer %s: expected %w", m.TransferID, err)
	}
	if m.Layout != want.Layout {
		return fmt.Errorf("%w: transfer %s: layout %+v, want %+v", ErrManifest, m.TransferID, m.Layout, want.Layout)
	}
	l := m.Layout
	if full := l.PageBytes(l.PageSize); want.MaxPageBytes > 0 && full > want.MaxPageBytes {
		return fmt.Errorf("%w: transfer %s: a full page is %d bytes, limit %d", ErrManifest, m.TransferID, full, want.MaxPageBytes)
	}
	if n := l.pageCount(m.PromptTokens); len(m.Pages) != n {
		return fmt.Errorf("%w: transfer %s: %d pages, want %d for %d tokens of %d per page",
			ErrManifest, m.TransferID, len(m.Pages), n, m.PromptTokens, l.PageSize)
	}
	for i, p := range m.Pages {
		w := l.writtenIn(i, m.PromptTokens)
		if size := l.PageBytes(w); p.Bytes != size {
			return fmt.Errorf("%w: transfer %s: page %d is %d bytes, want %d for %d tokens",
				ErrManifest, m.TransferID, i, p.Bytes, size, w)
		}
	}
	return nil
}

// check is the structural part of Verify that needs no expectation: what
// NewSender and Fetch need to size their buffers and subjects safely.
func (m *Manifest) check(maxPage int) error {
	if m == nil {
		return fmt.Errorf("%w: no manifest", ErrManifest)
	}
	if !validTransferID(m.TransferID) {
		return fmt.Errorf("%w: transfer id %q is not 1-64 letters, digits, '-' or '_'", ErrManifest, m.TransferID)
	}
	if len(m.Pages) == 0 {
		return fmt.Errorf("%w: transfer %s: no pages", ErrManifest, m.TransferID)
	}
	for i, p := range m.Pages {
		if p.Bytes < 1 || p.Bytes > maxPage {
			return fmt.Errorf("%w: transfer %s: page %d is %d bytes, limit %d", ErrManifest, m.TransferID, i, p.Bytes, maxPage)
		}
	}
	return nil
}

// Marshal encodes the manifest as JSON, the form DecodeManifest reads.
func (m *Manifest) Marshal() ([]byte, error) { return json.Marshal(m) }

// DecodeManifest parses an encoded manifest strictly: no unknown fields, no
// trailing data, at most MaxManifestBytes. It does not verify the contents;
// call Verify.
func DecodeManifest(data []byte) (*Manifest, error) {
	if len(data) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: manifest of %d bytes, limit %d", ErrProtocol, len(data), MaxManifestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrProtocol, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: manifest: trailing data", ErrProtocol)
	}
	return &m, nil
}

// validTransferID accepts ids that are one NATS subject token.
func validTransferID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}
