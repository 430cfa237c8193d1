package catalog

import (
	"errors"
	"sync"
	"testing"
)

// TestLimitContext walks one model through a sequence of live limits and
// clamps, checking the advertised window after each step.
func TestLimitContext(t *testing.T) {
	const name = "@cf/a/one" // own window 2048
	type step struct {
		op      string // "limit" or "clamp"
		n       int
		want    int   // advertised window afterwards
		wantErr error // nil when the step succeeds
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a smaller limit lowers the window", []step{{"limit", 256, 256, nil}}},
		{"a larger limit never raises above the own window", []step{{"limit", 4096, 2048, nil}}},
		{"the limit rises again", []step{{"limit", 256, 256, nil}, {"limit", 1024, 1024, nil}}},
		{"removing the limit restores the own window", []step{{"limit", 256, 256, nil}, {"limit", 0, 2048, nil}}},
		{"removing without a limit changes nothing", []step{{"limit", 0, 2048, nil}}},
		{"a clamp under a limit lowers the own window", []step{
			{"limit", 1024, 1024, nil}, {"clamp", 512, 512, nil}, {"limit", 0, 512, nil}}},
		{"a clamp above a limit shows once the limit lifts", []step{
			{"limit", 256, 256, nil}, {"clamp", 1000, 256, nil}, {"limit", 4096, 1000, nil}, {"limit", 0, 1000, nil}}},
		{"a clamp above the own window under a limit is a no-op", []step{
			{"limit", 256, 256, nil}, {"clamp", 3000, 256, nil}, {"limit", 0, 2048, nil}}},
		{"a limit after a clamp keeps the clamp", []step{{"clamp", 700, 700, nil}, {"limit", 1500, 700, nil}, {"limit", 0, 700, nil}}},
		{"a negative limit is refused", []step{{"limit", 256, 256, nil}, {"limit", -1, 256, ErrInvalid}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testCatalog()
			for i, s := range tc.steps {
				var err error
				if s.op == "limit" {
					err = c.LimitContext(name, s.n)
				} else {
					err = c.Clamp(name, s.n)
				}
				if !errors.Is(err, s.wantErr) || (s.wantErr == nil) != (err == nil) {
					t.Fatalf("step %d %s(%d) = %v, want %v", i, s.op, s.n, err, s.wantErr)
				}
				if got, _ := c.EffectiveContext(name); got != s.want {
					t.Fatalf("after step %d %s(%d): window %d, want %d", i, s.op, s.n, got, s.want)
				}
			}
			for _, m := range c.Models() {
				if m.Name != name && m.ContextWindow != map[string]int{"@cf/b/two": 512, "three": 128}[m.Name] {
					t.Errorf("limits on %q changed %q to %d", name, m.Name, m.ContextWindow)
				}
			}
		})
	}
	t.Run("unknown model", func(t *testing.T) {
		if err := testCatalog().LimitContext("nope", 5); !errors.Is(err, ErrUnknownModel) {
			t.Fatalf("LimitContext(nope) = %v, want ErrUnknownModel", err)
		}
	})
	t.Run("unresolved model", func(t *testing.T) {
		c := newCatalog([]*Model{{Name: "m", Path: "/m.gguf", Task: TaskTextGeneration}})
		if err := c.LimitContext("m", 5); !errors.Is(err, ErrInvalid) {
			t.Fatalf("LimitContext on a model without a window = %v, want ErrInvalid", err)
		}
	})
	t.Run("models handed out before are unchanged", func(t *testing.T) {
		c := testCatalog()
		before, _ := c.Lookup(name)
		if err := c.LimitContext(name, 100); err != nil {
			t.Fatal(err)
		}
		if before.ContextWindow != 2048 {
			t.Fatalf("a *Model looked up before the limit changed to %d", before.ContextWindow)
		}
	})
}

// TestLimitConcurrentUse runs limits, clamps and lookups together; the race
// detector checks the locking, and the window never leaves its bounds.
func TestLimitConcurrentUse(t *testing.T) {
	c := testCatalog()
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for i := range 200 {
				switch g {
				case 0:
					if err := c.LimitContext("@cf/a/one", 100+i%7*300); err != nil {
						t.Error(err)
						return
					}
				case 1:
					if err := c.Clamp("@cf/a/one", 2048-i); err != nil {
						t.Error(err)
						return
					}
				default:
					if m, ok := c.Lookup("@cf/a/one"); !ok || m.ContextWindow < 100 || m.ContextWindow > 2048 {
						t.Errorf("Lookup during limits: %v, %v", m, ok)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := c.LimitContext("@cf/a/one", 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.EffectiveContext("@cf/a/one"); got != 2048-199 {
		t.Errorf("window after the limit lifted = %d, want the clamped %d", got, 2048-199)
	}
}
