package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the YAML loader. It must never panic;
// every failure must wrap ErrInvalid; and an accepted catalog must satisfy the
// invariants validation promises. Seeds are in testdata/fuzz/FuzzParse and
// below.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("..", "catalog.yaml")); err == nil {
		f.Add(data)
	} else {
		f.Fatalf("the example catalog is missing: %v", err)
	}
	for _, s := range []string{
		one,
		one + "    context_window: 4096\n    kv_pool_bytes: 1.5GiB\n",
		one + "    kv_pool_tokens: 10\n    kv_pool_bytes: 10\n",
		one + "    prices: {neurons_per_m_prompt_tokens: .nan}\n",
		"models:\n  - &a {name: x, path: y}\n  - *a\n",
		"models: [{name: a, path: b, properties: {k: v}}]\n",
		"models:\n  - name: \"\\u0000\"\n    path: x\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "/cat")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		ms := c.Models()
		if len(ms) == 0 || len(ms) > MaxModels {
			t.Fatalf("accepted %d models", len(ms))
		}
		seen := map[string]bool{}
		for _, m := range ms {
			if seen[m.Name] {
				t.Fatalf("accepted duplicate name %q", m.Name)
			}
			seen[m.Name] = true
			if checkName(m.Name) != "" || strings.ContainsAny(m.Name, " \t\n\r") {
				t.Fatalf("accepted bad name %q", m.Name)
			}
			if !filepath.IsAbs(m.Path) || m.Task != TaskTextGeneration {
				t.Fatalf("accepted path %q task %q", m.Path, m.Task)
			}
			if m.ContextWindow < 0 || m.ContextWindow > MaxContext || m.KVPoolTokens < 0 || m.KVPoolBytes < 0 ||
				(m.KVPoolTokens != 0 && m.KVPoolBytes != 0) {
				t.Fatalf("accepted sizes %+v", *m)
			}
			if n := m.Prices.Neurons(1000, 1000); n < 0 || n != n {
				t.Fatalf("accepted prices %+v", m.Prices)
			}
			if got, ok := c.Lookup(m.Name); !ok || got != m {
				t.Fatalf("Lookup(%q) does not find the model Models lists", m.Name)
			}
		}
	})
}
