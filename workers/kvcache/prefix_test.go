package kvcache

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

const model = "sha256:weights"

// toks returns n token ids; ids differ from base onward when base >= 0.
func toks(n, diffAt int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(100 + i)
		if diffAt >= 0 && i >= diffAt {
			t[i] += 1000
		}
	}
	return t
}

// flushAtEnd flushes the prefix cache before newTestPool's leak check runs
// (cleanups run last registered first).
func flushAtEnd(t testing.TB, p *Pool) {
	t.Cleanup(func() { p.FlushPrefixes() })
}

// publish writes n positions of tag into a fresh sequence of owner, reserving
// reserve positions, publishes tokens and returns the sequence (still live).
func publish(t testing.TB, p *Pool, owner Owner, tag, n, reserve int, tokens []int32) (*Sequence, int) {
	t.Helper()
	s := p.NewSequence(owner)
	if err := s.Reserve(reserve); err != nil {
		t.Fatal(err)
	}
	writeAll(t, s, tag, 0, n)
	got, err := s.PublishPrefix(model, tokens)
	if err != nil {
		t.Fatalf("PublishPrefix: %v", err)
	}
	return s, got
}

func TestPrefixChain(t *testing.T) {
	base := prefixChain("a", model, toks(12, -1), 4)
	if len(base) != 3 {
		t.Fatalf("%d keys for 3 blocks", len(base))
	}
	cases := []struct {
		name   string
		keys   []prefixKey
		shared int // leading keys equal to base's
	}{
		{"same input", prefixChain("a", model, toks(12, -1), 4), 3},
		{"partial block ignored", prefixChain("a", model, toks(14, -1), 4), 3},
		{"other namespace", prefixChain("b", model, toks(12, -1), 4), 0},
		{"other model", prefixChain("a", "sha256:other", toks(12, -1), 4), 0},
		{"length prefix keeps fields apart", prefixChain("a"+model[:1], model[1:], toks(12, -1), 4), 0},
		{"second block differs", prefixChain("a", model, toks(12, 5), 4), 1},
		{"last token differs", prefixChain("a", model, toks(12, 11), 4), 2},
		{"first token differs", prefixChain("a", model, toks(12, 0), 4), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			for n < min(len(tc.keys), len(base)) && tc.keys[n] == base[n] {
				n++
			}
			if n != tc.shared {
				t.Fatalf("%d leading keys shared, want %d", n, tc.shared)
			}
			for i := n; i < min(len(tc.keys), len(base)); i++ {
				if tc.keys[i] == base[i] {
					t.Fatalf("key %d equal after the chains diverged", i)
				}
			}
		})
	}
}

func TestAttachSameNamespace(t *testing.T) {
	for _, poison := range []bool{false, true} {
		t.Run(map[bool]string{false: "scrub", true: "poison"}[poison], func(t *testing.T) {
			cfg := smallCfg(8)
			cfg.Poison = poison
			p := newTestPool(t, cfg)
			flushAtEnd(t, p)
			alice := Owner{Namespace: "alice", Request: "1"}
			tokens := toks(10, -1) // two full blocks and a partial one
			a, n := publish(t, p, alice, 3, 10, 12, tokens)
			if n != 2 {
				t.Fatalf("published %d pages, want 2", n)
			}
			for i, id := range a.Pages()[:2] {
				if !a.Shared(i) {
					t.Errorf("page index %d not shared after publish", i)
				}
				if o, _ := p.PageOwner(id); o != (Owner{Namespace: "alice", Request: PrefixRequest}) {
					t.Errorf("published page %d owner %+v", id, o)
				}
			}
			if a.Shared(2) {
				t.Error("partial page published")
			}
			checkView(t, a, 3, 10) // the publisher keeps reading them
			aPages := a.Pages()[:2]
			a.Free()
			st := p.PrefixStats()
			if st.Cached != 2 || st.Idle != 2 || st.Published != 2 {
				t.Fatalf("after publish and free: %+v", st)
			}
			for i, id := range aPages { // kept, not scrubbed
				k, _ := rawPage(p, id, 1)
				if gguf.F16ToF32(k[0]) != float32(3*256+128+i*p.PageSize()*8) {
					t.Fatalf("cached page %d was cleaned on the publisher's free", id)
				}
			}

			b := p.NewSequence(Owner{Namespace: "alice", Request: "2"})
			defer b.Free()
			got, err := b.AttachPrefix(model, tokens[:9], 14)
			if err != nil || got != 8 {
				t.Fatalf("AttachPrefix = %d, %v; want 8", got, err)
			}
			if !slices.Equal(b.Pages()[:2], aPages) || b.Cap() != 14 || len(b.Pages()) != 4 || b.Len() != 8 {
				t.Fatalf("pages %v (cached %v), cap %d, len %d", b.Pages(), aPages, b.Cap(), b.Len())
			}
			if st := p.PrefixStats(); st.Hits != 1 || st.HitPages != 2 || st.Misses != 0 || st.Idle != 0 {
				t.Fatalf("after the hit: %+v", st)
			}
			// It reads the cached rows and appends its own after them.
			writeAll(t, b, 3, 8, 6)
			checkView(t, b, 3, 14)
			sum, err := b.PageChecksum(0)
			if err != nil {
				t.Fatalf("PageChecksum of a shared page: %v", err)
			}
			data, err := b.ExportPage(0)
			if err != nil || Checksum(data) != sum {
				t.Fatalf("ExportPage of a shared page: %v", err)
			}
		})
	}
}

func TestAttachNeverCrossesTenants(t *testing.T) {
	p := newTestPool(t, smallCfg(8))
	flushAtEnd(t, p)
	tokens := toks(8, -1)
	a, _ := publish(t, p, Owner{Namespace: "alice", Request: "1"}, 1, 8, 8, tokens)
	aPages := a.Pages()
	a.Free()
	before := p.PrefixStats()

	cases := []struct {
		name   string
		owner  Owner
		model  string
		tokens []int32
	}{
		{"other tenant, same prompt", Owner{Namespace: "bob", Request: "1"}, model, tokens},
		{"tenant named like the cache owner", Owner{Namespace: PrefixRequest, Request: "alice"}, model, tokens},
		{"same tenant, other model", Owner{Namespace: "alice", Request: "2"}, "sha256:other", tokens},
		{"same tenant, first token differs", Owner{Namespace: "alice", Request: "3"}, model, toks(8, 0)},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := p.NewSequence(tc.owner)
			defer s.Free()
			got, err := s.AttachPrefix(tc.model, tc.tokens, 8)
			if err != nil || got != 0 {
				t.Fatalf("AttachPrefix = %d, %v; want a miss", got, err)
			}
			for j, id := range s.Pages() {
				if s.Shared(j) || slices.Contains(aPages, id) {
					t.Fatalf("got page %d (alice's: %v)", id, aPages)
				}
			}
			if _, err := s.View(0, 1); !errors.Is(err, ErrUnwritten) {
				t.Fatalf("View after a miss = %v, want ErrUnwritten", err)
			}
			st := p.PrefixStats()
			if st.Hits != before.Hits || st.Misses != before.Misses+uint64(i)+1 || st.Cached != 2 || st.Idle != 2 {
				t.Fatalf("stats %+v, before %+v", st, before)
			}
		})
	}
	// Alice's entries are untouched: she still hits both pages.
	s := p.NewSequence(Owner{Namespace: "alice", Request: "4"})
	defer s.Free()
	if got, err := s.AttachPrefix(model, tokens, 9); err != nil || got != 8 || !slices.Equal(s.Pages()[:2], aPages) {
		t.Fatalf("alice's own lookup = %d, %v, pages %v", got, err, s.Pages())
	}
	checkView(t, s, 1, 8)
}

func TestViewRefusesForeignSharedPages(t *testing.T) {
	p := newTestPool(t, smallCfg(8))
	flushAtEnd(t, p)
	tokens := toks(4, -1)
	a, _ := publish(t, p, Owner{Namespace: "alice"}, 1, 4, 4, tokens)
	defer a.Free()
	b, _ := publish(t, p, Owner{Namespace: "bob"}, 2, 4, 4, tokens)
	defer b.Free()
	if a.Pages()[0] == b.Pages()[0] {
		t.Fatal("two tenants share a cached page")
	}
	saved, savedEntry := b.pages[0], b.shared[0]
	defer func() { b.pages[0], b.shared[0] = saved, savedEntry }()
	// No API call can put alice's page in bob's table; forge it to prove
	// View checks the pool's entry and its namespace, not the table alone.
	cases := []struct {
		name  string
		page  int32
		entry *prefixEntry
	}{
		{"alice's page and entry", a.pages[0], a.shared[0]},
		{"alice's page, bob's entry", a.pages[0], savedEntry},
		{"bob's page, alice's entry", saved, a.shared[0]},
		{"alice's page, no entry", a.pages[0], nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b.pages[0], b.shared[0] = tc.page, tc.entry
			if _, err := b.View(0, 4); !errors.Is(err, ErrNotOwner) {
				t.Errorf("View = %v, want ErrNotOwner", err)
			}
			if _, err := b.PageChecksum(0); !errors.Is(err, ErrNotOwner) {
				t.Errorf("PageChecksum = %v, want ErrNotOwner", err)
			}
		})
	}
	b.pages[0], b.shared[0] = saved, savedEntry
	checkView(t, b, 2, 4)
}

func TestSharedPagesAreReadOnly(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	flushAtEnd(t, p)
	s, _ := publish(t, p, Owner{Namespace: "alice"}, 1, 4, 8, toks(4, -1))
	defer s.Free()
	// Forge the write cursor back into the shared page: the page check in
	// WriteRows must refuse, not the cursor alone.
	saved := s.written[0]
	s.written[0] = 2
	k, v := rows(5, 0, 2, 1, p.KVDim())
	err := s.WriteRows(0, 2, k, v, 1)
	s.written[0] = saved
	if !errors.Is(err, ErrNotOwner) {
		t.Fatalf("write into a shared page = %v, want ErrNotOwner", err)
	}
	data, _ := s.ExportPage(0)
	if err := s.ImportPage(0, data); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("import into a shared page = %v, want ErrNotOwner", err)
	}
	checkView(t, s, 1, 4)
}

func TestPublishRules(t *testing.T) {
	p := newTestPool(t, smallCfg(8))
	flushAtEnd(t, p)
	alice := Owner{Namespace: "alice"}
	t.Run("unwritten block refused", func(t *testing.T) {
		s := p.NewSequence(alice)
		defer s.Free()
		if err := s.Reserve(8); err != nil {
			t.Fatal(err)
		}
		writeAll(t, s, 1, 0, 7)
		if _, err := s.PublishPrefix(model, toks(8, -1)); !errors.Is(err, ErrUnwritten) {
			t.Fatalf("publish of 8 with 7 written = %v, want ErrUnwritten", err)
		}
		if st := p.PrefixStats(); st.Cached != 0 {
			t.Fatalf("a refused publish cached %d pages", st.Cached)
		}
	})
	t.Run("duplicate block stays private", func(t *testing.T) {
		first, n1 := publish(t, p, alice, 1, 8, 8, toks(8, -1))
		defer first.Free()
		second, n2 := publish(t, p, alice, 1, 8, 8, toks(8, -1))
		if n1 != 2 || n2 != 0 || second.Shared(0) || second.Shared(1) {
			t.Fatalf("published %d then %d; second shared %v %v", n1, n2, second.Shared(0), second.Shared(1))
		}
		pages := second.Pages()
		second.Free() // its own copies are cleaned and freed
		for _, id := range pages {
			if o, ok := p.PageOwner(id); ok {
				t.Fatalf("duplicate page %d still owned by %+v", id, o)
			}
			k, _ := rawPage(p, id, 0)
			allHalves(0)(t, k, k)
		}
	})
	t.Run("attached blocks are skipped, later ones published", func(t *testing.T) {
		s := p.NewSequence(alice)
		defer s.Free()
		got, err := s.AttachPrefix(model, toks(8, -1), 12)
		if err != nil || got != 8 {
			t.Fatalf("AttachPrefix = %d, %v", got, err)
		}
		writeAll(t, s, 1, 8, 4)
		if n, err := s.PublishPrefix(model, toks(12, -1)); err != nil || n != 1 || !s.Shared(2) {
			t.Fatalf("PublishPrefix = %d, %v", n, err)
		}
	})
	t.Run("freed sequence", func(t *testing.T) {
		s := p.NewSequence(alice)
		s.Free()
		if _, err := s.PublishPrefix(model, nil); !errors.Is(err, ErrFreed) {
			t.Fatalf("PublishPrefix after Free = %v", err)
		}
	})
}

func TestAttachPrefixArguments(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	cases := []struct {
		name  string
		setup func(s *Sequence)
		owner Owner
		n     int
		want  error
	}{
		{"no namespace", nil, Owner{Request: "x"}, 8, ErrInvalidOwner},
		{"negative n", nil, tenant, -1, ErrInvalidArgument},
		{"tokens beyond n", nil, tenant, 3, ErrInvalidArgument},
		{"already reserved", func(s *Sequence) { _ = s.Reserve(1) }, tenant, 8, ErrInvalidArgument},
		{"freed", func(s *Sequence) { s.Free() }, tenant, 8, ErrFreed},
		{"more than the pool", nil, tenant, 17, ErrPoolExhausted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := p.NewSequence(tc.owner)
			defer s.Free()
			if tc.setup != nil {
				tc.setup(s)
			}
			cp := s.Cap()
			if _, err := s.AttachPrefix(model, toks(4, -1), tc.n); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if s.Cap() != cp {
				t.Fatalf("a refused attach changed Cap from %d to %d", cp, s.Cap())
			}
		})
	}
	if st := p.PrefixStats(); st != (PrefixStats{}) {
		t.Fatalf("refused attaches counted: %+v", st)
	}
}

func TestEvictionUnderPressure(t *testing.T) {
	cases := []struct {
		name   string
		cfg    func(Config) Config
		scrubs uint16 // what an evicted page holds before its new owner writes
	}{
		{"scrub", func(c Config) Config { return c }, 0},
		{"poison", func(c Config) Config { c.Poison = true; return c }, PoisonF16},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, tc.cfg(smallCfg(6)))
			flushAtEnd(t, p)
			alice := Owner{Namespace: "alice"}
			// Six cached pages: chain X (2 pages) held by a live sequence,
			// chains Y (2) and Z (2) idle, Z released last.
			held, _ := publish(t, p, alice, 1, 8, 8, toks(8, 0))
			defer held.Free()
			y, _ := publish(t, p, alice, 2, 8, 8, toks(8, 1))
			z, _ := publish(t, p, alice, 3, 8, 8, toks(8, 2))
			yPages, zPages, heldPages := y.Pages(), z.Pages(), held.Pages()
			y.Free()
			z.Free()
			if free, st := p.FreePages(), p.PrefixStats(); free != 0 || st.Cached != 6 || st.Idle != 4 {
				t.Fatalf("free %d, stats %+v", free, st)
			}

			// Needing five pages with four evictable fails and changes nothing.
			bob := p.NewSequence(Owner{Namespace: "bob"})
			defer bob.Free()
			var ae *AllocError
			if err := bob.Reserve(20); !errors.As(err, &ae) || ae.Need != 5 || ae.Free != 4 {
				t.Fatalf("Reserve(20) = %v, want an AllocError for 5 of 4", err)
			}
			if st := p.PrefixStats(); st.Cached != 6 || st.Evicted != 0 || len(bob.Pages()) != 0 {
				t.Fatalf("a failed reservation evicted: %+v", st)
			}

			// Three pages: Y goes whole (least recent, deepest page first),
			// then Z's second page; X is referenced and stays.
			if err := bob.Reserve(12); err != nil {
				t.Fatal(err)
			}
			got := bob.Pages()
			want := []int{yPages[1], yPages[0], zPages[1]}
			if !slices.Equal(got, want) {
				t.Fatalf("evicted %v, want %v (Y %v, Z %v, held %v)", got, want, yPages, zPages, heldPages)
			}
			for _, id := range got {
				if o, _ := p.PageOwner(id); o != bob.Owner() {
					t.Fatalf("evicted page %d owner %+v", id, o)
				}
				for l := range p.Layers() {
					if w, _ := p.PageWritten(id, l); w != 0 {
						t.Fatalf("evicted page %d layer %d written %d", id, l, w)
					}
					k, v := rawPage(p, id, l)
					allHalves(tc.scrubs)(t, k, v)
				}
			}
			if _, err := bob.View(0, 1); !errors.Is(err, ErrUnwritten) {
				t.Fatalf("View of an evicted page = %v, want ErrUnwritten", err)
			}
			if st := p.PrefixStats(); st.Cached != 3 || st.Idle != 1 || st.Evicted != 3 {
				t.Fatalf("after eviction: %+v", st)
			}
			// Only referenced pages left besides Z's root: two more cannot come.
			if err := bob.Reserve(8); !errors.Is(err, ErrPoolExhausted) {
				t.Fatalf("Reserve past the referenced pages = %v", err)
			}
			checkView(t, held, 1, 8)
			// Z's root still serves alice, and an attach never evicts its own hits.
			s := p.NewSequence(alice)
			defer s.Free()
			if n, err := s.AttachPrefix(model, toks(8, 2)[:4], 4); err != nil || n != 4 {
				t.Fatalf("AttachPrefix of Z = %d, %v", n, err)
			}
			checkView(t, s, 3, 4)
		})
	}
}

func TestFlushAccounting(t *testing.T) {
	p := newTestPool(t, smallCfg(8))
	alice := Owner{Namespace: "alice"}
	a, _ := publish(t, p, alice, 1, 10, 12, toks(10, -1))
	b := p.NewSequence(alice)
	if n, err := b.AttachPrefix(model, toks(8, -1), 10); err != nil || n != 8 {
		t.Fatalf("AttachPrefix = %d, %v", n, err)
	}
	a.Free()
	if n := p.FlushPrefixes(); n != 0 {
		t.Fatalf("flushed %d pages still held by b", n)
	}
	if st := p.PrefixStats(); st.Cached != 2 {
		t.Fatalf("flush dropped held pages: %+v", st)
	}
	checkView(t, b, 1, 8)
	cached := b.Pages()[:2]
	b.Free()
	if n := p.FlushPrefixes(); n != 2 {
		t.Fatalf("flushed %d, want 2", n)
	}
	if free, total := p.FreePages(), p.TotalPages(); free != total {
		t.Fatalf("%d of %d pages free after everything ended and the cache was flushed", free, total)
	}
	for _, id := range cached {
		k, v := rawPage(p, id, 0)
		allHalves(0)(t, k, v)
	}
	if st := p.PrefixStats(); st.Cached != 0 || st.Idle != 0 || st.Evicted != 2 {
		t.Fatalf("after flush: %+v", st)
	}
}

func TestPoisonedEvictionReadsNaN(t *testing.T) {
	cfg := smallCfg(1)
	cfg.Poison = true
	p := newTestPool(t, cfg)
	a, _ := publish(t, p, Owner{Namespace: "alice"}, 1, 4, 4, toks(4, -1))
	id := a.Pages()[0]
	a.Free()
	p.FlushPrefixes()
	k, _ := rawPage(p, id, 1)
	if x := gguf.F16ToF32(k[0]); !math.IsNaN(float64(x)) {
		t.Fatalf("flushed page reads %v, want NaN", x)
	}
}

// TestAttachChecksEntryNamespace forges the index so bob's key names alice's
// page: the lookup must still refuse it, by the entry's namespace.
func TestAttachChecksEntryNamespace(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	flushAtEnd(t, p)
	tokens := toks(4, -1)
	a, _ := publish(t, p, Owner{Namespace: "alice"}, 1, 4, 4, tokens)
	alices := a.shared[0]
	a.Free()
	bobKey := prefixChain("bob", model, tokens, p.PageSize())[0]
	p.mu.Lock()
	p.prefix.entries[bobKey] = alices
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.prefix.entries, bobKey)
		p.mu.Unlock()
	}()
	b := p.NewSequence(Owner{Namespace: "bob"})
	defer b.Free()
	if n, err := b.AttachPrefix(model, tokens, 4); err != nil || n != 0 || b.Shared(0) {
		t.Fatalf("AttachPrefix through a forged key = %d, %v", n, err)
	}
}
