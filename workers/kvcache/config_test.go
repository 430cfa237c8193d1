package kvcache

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestNewRejectsBadConfig(t *testing.T) {
	good := Config{Layers: 2, KVHeads: 2, HeadDim: 4, Pages: 4}
	cases := []struct {
		name  string
		edit  func(*Config)
		field string // must appear in the message
	}{
		{"zero layers", func(c *Config) { c.Layers = 0 }, "Layers"},
		{"negative kv heads", func(c *Config) { c.KVHeads = -1 }, "KVHeads"},
		{"zero head dim", func(c *Config) { c.HeadDim = 0 }, "HeadDim"},
		{"negative page size", func(c *Config) { c.PageSize = -16 }, "PageSize"},
		{"page size not power of two", func(c *Config) { c.PageSize = 12 }, "PageSize"},
		{"page size too big", func(c *Config) { c.PageSize = MaxPageSize * 2 }, "PageSize"},
		{"negative pages", func(c *Config) { c.Pages = -1 }, "Pages"},
		{"negative memory", func(c *Config) { c.Pages = 0; c.MemoryBytes = -5 }, "MemoryBytes"},
		{"neither pages nor memory", func(c *Config) { c.Pages = 0 }, "exactly one"},
		{"both pages and memory", func(c *Config) { c.MemoryBytes = 1 << 20 }, "exactly one"},
		{"budget below one page", func(c *Config) { c.Pages = 0; c.MemoryBytes = 100 }, "smaller than one page"},
		{"bad scrub mode", func(c *Config) { c.Scrub = ScrubMode(7) }, "Scrub"},
		{"too many pages", func(c *Config) { c.Pages = math.MaxInt32 + 1 }, "Pages"},
		{"page overflows", func(c *Config) { c.Layers = math.MaxInt32; c.KVHeads = math.MaxInt32; c.HeadDim = math.MaxInt32 }, "overflows"},
		{"pool overflows", func(c *Config) { c.HeadDim = 1 << 40; c.Pages = 1 << 20 }, "overflow"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			p, err := New(c)
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("New(%+v) = %v, %v; want ErrConfig", c, p, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %q", err, tc.field)
			}
		})
	}
}

func TestNewSizing(t *testing.T) {
	smol := Config{Layers: 30, KVHeads: 3, HeadDim: 64}
	const smolPage = 4 * 30 * 16 * 3 * 64 // K+V, 2 bytes, layers, slots, kvDim
	cases := []struct {
		name      string
		cfg       Config
		pages     int
		pageSize  int
		perPage   int64
		maxTokens int
	}{
		{"explicit pages default page size", func() Config { c := smol; c.Pages = 3; return c }(), 3, 16, smolPage, 48},
		{"budget rounds down to whole pages", func() Config { c := smol; c.MemoryBytes = smolPage*7 + smolPage/2; return c }(), 7, 16, smolPage, 112},
		{"budget of exactly one page", func() Config { c := smol; c.MemoryBytes = smolPage; return c }(), 1, 16, smolPage, 16},
		{"custom page size", Config{Layers: 1, KVHeads: 1, HeadDim: 2, PageSize: 32, Pages: 2}, 2, 32, 4 * 32 * 2, 64},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, tc.cfg)
			if p.TotalPages() != tc.pages || p.FreePages() != tc.pages || p.UsedPages() != 0 {
				t.Errorf("pages total/free/used = %d/%d/%d, want %d/%d/0", p.TotalPages(), p.FreePages(), p.UsedPages(), tc.pages, tc.pages)
			}
			if p.PageSize() != tc.pageSize {
				t.Errorf("PageSize = %d, want %d", p.PageSize(), tc.pageSize)
			}
			if p.BytesPerPage() != tc.perPage {
				t.Errorf("BytesPerPage = %d, want %d", p.BytesPerPage(), tc.perPage)
			}
			if got, err := tc.cfg.BytesPerPage(); err != nil || got != tc.perPage {
				t.Errorf("Config.BytesPerPage = %d, %v; want %d", got, err, tc.perPage)
			}
			if p.MaxTokens() != tc.maxTokens {
				t.Errorf("MaxTokens = %d, want %d", p.MaxTokens(), tc.maxTokens)
			}
			if c := p.Config(); c.Pages != tc.pages || c.MemoryBytes != 0 || c.PageSize != tc.pageSize {
				t.Errorf("Config() = %+v, want Pages %d, MemoryBytes 0, PageSize %d", c, tc.pages, tc.pageSize)
			}
			if len(p.k[0]) != tc.pages*tc.pageSize*p.KVDim() {
				t.Errorf("layer storage %d halves, want %d", len(p.k[0]), tc.pages*tc.pageSize*p.KVDim())
			}
		})
	}
}

func TestBytesForTokens(t *testing.T) {
	smol := Config{Layers: 30, KVHeads: 3, HeadDim: 64}
	cases := []struct {
		name    string
		cfg     Config
		tokens  int
		want    int64
		wantErr error
	}{
		{"zero tokens", smol, 0, 0, nil},
		{"one token takes a page", smol, 1, 368640, nil},
		{"8192 context", smol, 8192, 512 * 368640, nil},
		{"8193 takes another page", smol, 8193, 513 * 368640, nil},
		{"negative", smol, -1, 0, ErrInvalidArgument},
		{"bad shape", Config{Layers: 1, KVHeads: 0, HeadDim: 1}, 16, 0, ErrConfig},
		{"overflow", Config{Layers: 1 << 20, KVHeads: 1 << 10, HeadDim: 1 << 10}, math.MaxInt, 0, ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.BytesForTokens(tc.tokens)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("BytesForTokens(%d) = %d, %v; want %d, %v", tc.tokens, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestPagesForTokens(t *testing.T) {
	cases := []struct {
		name             string
		tokens, pageSize int
		want             int
	}{
		{"none", 0, 16, 0},
		{"negative", -3, 16, 0},
		{"one", 1, 16, 1},
		{"exact", 32, 16, 2},
		{"one over", 33, 16, 3},
		{"default page size", 17, 0, 2},
		{"page of one", 5, 1, 5},
		{"huge", math.MaxInt, 16, math.MaxInt/16 + 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PagesForTokens(tc.tokens, tc.pageSize); got != tc.want {
				t.Errorf("PagesForTokens(%d, %d) = %d, want %d", tc.tokens, tc.pageSize, got, tc.want)
			}
		})
	}
}

func TestScrubModeString(t *testing.T) {
	cases := []struct {
		m    ScrubMode
		want string
	}{{ScrubOnFree, "ScrubOnFree"}, {ScrubNever, "ScrubNever"}, {ScrubMode(9), "ScrubMode(9)"}}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.m.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}
