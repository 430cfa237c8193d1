package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// TestChatRender runs every case of ../shared/chat/renders.json through
// `bulkhead chat render --template ... --json`: the text byte for byte, and
// every refusal exits 1 with the template's message.
func TestChatRender(t *testing.T) {
	var doc struct {
		Cases []struct {
			Template string          `json:"template"`
			Case     string          `json:"case"`
			Input    json.RawMessage `json:"input"`
			Text     *string         `json:"text"`
			Error    string          `json:"error"`
		} `json:"cases"`
	}
	b, err := os.ReadFile(refdatatest.Path(t, "chat/renders.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	matched := 0
	for i, c := range doc.Cases {
		t.Run(strings.TrimSuffix(c.Template, ".jinja")+"/"+c.Case, func(t *testing.T) {
			in := filepath.Join(dir, strings.ReplaceAll(c.Template+c.Case, "/", "_")+".json")
			if err := os.WriteFile(in, c.Input, 0o644); err != nil {
				t.Fatal(err)
			}
			out, stderr, code := bulkhead(t, "chat", "render", "--template", refdatatest.Path(t, "chat/templates/"+c.Template), "--input", in, "--json")
			if c.Text == nil {
				_, msg, _ := strings.Cut(c.Error, ": ")
				if code != 1 || !strings.Contains(stderr, msg) {
					t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr, msg)
				}
				matched++
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var got struct{ Text string }
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("output %q: %v", out, err)
			}
			if got.Text != *c.Text {
				t.Fatalf("case %d: text\n%q\nwant\n%q", i, got.Text, *c.Text)
			}
			matched++
		})
	}
	t.Logf("chat render matched %d/%d", matched, len(doc.Cases))
}

// TestChatRenderModel renders with a model file's own template (the tiny
// Phi-3 carries the real one), its BOS and EOS filled in, as plain text.
func TestChatRenderModel(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(in, []byte(`{"messages":[{"role":"user","content":"Hi <|end|>"}],"add_generation_prompt":false}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := bulkhead(t, "chat", "render", "--model", refdatatest.Path(t, "models/archs/phi3-tiny-f16.gguf"), "--input", in)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if out != "<s><|user|>\nHi <|end|><|end|>\n<|assistant|>\n" {
		t.Fatalf("output %q", out)
	}
	for _, args := range [][]string{
		{"chat", "render", "--input", in},
		{"chat", "render", "--input", in, "--model", "a", "--template", "b"},
		{"chat", "render", "--template", in},
		{"chat"},
	} {
		if _, _, code := bulkhead(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestChatRenderBombs: the red team's four template bombs (string doubling,
// a join of repeats, list doubling, chained replace) each end `chat render`
// with exit 1 and a render budget error, not an out-of-memory crash.
func TestChatRenderBombs(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.json")
	if err := os.WriteFile(in, []byte(`{"messages":[{"role":"user","content":"hi"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	bombs := map[string]string{
		"string doubling": `{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}`,
		"join of repeats": `{{ range(65536) | join('a' * 1048576) }}`,
		"list doubling":   `{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l }}`,
		"chained replace": `{{ 'a'` + strings.Repeat(` | replace('a', 'aaaaaaaaaa')`, 12) + ` }}`,
	}
	for name, src := range bombs {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".jinja")
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			_, stderr, code := bulkhead(t, "chat", "render", "--template", path, "--input", in)
			if code != 1 || !strings.Contains(stderr, "render budget exceeded") {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
		})
	}
}
