package handoff

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestPromptHash(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tokens []int32
		want   string
	}{
		{"empty", nil, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"little-endian int32", []int32{1, 2, -1}, "0a1ce634879f6a487527c9a185b1a4a3de7f41238ad4139e3c6d9e0da723628c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PromptHash(tc.tokens); got != tc.want {
				t.Fatalf("PromptHash(%v) = %s, want %s", tc.tokens, got, tc.want)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	fx := newFixture(t, 1, tinyLayout, 10) // pages of 4, 4 and 2 tokens
	for _, tc := range []struct {
		name   string
		edit   func(m *Manifest, want *Expect)
		errSub string // "" means Verify passes
	}{
		{"matching", func(*Manifest, *Expect) {}, ""},
		{"version", func(m *Manifest, _ *Expect) { m.Version = 2 }, "version 2"},
		{"transfer id not a subject token", func(m *Manifest, _ *Expect) { m.TransferID = "a.>" }, "transfer id"},
		{"empty transfer id", func(m *Manifest, _ *Expect) { m.TransferID = "" }, "transfer id"},
		{"request id", func(m *Manifest, _ *Expect) { m.RequestID = "req-2" }, `request id is "req-2", want "req-1"`},
		{"tenant", func(m *Manifest, _ *Expect) { m.Tenant = "tenant-b" }, `tenant is "tenant-b", want "tenant-a"`},
		{"model", func(m *Manifest, _ *Expect) { m.Model = "@cf/other" }, "model is"},
		{"weights digest", func(m *Manifest, _ *Expect) { m.WeightsDigest = "sha256:def" }, "weights digest is"},
		{"same adapter", func(m *Manifest, w *Expect) { m.AdapterKey, w.AdapterKey = "lora:a", "lora:a" }, ""},
		{"KV under another adapter", func(m *Manifest, w *Expect) { m.AdapterKey, w.AdapterKey = "lora:a", "lora:b" }, `adapter "lora:a", want "lora:b"`},
		{"KV under an adapter, decode without", func(m *Manifest, _ *Expect) { m.AdapterKey = "lora:a" }, `adapter "lora:a", want ""`},
		{"KV without adapter, decode with one", func(_ *Manifest, w *Expect) { w.AdapterKey = "lora:b" }, `adapter "", want "lora:b"`},
		{"token count", func(m *Manifest, _ *Expect) { m.PromptTokens = 1 }, "prompt tokens 1, want 10"},
		{"prompt hash", func(_ *Manifest, w *Expect) {
			w.PromptTokens = append([]int32(nil), w.PromptTokens...)
			w.PromptTokens[3]++
		}, "prompt hash"},
		{"placeholder prompt", func(_ *Manifest, w *Expect) { w.PromptTokens = w.PromptTokens[:1] }, "prompt tokens 10, want 1"},
		{"negative first token", func(m *Manifest, _ *Expect) { m.FirstToken = -1 }, "first token -1"},
		{"layout heads", func(m *Manifest, _ *Expect) { m.Layout.KVHeads = 2 }, "layout"},
		{"layout page size", func(m *Manifest, _ *Expect) { m.Layout.PageSize = 8 }, "layout"},
		{"layout dtype", func(m *Manifest, _ *Expect) { m.Layout.DType = "f32" }, "layout"},
		{"KV quantized, decode pool F16", func(m *Manifest, _ *Expect) { m.Layout.DType = DTypeQ8_0 }, "layout"},
		{"expected layout invalid", func(m *Manifest, w *Expect) { m.Layout.Layers, w.Layout.Layers = 0, 0 }, "layout layers 0"},
		{"fewer pages", func(m *Manifest, _ *Expect) { m.Pages = m.Pages[:2] }, "2 pages, want 3"},
		{"more pages", func(m *Manifest, _ *Expect) { m.Pages = append(m.Pages, m.Pages[2]) }, "4 pages, want 3"},
		{"no pages", func(m *Manifest, _ *Expect) { m.Pages = nil }, "0 pages, want 3"},
		{"short full page", func(m *Manifest, _ *Expect) { m.Pages[1].Bytes -= 4 }, "page 1 is"},
		{"last page full", func(m *Manifest, _ *Expect) { m.Pages[2].Bytes = tinyLayout.PageBytes(4) }, "page 2 is"},
		{"page over caller's limit", func(_ *Manifest, w *Expect) { w.MaxPageBytes = 100 }, "limit 100"},
		{"no expected tenant", func(_ *Manifest, w *Expect) { w.Tenant = "" }, "no expected tenant"},
		{"no expected digest", func(_ *Manifest, w *Expect) { w.WeightsDigest = "" }, "no expected weights digest"},
		{"no expected prompt", func(_ *Manifest, w *Expect) { w.PromptTokens = nil }, "no expected prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := fx.manifest(t)
			want := fx.expect()
			tc.edit(m, &want)
			err := m.Verify(want)
			if tc.errSub == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrManifest) {
				t.Fatalf("Verify = %v, want ErrManifest", err)
			}
			if !strings.Contains(err.Error(), tc.errSub) {
				t.Fatalf("Verify = %q, want it to mention %q", err, tc.errSub)
			}
		})
	}
	t.Run("nil manifest", func(t *testing.T) {
		var m *Manifest
		if err := m.Verify(fx.expect()); !errors.Is(err, ErrManifest) {
			t.Fatalf("Verify = %v, want ErrManifest", err)
		}
	})
}

func TestNewManifest(t *testing.T) {
	fx := newFixture(t, 2, tinyLayout, 9)
	t.Run("hashes and sums", func(t *testing.T) {
		m := fx.manifest(t)
		if !validTransferID(m.TransferID) {
			t.Fatalf("drawn transfer id %q", m.TransferID)
		}
		if m.PromptHash != PromptHash(fx.src.Prompt) || m.PromptTokens != 9 || m.FirstToken != 42 {
			t.Fatalf("manifest %+v", m)
		}
		for i, p := range fx.pages {
			if m.Pages[i] != (PageInfo{len(p), PageChecksum(p)}) {
				t.Fatalf("page %d: %+v", i, m.Pages[i])
			}
		}
		if m2 := fx.manifest(t); m2.TransferID == m.TransferID {
			t.Fatal("two manifests drew the same transfer id")
		}
	})
	t.Run("given transfer id", func(t *testing.T) {
		src := fx.src
		src.TransferID = "xfer-1"
		m, err := NewManifest(src, fx.pages)
		if err != nil || m.TransferID != "xfer-1" {
			t.Fatalf("NewManifest = %+v, %v", m, err)
		}
	})
	for _, tc := range []struct {
		name  string
		src   func(Source) Source
		pages func([][]byte) [][]byte
	}{
		{"missing page", nil, func(p [][]byte) [][]byte { return p[:2] }},
		{"extra page", nil, func(p [][]byte) [][]byte { return append(p[:3:3], p[2]) }},
		{"short page", nil, func(p [][]byte) [][]byte { return [][]byte{p[0], p[1][:8], p[2]} }},
		{"placeholder prompt", func(s Source) Source { s.Prompt = s.Prompt[:1]; return s }, nil},
		{"no tenant", func(s Source) Source { s.Tenant = ""; return s }, nil},
		{"bad transfer id", func(s Source) Source { s.TransferID = "a b"; return s }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, pages := fx.src, fx.pages
			if tc.src != nil {
				src = tc.src(src)
			}
			if tc.pages != nil {
				pages = tc.pages(pages)
			}
			if _, err := NewManifest(src, pages); !errors.Is(err, ErrManifest) {
				t.Fatalf("NewManifest = %v, want ErrManifest", err)
			}
		})
	}
}

func TestDecodeManifest(t *testing.T) {
	fx := newFixture(t, 3, tinyLayout, 5)
	m := fx.manifest(t)
	good, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("round trip verifies", func(t *testing.T) {
		got, err := DecodeManifest(good)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Verify(fx.expect()); err != nil {
			t.Fatal(err)
		}
		again, _ := got.Marshal()
		if !bytes.Equal(again, good) {
			t.Fatalf("re-encoded %s, want %s", again, good)
		}
	})
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"unknown field", bytes.Replace(good, []byte(`{"version"`), []byte(`{"extra":1,"version"`), 1)},
		{"trailing object", append(append([]byte(nil), good...), "{}"...)},
		{"trailing brace", append(append([]byte(nil), good...), '}')},
		{"truncated", good[:len(good)/2]},
		{"wrong type", []byte(`{"version":"1"}`)},
		{"too large", append(bytes.Repeat([]byte(" "), MaxManifestBytes), good...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeManifest(tc.data); !errors.Is(err, ErrProtocol) {
				t.Fatalf("DecodeManifest = %v, want ErrProtocol", err)
			}
		})
	}
}

func FuzzDecodeManifest(f *testing.F) {
	fx := newFixture(f, 4, tinyLayout, 6)
	good, _ := fx.manifest(f).Marshal()
	f.Add(good)
	f.Add([]byte(`{"version":1,"pages":[{"bytes":-1,"crc64":0}]}`))
	f.Add([]byte(`{}`))
	want := fx.expect()
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(data)
		if err != nil {
			return
		}
		// Whatever was decoded, checking it must not panic, and a manifest
		// that verifies must describe the fixture's prompt exactly.
		_ = m.check(DefaultMaxPageBytes)
		if m.Verify(want) == nil {
			if m.PromptHash != PromptHash(want.PromptTokens) || len(m.Pages) != len(fx.pages) {
				t.Fatalf("verified a manifest that does not match: %+v", m)
			}
		}
	})
}

// TestLayoutTypes: a page's size follows its element type (34 and 18 bytes
// per 32 values for Q8_0 and Q4_0), and a quantized type on heads that are
// not a multiple of 32 values is refused.
func TestLayoutTypes(t *testing.T) {
	l := Layout{Layers: 2, KVHeads: 2, HeadDim: 64, PageSize: 16, DType: DTypeF16}
	for dt, row := range map[string]int{DTypeF16: 256, DTypeQ8_0: 136, DTypeQ4_0: 72} {
		l.DType = dt
		if err := l.Validate(); err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		if got, want := l.PageBytes(5), 2*(4+2*5*row); got != want {
			t.Errorf("%s: PageBytes(5) = %d, want %d", dt, got, want)
		}
	}
	for _, bad := range []Layout{
		{Layers: 2, KVHeads: 2, HeadDim: 48, PageSize: 16, DType: DTypeQ8_0},
		{Layers: 2, KVHeads: 2, HeadDim: 64, PageSize: 16, DType: "q5_0"},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrManifest) {
			t.Errorf("%+v: %v, want ErrManifest", bad, err)
		}
	}
}
