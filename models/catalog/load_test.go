package catalog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// one is a valid single-model catalog that cases extend with extra keys.
const one = "models:\n  - name: \"@cf/meta/m\"\n    path: m.gguf\n"

func TestParseFieldErrors(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		model     string // FieldError.Model ("" for an entry named by position)
		index     int
		field     string
		msgHas    string
		sentinel  error
		wantCount int // FieldErrors expected in the joined error
	}{
		{"missing name", "models:\n  - path: m.gguf\n", "", 0, "name", "missing", ErrInvalid, 1},
		{"name with a space", "models:\n  - name: \"a b\"\n    path: m.gguf\n", "", 0, "name", "without spaces", ErrInvalid, 1},
		{"name with a tab", "models:\n  - name: \"a\\tb\"\n    path: m.gguf\n", "", 0, "name", "without spaces", ErrInvalid, 1},
		{"name with a control char", "models:\n  - name: \"a\\x01b\"\n    path: m.gguf\n", "", 0, "name", "printable", ErrInvalid, 1},
		{"name too long", "models:\n  - name: " + strings.Repeat("x", MaxNameBytes+1) + "\n    path: m.gguf\n", "", 0, "name", "limit 256", ErrInvalid, 1},
		{"empty path", "models:\n  - name: a\n", "a", 0, "path", "missing", ErrInvalid, 1},
		{"blank path", "models:\n  - name: a\n    path: \"\"\n", "a", 0, "path", "missing", ErrInvalid, 1},
		{"unknown task", one + "    task: speech-recognition\n", "@cf/meta/m", 0, "task", `"speech-recognition" is not supported`, ErrInvalid, 1},
		{"negative context", one + "    context_window: -1\n", "@cf/meta/m", 0, "context_window", "-1 is negative", ErrInvalid, 1},
		{"fractional context", one + "    context_window: 1.5\n", "@cf/meta/m", 0, "context_window", "not a whole number", ErrInvalid, 1},
		{"string context", one + "    context_window: big\n", "@cf/meta/m", 0, "context_window", "not a whole number", ErrInvalid, 1},
		{"huge context", one + "    context_window: 16777217\n", "@cf/meta/m", 0, "context_window", "over the limit", ErrInvalid, 1},
		{"negative kv tokens", one + "    kv_pool_tokens: -4\n", "@cf/meta/m", 0, "kv_pool_tokens", "-4 is negative", ErrInvalid, 1},
		{"kv tokens over int32", one + "    kv_pool_tokens: 2147483648\n", "@cf/meta/m", 0, "kv_pool_tokens", "over the limit", ErrInvalid, 1},
		{"negative kv bytes", one + "    kv_pool_bytes: -4096\n", "@cf/meta/m", 0, "kv_pool_bytes", "-4096 is negative", ErrInvalid, 1},
		{"kv bytes bad unit", one + "    kv_pool_bytes: 4 parsecs\n", "@cf/meta/m", 0, "kv_pool_bytes", "not a size", ErrInvalid, 1},
		{"kv bytes fraction of a byte", one + "    kv_pool_bytes: 1.5B\n", "@cf/meta/m", 0, "kv_pool_bytes", "whole number of bytes", ErrInvalid, 1},
		{"kv bytes float", one + "    kv_pool_bytes: 1.5\n", "@cf/meta/m", 0, "kv_pool_bytes", "not a whole number", ErrInvalid, 1},
		{"negative draft tokens", one + "    draft_tokens: -1\n", "@cf/meta/m", 0, "draft_tokens", "-1 is negative", ErrInvalid, 1},
		{"too many draft tokens", one + "    draft_tokens: 17\n", "@cf/meta/m", 0, "draft_tokens", "over the limit", ErrInvalid, 1},
		{"unknown KV type", one + "    kv_type: q5_0\n", "@cf/meta/m", 0, "kv_type", `"q5_0" is not one of f16, q8_0, q4_0`, ErrInvalid, 1},
		{"both kv sizes", one + "    kv_pool_tokens: 1024\n    kv_pool_bytes: 1MiB\n", "@cf/meta/m", 0, "kv_pool_bytes", "at most one", ErrInvalid, 1},
		{"negative prompt price", one + "    prices: {neurons_per_m_prompt_tokens: -1}\n", "@cf/meta/m", 0, "prices.neurons_per_m_prompt_tokens", ">= 0", ErrInvalid, 1},
		{"NaN completion price", one + "    prices: {neurons_per_m_completion_tokens: .nan}\n", "@cf/meta/m", 0, "prices.neurons_per_m_completion_tokens", "finite", ErrInvalid, 1},
		{"infinite prompt price", one + "    prices: {neurons_per_m_prompt_tokens: .inf}\n", "@cf/meta/m", 0, "prices.neurons_per_m_prompt_tokens", "finite", ErrInvalid, 1},
		{"empty property key", one + "    properties: {\"\": x}\n", "@cf/meta/m", 0, "properties", "empty", ErrInvalid, 1},
		{"duplicate names", one + "  - name: \"@cf/meta/m\"\n    path: other.gguf\n", "@cf/meta/m", 1, "name", "duplicate of models[0]", ErrInvalid, 1},
		{"second entry named by position", one + "  - path: x.gguf\n    kv_pool_tokens: -1\n", "", 1, "name", "missing", ErrInvalid, 2},
		{"every failure reported", "models:\n  - name: a\n    context_window: -1\n    kv_pool_tokens: -1\n", "a", 0, "path", "missing", ErrInvalid, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml), "/cat")
			if err == nil {
				t.Fatalf("Parse accepted it: %v", c.Models())
			}
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("error %v does not wrap %v", err, tc.sentinel)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			if fe.Model != tc.model || fe.Index != tc.index || fe.Field != tc.field {
				t.Errorf("FieldError names model %q [%d] field %q, want %q [%d] %q (%v)", fe.Model, fe.Index, fe.Field, tc.model, tc.index, tc.field, err)
			}
			if !strings.Contains(fe.Msg, tc.msgHas) {
				t.Errorf("message %q does not say %q", fe.Msg, tc.msgHas)
			}
			if n := countFieldErrors(err); n != tc.wantCount {
				t.Errorf("%d field errors, want %d: %v", n, tc.wantCount, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error text %q does not name the field %q", err, tc.field)
			}
		})
	}
}

// aliasBomb is a few hundred bytes that expand to 10^levels list items if
// aliases are followed: Parse must refuse it without expanding it.
func aliasBomb(levels int) string {
	y := "models:\n  - name: a\n    path: b\n    properties: {}\n    kv_pool_tokens: &a0 [1,1,1,1,1,1,1,1,1,1]\n"
	for i := 1; i < levels; i++ {
		p := fmt.Sprintf("*a%d", i-1)
		y += fmt.Sprintf("  - name: n%d\n    path: b\n    kv_pool_tokens: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(p+",", 10), ","))
	}
	return y
}

// countFieldErrors counts the FieldErrors in a tree of joined errors.
func countFieldErrors(err error) int {
	if _, ok := err.(*FieldError); ok {
		return 1
	}
	n := 0
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			n += countFieldErrors(e)
		}
	}
	return n
}

func TestParseDocumentErrors(t *testing.T) {
	tests := []struct {
		name   string
		yaml   string
		msgHas string
	}{
		{"empty file", "", "empty"},
		{"only a comment", "# nothing\n", "empty"},
		{"null document", "null\n", "mapping"},
		{"empty model list", "models: []\n", "the list is empty"},
		{"no models key", "{}\n", "the list is empty"},
		{"unknown top-level key", one + "version: 1\n", `unknown field "version"`},
		{"unknown model key", one + "    contxt_window: 10\n", `unknown field "contxt_window"`},
		{"unknown prices key", one + "    prices: {neurons_per_m_input_tokens: 1}\n", `unknown field "neurons_per_m_input_tokens"`},
		{"duplicate key", one + "    path: again.gguf\n", `"path" already defined`},
		{"models is a map", "models: {a: b}\n", "sequence"},
		{"top level is a list", "- name: a\n", "mapping"},
		{"property value is a list", one + "    properties: {a: [1]}\n", "cannot unmarshal"},
		{"two documents", one + "---\n" + one, "exactly one YAML document"},
		{"not YAML", "models: [\n", ""},
		{"too large", one + "# " + strings.Repeat("x", MaxFileBytes) + "\n", "over 1048576 bytes"},
		{"anchor and alias", "models:\n  - &m {name: a, path: x.gguf}\n  - *m\n", "anchors and aliases are not supported"},
		{"merge key", "models:\n  - &m {name: a, path: x.gguf}\n  - <<: *m\n    name: b\n", "line 2 column 5"},
		{"alias bomb", aliasBomb(9), "anchors and aliases are not supported"},
		{"too many models", "models:\n" + strings.Repeat("  - {name: a, path: b}\n", MaxModels+1), "limit 1024"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml), "/cat")
			if err == nil {
				t.Fatalf("Parse accepted it: %v", c.Models())
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.msgHas) {
				t.Errorf("error %q does not say %q", err, tc.msgHas)
			}
		})
	}
}

func TestParseValues(t *testing.T) {
	yaml := `models:
  - name: "@cf/meta/llama-3.2-1b-instruct"
    path: sub/llama.gguf
    task: text-generation
    description: a model
    context_window: 4096
    kv_pool_bytes: 2GiB
    prices:
      neurons_per_m_prompt_tokens: 0
    properties: {license: llama3.2, beta: "true"}
  - name: plain
    path: /abs/plain.gguf
    kv_pool_tokens: 65536
  - name: "π/模型"
    path: ../up.gguf
    prices: {neurons_per_m_prompt_tokens: 1.5, neurons_per_m_completion_tokens: 2.5}
`
	c, err := Parse([]byte(yaml), "/etc/bulkhead")
	if err != nil {
		t.Fatal(err)
	}
	want := []*Model{{
		Name: "@cf/meta/llama-3.2-1b-instruct", Path: "/etc/bulkhead/sub/llama.gguf", Task: TaskTextGeneration,
		Description: "a model", ContextWindow: 4096, KVPoolBytes: 2 << 30,
		Prices:     Prices{NeuronsPerMPromptTokens: 0, NeuronsPerMCompletionTokens: DefaultNeuronsPerMCompletionTokens},
		Properties: map[string]string{"license": "llama3.2", "beta": "true"},
		taskSet:    true, pricesSet: true,
	}, {
		Name: "plain", Path: "/abs/plain.gguf", Task: TaskTextGeneration, KVPoolTokens: 65536, Prices: DefaultPrices(),
	}, {
		Name: "π/模型", Path: "/etc/up.gguf", Task: TaskTextGeneration, Prices: Prices{1.5, 2.5, 0.375}, pricesSet: true,
	}}
	got := c.Models()
	if len(got) != len(want) {
		t.Fatalf("%d models, want %d", len(got), len(want))
	}
	for i := range want {
		t.Run(want[i].Name, func(t *testing.T) {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("got  %+v\nwant %+v", *got[i], *want[i])
			}
		})
	}
}

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1024", 1024, true},
		{"512B", 512, true},
		{"4KiB", 4096, true},
		{"4kib", 4096, true},
		{"4 KiB", 4096, true},
		{"1KB", 1000, true},
		{"3MiB", 3 << 20, true},
		{"2MB", 2e6, true},
		{"1.5GiB", 3 << 29, true},
		{"1.5GB", 1.5e9, true},
		{"2TiB", 2 << 40, true},
		{"7TB", 7e12, true},
		{" 16 GiB ", 16 << 30, true},
		{"", 0, false},
		{"GiB", 0, false},
		{"-1GiB", 0, false},
		{"+1GiB", 0, false},
		{"1e9", 0, false},
		{"0x10", 0, false},
		{"1_000", 0, false},
		{"inf", 0, false},
		{"nan", 0, false},
		{"1.2.3MB", 0, false},
		{".", 0, false},
		{"1.5B", 0, false},
		{"1PiB", 0, false},
		{"9000000TiB", 0, false},
		{"4 GiB extra", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseByteSize(tc.in)
			if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
				t.Errorf("parseByteSize(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

// TestExampleCatalog checks that the documented example file is a valid
// catalog. It parses without opening the model file the example points at.
func TestExampleCatalog(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data, "/models")
	if err != nil {
		t.Fatalf("models/catalog.yaml: %v", err)
	}
	m, ok := c.Lookup("@cf/karpathy/stories260k")
	if !ok {
		t.Fatalf("the example model is missing: %v", c.Models())
	}
	if m.ContextWindow != 512 || m.KVPoolTokens != 8192 || m.Prices != (Prices{100, 500, 25}) || m.Properties["license"] != "MIT" {
		t.Errorf("example model = %+v", *m)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	writeGGUF(t, filepath.Join(dir, "models", "a.gguf"), "llama", 4096)
	writeGGUF(t, filepath.Join(dir, "b.gguf"), "qwen2", 32768)
	cat := writeFile(t, filepath.Join(dir, "conf", "catalog.yaml"), `models:
  - name: a
    path: ../models/a.gguf
  - name: b
    path: `+filepath.Join(dir, "b.gguf")+`
    context_window: 8192
`)
	// Load from another working directory: relative paths follow the file.
	t.Chdir(t.TempDir())
	c, err := Load(cat)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, arch string
		window, trained  int
	}{
		{"a", filepath.Join(dir, "models", "a.gguf"), "llama", 4096, 4096},
		{"b", filepath.Join(dir, "b.gguf"), "qwen2", 8192, 32768},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := c.Lookup(tc.name)
			if !ok {
				t.Fatal("missing")
			}
			if m.Path != tc.path || m.Arch != tc.arch || m.ContextWindow != tc.window || m.TrainedContext != tc.trained {
				t.Errorf("got path %s arch %s window %d trained %d; want %s %s %d %d",
					m.Path, m.Arch, m.ContextWindow, m.TrainedContext, tc.path, tc.arch, tc.window, tc.trained)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	writeGGUF(t, filepath.Join(dir, "small.gguf"), "llama", 1024)
	tests := []struct {
		name     string
		yaml     string // "" for no file at all
		sentinel error
		msgHas   []string
	}{
		{"no catalog file", "", ErrInvalid, []string{"no such file"}},
		{"invalid field", "models:\n  - name: a\n    path: small.gguf\n    kv_pool_tokens: -1\n", ErrInvalid, []string{"catalog.yaml", `model "a"`, "kv_pool_tokens"}},
		{"model file missing", "models:\n  - name: a\n    path: gone.gguf\n", ErrModelFile, []string{`model "a"`, filepath.Join(dir, "gone.gguf")}},
		{"window over trained", "models:\n  - name: a\n    path: small.gguf\n    context_window: 2048\n", ErrContextWindow, []string{`model "a"`, "2048", "1024"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "catalog.yaml")
			os.Remove(path)
			if tc.yaml != "" {
				writeFile(t, path, tc.yaml)
			}
			c, err := Load(path)
			if err == nil {
				t.Fatalf("Load accepted it: %v", c.Models())
			}
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("error %v does not wrap %v", err, tc.sentinel)
			}
			for _, s := range tc.msgHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

func TestFromFlags(t *testing.T) {
	dir := t.TempDir()
	writeGGUF(t, filepath.Join(dir, "a.gguf"), "llama", 2048)
	writeGGUF(t, filepath.Join(dir, "sub", "b=c.gguf"), "qwen2", 512)
	t.Chdir(dir)
	c, err := FromFlags([]string{"@cf/x/a=a.gguf", "b=sub/b=c.gguf"})
	if err != nil {
		t.Fatal(err)
	}
	want := []*Model{
		{Name: "@cf/x/a", Path: filepath.Join(dir, "a.gguf"), Task: TaskTextGeneration, ContextWindow: 2048, Prices: DefaultPrices(), Arch: "llama", TrainedContext: 2048},
		{Name: "b", Path: filepath.Join(dir, "sub", "b=c.gguf"), Task: TaskTextGeneration, ContextWindow: 512, Prices: DefaultPrices(), Arch: "qwen2", TrainedContext: 512},
	}
	got := c.Models()
	for i := range want {
		t.Run(want[i].Name, func(t *testing.T) {
			if i >= len(got) || !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("got %+v\nwant %+v", got, *want[i])
			}
		})
	}
}

func TestFromFlagsErrors(t *testing.T) {
	dir := t.TempDir()
	writeGGUF(t, filepath.Join(dir, "a.gguf"), "llama", 2048)
	t.Chdir(dir)
	tests := []struct {
		name     string
		specs    []string
		sentinel error
		field    string // "" when the error is not a FieldError
		index    int
		msgHas   string
	}{
		{"no flags", nil, ErrInvalid, "", 0, "no models"},
		{"no equals sign", []string{"a.gguf"}, ErrInvalid, "--model", 0, "NAME=PATH"},
		{"empty name", []string{"=a.gguf"}, ErrInvalid, "name", 0, "missing"},
		{"name with space", []string{"my model=a.gguf"}, ErrInvalid, "name", 0, "without spaces"},
		{"empty path", []string{"a="}, ErrInvalid, "path", 0, "missing"},
		{"duplicate name", []string{"a=a.gguf", "a=a.gguf"}, ErrInvalid, "name", 1, "duplicate of models[0]"},
		{"missing file", []string{"a=a.gguf", "b=nope.gguf"}, ErrModelFile, "", 0, "nope.gguf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromFlags(tc.specs)
			if err == nil {
				t.Fatalf("FromFlags accepted %q: %v", tc.specs, c.Models())
			}
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("error %v does not wrap %v", err, tc.sentinel)
			}
			if !strings.Contains(err.Error(), tc.msgHas) {
				t.Errorf("error %q does not say %q", err, tc.msgHas)
			}
			if tc.field == "" {
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Index != tc.index {
				t.Errorf("error %v: want a FieldError for field %q at %d", err, tc.field, tc.index)
			}
		})
	}
}

// TestDraftTokens: draft_tokens absent leaves the worker's choice (0), 0
// turns drafting off (-1), N is N.
func TestDraftTokens(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want int
	}{{"", 0}, {"    draft_tokens: 0\n", -1}, {"    draft_tokens: 4\n", 4}, {"    draft_tokens: 16\n", 16}} {
		c, err := Parse([]byte("models:\n  - name: m\n    path: m.gguf\n"+tc.yaml), "/cat")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Models()[0].DraftTokens; got != tc.want {
			t.Errorf("%q: DraftTokens %d, want %d", tc.yaml, got, tc.want)
		}
	}
}

// TestKVType: kv_type absent leaves the worker's --kv-type (""); a named
// type is kept.
func TestKVType(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{{"", ""}, {"    kv_type: q8_0\n", "q8_0"}, {"    kv_type: q4_0\n", "q4_0"}, {"    kv_type: f16\n", "f16"}} {
		c, err := Parse([]byte("models:\n  - name: m\n    path: m.gguf\n"+tc.yaml), "/cat")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Models()[0].KVType; got != tc.want {
			t.Errorf("%q: KVType %q, want %q", tc.yaml, got, tc.want)
		}
	}
}
