package chat

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// goldenSpecial are the bos_token and eos_token testdata/gen_golden.py used.
var goldenSpecial = map[string][2]string{
	"llama2.jinja":               {"<s>", "</s>"},
	"llama3.jinja":               {"<|begin_of_text|>", "<|eot_id|>"},
	"llama3.1.jinja":             {"<|begin_of_text|>", "<|eot_id|>"},
	"chatml.jinja":               {"", "<|im_end|>"},
	"qwen2-instruct.jinja":       {"", "<|im_end|>"},
	"smollm2.jinja":              {"<|im_start|>", "<|im_end|>"},
	"zephyr.jinja":               {"<s>", "</s>"},
	"gguf:ggml-vocab-qwen2.gguf": {"", "<|endoftext|>"},
}

func goldenSource(t *testing.T, name string) string {
	t.Helper()
	if name == "gguf:ggml-vocab-qwen2.gguf" {
		f, err := gguf.Open(refdatatest.Path(t, "tokenizer/ggml-vocab-qwen2.gguf"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s, _ := f.String("tokenizer.chat_template")
		return s
	}
	b, err := os.ReadFile(filepath.Join("testdata", "templates", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGolden renders the older reference conversations (testdata/golden.json:
// Llama 2, Llama 3, ChatML, Zephyr, SmolLM2 and the Qwen2 vocabulary's own
// template, with and without the generation prompt) as jinja2 did, including
// Llama 2's refusals of roles out of order.
func TestGolden(t *testing.T) {
	var convs map[string]json.RawMessage
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
	compiled := map[string]*Template{}
	for _, c := range golden.Cases {
		name := c.Template + "/" + c.Conversation
		if c.Generation {
			name += "/generation"
		}
		t.Run(name, func(t *testing.T) {
			tmpl := compiled[c.Template]
			if tmpl == nil {
				var err error
				if tmpl, err = Compile(goldenSource(t, c.Template), Config{}); err != nil {
					t.Fatal(err)
				}
				compiled[c.Template] = tmpl
			}
			sp := goldenSpecial[c.Template]
			vars, _ := json.Marshal(map[string]any{
				"messages": convs[c.Conversation], "add_generation_prompt": c.Generation,
				"bos_token": sp[0], "eos_token": sp[1],
			})
			got, err := tmpl.RenderVars(context.Background(), vars)
			if c.Output == nil {
				var te *TemplateError
				if !errors.As(err, &te) || te.Message != c.Error {
					t.Fatalf("RenderVars = %q, %v; want the refusal %q", got, err, c.Error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != *c.Output {
				t.Fatalf("RenderVars =\n%q\nwant\n%q", got, *c.Output)
			}
		})
	}
}
