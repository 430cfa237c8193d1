package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdata"
)

// qwen2GGUF returns the real tokenizer.chat_template of the Qwen2 vocab file.
func qwen2GGUF(t testing.TB) string {
	t.Helper()
	path := refdata.Path(t, "tokenizer/ggml-vocab-qwen2.gguf")
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, ok := f.String("tokenizer.chat_template")
	if !ok {
		t.Fatalf("%s has no tokenizer.chat_template", path)
	}
	return s
}

// templateSource returns a template by its name in golden.json.
func templateSource(t testing.TB, name string) string {
	t.Helper()
	if name == "gguf:ggml-vocab-qwen2.gguf" {
		return qwen2GGUF(t)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "templates", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGolden renders every conversation with every reference template and
// compares with what jinja2 produced from the template itself
// (testdata/gen_golden.py).
func TestGolden(t *testing.T) {
	var convs map[string][]struct{ Role, Content string }
	readJSON(t, "testdata/conversations.json", &convs)
	var golden struct {
		Cases []struct {
			Template, Conversation string
			Generation             bool
			Output                 *string
			Error                  string
		}
	}
	readJSON(t, "testdata/golden.json", &golden)
	if len(golden.Cases) == 0 {
		t.Fatal("no golden cases")
	}
	family := map[string]string{
		"llama2.jinja":               "llama2",
		"llama3.jinja":               "llama3",
		"llama3.1.jinja":             "llama3.1",
		"chatml.jinja":               "chatml",
		"qwen2-instruct.jinja":       "chatml",
		"smollm2.jinja":              "chatml",
		"zephyr.jinja":               "zephyr",
		"gguf:ggml-vocab-qwen2.gguf": "chatml",
	}
	for _, c := range golden.Cases {
		name := c.Template + "/" + c.Conversation
		if c.Generation {
			name += "/generation"
		}
		t.Run(name, func(t *testing.T) {
			tmpl, err := Detect(templateSource(t, c.Template))
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if want := family[c.Template]; tmpl.Name() != want {
				t.Fatalf("Detect = %q, want %q", tmpl.Name(), want)
			}
			raw, ok := convs[c.Conversation]
			if !ok {
				t.Fatalf("unknown conversation %q", c.Conversation)
			}
			msgs := make([]Message, len(raw))
			for i, m := range raw {
				msgs[i] = Message{Role: m.Role, Content: m.Content}
			}
			got, err := tmpl.Render(msgs, c.Generation)
			if c.Output == nil {
				if err == nil {
					t.Fatalf("Render = %q, want an error (reference raised %q)", got, c.Error)
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != *c.Output {
				t.Errorf("Render =\n%q\nwant\n%q", got, *c.Output)
			}
			if tmpl.AddsBOS() != (strings.HasPrefix(got, "<s>") || strings.HasPrefix(got, "<|begin_of_text|>")) {
				t.Errorf("AddsBOS() = %v for %q", tmpl.AddsBOS(), got)
			}
		})
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestRender spells out one conversation per family, to be read.
func TestRender(t *testing.T) {
	sysUser := []Message{{RoleSystem, "S"}, {RoleUser, "U"}}
	multi := []Message{{RoleUser, "U1"}, {RoleAssistant, "A1"}, {RoleUser, "U2"}}
	tests := []struct {
		family string
		msgs   []Message
		gen    bool
		want   string
	}{
		{"llama2", sysUser, true, "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]"},
		{"llama2", multi, false, "<s>[INST] U1 [/INST] A1 </s><s>[INST] U2 [/INST]"},
		{"llama3", sysUser, true, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama3", multi[:1], false, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"},
		{"llama3.1", multi[:1], true, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"chatml", sysUser, true, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"},
		{"chatml", multi, false, "<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"},
		{"zephyr", sysUser, true, "<|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\n"},
		{"zephyr", multi[:2], false, "<|user|>\nU1</s>\n<|assistant|>\nA1</s>\n"},
	}
	for _, tt := range tests {
		t.Run(tt.family+"/"+tt.msgs[len(tt.msgs)-1].Content, func(t *testing.T) {
			tmpl, err := ByName(tt.family)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(tt.msgs, tt.gen)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Render =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name          string
		template      string
		want          string // "" means ErrUnknownTemplate
		defaultSystem string
	}{
		{"llama2 canonical", file(t, "llama2.jinja"), "llama2", ""},
		{"llama3 canonical", file(t, "llama3.jinja"), "llama3", ""},
		{"llama3.1 canonical", file(t, "llama3.1.jinja"), "llama3.1", ""},
		{"chatml OpenHermes", file(t, "chatml.jinja"), "chatml", ""},
		{"qwen2 instruct", file(t, "qwen2-instruct.jinja"), "chatml", "You are a helpful assistant."},
		{"qwen2 vocab gguf", qwen2GGUF(t), "chatml", "You are a helpful assistant"},
		{"smollm2", file(t, "smollm2.jinja"), "chatml", "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
		{"zephyr", file(t, "zephyr.jinja"), "zephyr", ""},
		{
			"system literal followed by content is no default",
			`{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}{%- endif %}`,
			"chatml", "",
		},
		{
			"escaped quote in the default",
			`{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou\'re kind.\tOK<|im_end|>\n' }}{% endif %}`,
			"chatml", "You're kind.\tOK",
		},
		{
			"stablelm zephyr writes <|endoftext|>",
			"{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|endoftext|>' + '\n'}}{% endfor %}<|user|>",
			"zephyr", "",
		},
		{"empty", "", "", ""},
		{"blank", " \n\t", "", ""},
		{"plain text", "{{ messages }}", "", ""},
		{
			"mistral v0.1 has [INST] but no <<SYS>>",
			"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
			"", "",
		},
		{
			"phi-3 has <|user|> and <|end|>",
			"{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}<|user|>",
			"", "",
		},
		{
			"gemma",
			"{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}",
			"", "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Detect(tt.template)
			if tt.want == "" {
				if !errors.Is(err, ErrUnknownTemplate) {
					t.Fatalf("Detect = %q, %v; want ErrUnknownTemplate", got.Name(), err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name() != tt.want || got.DefaultSystem() != tt.defaultSystem {
				t.Errorf("Detect = %q with default system %q, want %q with %q", got.Name(), got.DefaultSystem(), tt.want, tt.defaultSystem)
			}
		})
	}
}

func file(t *testing.T, name string) string {
	t.Helper()
	return templateSource(t, name)
}

func TestByName(t *testing.T) {
	tests := []struct {
		name    string
		addsBOS bool
	}{
		{"llama2", true},
		{"llama3", true},
		{"llama3.1", true},
		{"chatml", false},
		{"zephyr", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := ByName(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			if tmpl.Name() != tt.name || tmpl.AddsBOS() != tt.addsBOS || tmpl.DefaultSystem() != "" {
				t.Errorf("ByName(%q): Name %q, AddsBOS %v, DefaultSystem %q", tt.name, tmpl.Name(), tmpl.AddsBOS(), tmpl.DefaultSystem())
			}
		})
	}
	for _, bad := range []string{"", "llama", "Llama3", "mistral"} {
		t.Run("unknown "+bad, func(t *testing.T) {
			if _, err := ByName(bad); !errors.Is(err, ErrUnknownTemplate) {
				t.Errorf("ByName(%q) error = %v, want ErrUnknownTemplate", bad, err)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	user := Message{RoleUser, "u"}
	tests := []struct {
		name     string
		template Template
		msgs     []Message
		want     error
	}{
		{"zero template", Template{}, []Message{user}, ErrUnknownTemplate},
		{"no messages", mustByName(t, "chatml"), nil, ErrNoMessages},
		{"tool role in chatml", mustByName(t, "chatml"), []Message{user, {"tool", "x"}}, ErrInvalidRole},
		{"empty role in llama3", mustByName(t, "llama3"), []Message{{"", "x"}}, ErrInvalidRole},
		{"capitalized role in zephyr", mustByName(t, "zephyr"), []Message{{"User", "x"}}, ErrInvalidRole},
		{"llama2 system only", mustByName(t, "llama2"), []Message{{RoleSystem, "s"}}, ErrRoleOrder},
		{"llama2 assistant first", mustByName(t, "llama2"), []Message{{RoleAssistant, "a"}, user}, ErrRoleOrder},
		{"llama2 two users", mustByName(t, "llama2"), []Message{user, user}, ErrRoleOrder},
		// The reference template would silently drop this system message.
		{"llama2 system later", mustByName(t, "llama2"), []Message{user, {RoleAssistant, "a"}, {RoleSystem, "s"}}, ErrRoleOrder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, gen := range []bool{false, true} {
				if got, err := tt.template.Render(tt.msgs, gen); !errors.Is(err, tt.want) {
					t.Errorf("Render(gen=%v) = %q, %v; want %v", gen, got, err, tt.want)
				}
			}
		})
	}
}

func mustByName(t *testing.T, name string) Template {
	t.Helper()
	tmpl, err := ByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func TestStrip(t *testing.T) {
	tests := []struct{ in, want string }{
		{"  a b  ", "a b"},
		{"\x1c\x1d\x1e\x1fa\x1f", "a"},
		{"\u3000\u00a0\u2028a\u0085", "a"},
		{"\u200ba\u200b", "\u200ba\u200b"}, // zero width space is not whitespace in Python
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := strip(tt.in); got != tt.want {
				t.Errorf("strip(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzDetect feeds arbitrary template strings (they come from model files):
// Detect must not panic, and whatever it accepts must render a plain
// conversation without error, with any default system message in place.
func FuzzDetect(f *testing.F) {
	for _, name := range []string{"llama2.jinja", "llama3.jinja", "chatml.jinja", "qwen2-instruct.jinja", "zephyr.jinja"} {
		b, err := os.ReadFile(filepath.Join("testdata", "templates", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(`<|im_start|>system\n\'<|im_end|>`)
	f.Add("<|im_start|>system\n\\")
	f.Fuzz(func(t *testing.T, s string) {
		tmpl, err := Detect(s)
		if err != nil {
			if !errors.Is(err, ErrUnknownTemplate) {
				t.Fatalf("Detect error %v does not wrap ErrUnknownTemplate", err)
			}
			return
		}
		if strings.Contains(tmpl.DefaultSystem(), "<|im_end|>") {
			t.Fatalf("default system %q holds <|im_end|>", tmpl.DefaultSystem())
		}
		out, err := tmpl.Render([]Message{{RoleUser, "hi"}}, true)
		if err != nil {
			t.Fatalf("Render: %v", err)
		}
		if !strings.Contains(out, "hi") || !strings.Contains(out, tmpl.DefaultSystem()) {
			t.Fatalf("Render = %q lost the message or the default system %q", out, tmpl.DefaultSystem())
		}
	})
}
