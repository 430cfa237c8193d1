package catalog

import (
	"errors"
	"math"
	"sync"
	"testing"
)

func TestPricesNeurons(t *testing.T) {
	tests := []struct {
		name               string
		prices             Prices
		prompt, completion int
		want               float64
	}{
		{"defaults, one million each", DefaultPrices(), 1_000_000, 1_000_000, 2457 + 18252},
		{"defaults, small request", DefaultPrices(), 100, 50, (100*2457 + 50*18252) / 1e6},
		{"prompt only", Prices{NeuronsPerMPromptTokens: 1000, NeuronsPerMCompletionTokens: 9}, 2000, 0, 2},
		{"completion only", Prices{NeuronsPerMPromptTokens: 9, NeuronsPerMCompletionTokens: 1000}, 0, 3000, 3},
		{"free model", Prices{}, 123456, 654321, 0},
		{"no tokens", DefaultPrices(), 0, 0, 0},
		{"negative counts never credit", DefaultPrices(), -1000, -5, 0},
		{"negative prompt, positive completion", Prices{NeuronsPerMPromptTokens: 1e6, NeuronsPerMCompletionTokens: 1e6}, -7, 3, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.prices.Neurons(tc.prompt, tc.completion)
			if math.Abs(got-tc.want) > 1e-9*math.Max(1, tc.want) {
				t.Errorf("Neurons(%d, %d) = %v, want %v", tc.prompt, tc.completion, got, tc.want)
			}
		})
	}
}

func TestDefaultPrices(t *testing.T) {
	p := DefaultPrices()
	if p.NeuronsPerMPromptTokens != 2457 || p.NeuronsPerMCompletionTokens != 18252 {
		t.Errorf("DefaultPrices() = %+v, want the llama-3.2-1b-instruct rates 2457/18252", p)
	}
}

func testCatalog() *Catalog {
	return newCatalog([]*Model{
		{Name: "@cf/a/one", Path: "/m/one.gguf", Task: TaskTextGeneration, ContextWindow: 2048, TrainedContext: 2048},
		{Name: "@cf/b/two", Path: "/m/two.gguf", Task: TaskTextGeneration, ContextWindow: 512, TrainedContext: 4096},
		{Name: "three", Path: "/m/three.gguf", Task: TaskTextGeneration, ContextWindow: 128, TrainedContext: 128},
	})
}

func TestLookupAndModels(t *testing.T) {
	c := testCatalog()
	for _, name := range []string{"@cf/a/one", "@cf/b/two", "three"} {
		t.Run(name, func(t *testing.T) {
			m, ok := c.Lookup(name)
			if !ok || m.Name != name {
				t.Fatalf("Lookup(%q) = %v, %v", name, m, ok)
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		for _, name := range []string{"", "@cf/a/One", "@cf/a/one ", "four"} {
			if m, ok := c.Lookup(name); ok {
				t.Errorf("Lookup(%q) = %v, want not found", name, m)
			}
			if n, ok := c.EffectiveContext(name); ok || n != 0 {
				t.Errorf("EffectiveContext(%q) = %d, %v, want 0, false", name, n, ok)
			}
		}
	})
	t.Run("models in catalog order", func(t *testing.T) {
		ms := c.Models()
		want := []string{"@cf/a/one", "@cf/b/two", "three"}
		if len(ms) != len(want) {
			t.Fatalf("Models() has %d entries, want %d", len(ms), len(want))
		}
		for i, m := range ms {
			if m.Name != want[i] {
				t.Errorf("Models()[%d] = %q, want %q", i, m.Name, want[i])
			}
		}
	})
	t.Run("models slice is the caller's", func(t *testing.T) {
		ms := c.Models()
		ms[0] = nil
		if again := c.Models(); again[0] == nil {
			t.Error("changing the slice Models returned changed the catalog")
		}
	})
}

func TestClamp(t *testing.T) {
	initial := map[string]int{"@cf/a/one": 2048, "@cf/b/two": 512, "three": 128}
	tests := []struct {
		name    string
		model   string
		window  int
		want    int   // effective context afterwards
		wantErr error // nil when the clamp succeeds
	}{
		{"lowers", "@cf/a/one", 1000, 1000, nil},
		{"to one token", "@cf/a/one", 1, 1, nil},
		{"equal window is a no-op", "@cf/b/two", 512, 512, nil},
		{"never raises", "@cf/b/two", 4096, 512, nil},
		{"zero window", "@cf/a/one", 0, 2048, ErrInvalid},
		{"negative window", "@cf/a/one", -5, 2048, ErrInvalid},
		{"unknown model", "nope", 10, 0, ErrUnknownModel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testCatalog()
			before, _ := c.Lookup(tc.model)
			err := c.Clamp(tc.model, tc.window)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Clamp(%q, %d) = %v, want %v", tc.model, tc.window, err, tc.wantErr)
			}
			got, _ := c.EffectiveContext(tc.model)
			if got != tc.want {
				t.Errorf("EffectiveContext after Clamp = %d, want %d", got, tc.want)
			}
			if m, ok := c.Lookup(tc.model); ok && m.ContextWindow != tc.want {
				t.Errorf("Lookup after Clamp: ContextWindow = %d, want %d", m.ContextWindow, tc.want)
			}
			if before != nil && before.ContextWindow != initial[tc.model] {
				t.Errorf("Clamp changed a *Model handed out before it: ContextWindow = %d", before.ContextWindow)
			}
			for _, m := range c.Models() {
				if m.Name != tc.model && m.ContextWindow != initial[m.Name] {
					t.Errorf("Clamp(%q) changed %q to %d", tc.model, m.Name, m.ContextWindow)
				}
			}
		})
	}
	t.Run("twice keeps the lower", func(t *testing.T) {
		c := testCatalog()
		for _, w := range []int{1500, 1800, 700, 900} {
			if err := c.Clamp("@cf/a/one", w); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ := c.EffectiveContext("@cf/a/one"); got != 700 {
			t.Errorf("after clamps to 1500, 1800, 700, 900: window %d, want 700", got)
		}
	})
}

// TestConcurrentUse runs lookups against clamps; the race detector checks it.
func TestConcurrentUse(t *testing.T) {
	c := testCatalog()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if g%2 == 0 {
					if err := c.Clamp("@cf/a/one", 2048-i); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				m, ok := c.Lookup("@cf/a/one")
				if !ok || m.ContextWindow < 1849 || m.ContextWindow > 2048 {
					t.Errorf("Lookup during clamps: %v, %v", m, ok)
					return
				}
				_ = c.Models()
			}
		})
	}
	wg.Wait()
	if got, _ := c.EffectiveContext("@cf/a/one"); got != 2048-199 {
		t.Errorf("window after concurrent clamps = %d, want %d", got, 2048-199)
	}
}
