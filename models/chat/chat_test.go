package chat

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// renderCase is one case of ../shared/chat/renders.json.
type renderCase struct {
	Template string          `json:"template"`
	Case     string          `json:"case"`
	Input    json.RawMessage `json:"input"`
	Text     *string         `json:"text"`
	Error    string          `json:"error"`
}

func sharedRenders(t testing.TB) []renderCase {
	t.Helper()
	var doc struct {
		Semantics string       `json:"semantics"`
		Cases     []renderCase `json:"cases"`
	}
	readJSON(t, refdatatest.Path(t, "chat/renders.json"), &doc)
	if len(doc.Cases) == 0 || !strings.Contains(doc.Semantics, "apply_chat_template") {
		t.Fatalf("renders.json: %d cases, semantics %q", len(doc.Cases), doc.Semantics)
	}
	return doc.Cases
}

func sharedTemplate(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(refdatatest.Path(t, filepath.Join("chat/templates", name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// refusal is the template's own message in a reference error
// ("TemplateError: System role not supported").
func refusal(reference string) string {
	_, msg, _ := strings.Cut(reference, ": ")
	return msg
}

// TestSharedRenders renders every case of renders.json through RenderVars
// (the variables as written) and through Render (the typed conversation a
// request becomes), byte for byte, and checks every refusal.
func TestSharedRenders(t *testing.T) {
	ctx := context.Background()
	matched, refused := 0, 0
	cases := sharedRenders(t)
	for _, c := range cases {
		t.Run(strings.TrimSuffix(c.Template, ".jinja")+"/"+c.Case, func(t *testing.T) {
			tmpl, err := Compile(sharedTemplate(t, c.Template), Config{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.RenderVars(ctx, c.Input)
			in, bos, eos := inputOf(t, c.Input)
			typed, err2 := mustCompile(t, c.Template, Config{BOS: bos, EOS: eos}).Render(ctx, in)
			if c.Text == nil {
				var te *TemplateError
				if !errors.As(err, &te) || te.Message != refusal(c.Error) {
					t.Fatalf("RenderVars = %q, %v; want refusal %q", got, err, c.Error)
				}
				if !errors.As(err2, &te) || te.Message != refusal(c.Error) {
					t.Fatalf("Render error %v; want refusal %q", err2, c.Error)
				}
				refused++
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != *c.Text {
				t.Fatalf("RenderVars =\n%q\nwant\n%q", got, *c.Text)
			}
			if err2 != nil {
				t.Fatal(err2)
			}
			if typed.Text() != *c.Text {
				t.Fatalf("Render =\n%q\nwant\n%q", typed.Text(), *c.Text)
			}
			matched++
		})
	}
	t.Logf("renders matched %d/%d, refusals %d", matched+refused, len(cases), refused)
}

func mustCompile(t testing.TB, name string, cfg Config) *Template {
	t.Helper()
	tmpl, err := Compile(sharedTemplate(t, name), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// inputOf turns a renders.json input into the typed Input.
func inputOf(t testing.TB, raw json.RawMessage) (Input, string, string) {
	t.Helper()
	var v struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		Tools               []json.RawMessage `json:"tools"`
		AddGenerationPrompt bool              `json:"add_generation_prompt"`
		BOS                 string            `json:"bos_token"`
		EOS                 string            `json:"eos_token"`
		Now                 time.Time         `json:"now"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	in := Input{Tools: v.Tools, AddGenerationPrompt: v.AddGenerationPrompt, Now: v.Now}
	for _, m := range v.Messages {
		in.Messages = append(in.Messages, Message{Role: m.Role, Content: m.Content})
	}
	return in, v.BOS, v.EOS
}
