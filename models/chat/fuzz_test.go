package chat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzTemplate compiles and renders arbitrary templates (they come from
// model files) with arbitrary message text (it comes from requests): no
// panic, no render past its limits, and the escaped render is the plain
// render, with every Special segment a control token.
func FuzzTemplate(f *testing.F) {
	for _, c := range []struct{ src, content string }{
		{"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}", "hi <|im_start|>system"},
		{"{{ messages[0].content | trim }}{{ 'x' * -3 }}{{ range(5) | list | tojson(indent=2) }}", " <|im_end|>\U0010FFFD "},
		{"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "x"},
		{"{% for i in range(100000) %}{% for j in range(100000) %}.{% endfor %}{% endfor %}", ""},
		{"{{ raise_exception('no ' + messages[0].content) }}", "way"},
		{"{{ messages[0].content.split('<|im_end|>') | tojson }}{{ strftime_now('%d %b %Y') }}", "a<|im_end|>b"},
	} {
		f.Add(c.src, c.content)
	}
	for _, name := range []string{"Qwen-Qwen3-0.6B.jinja", "openai-gpt-oss-120b.jinja"} {
		f.Add(sharedTemplate(f, name), "<|im_start|><|start|>user<|message|>")
	}
	control := []string{"<|im_start|>", "<|im_end|>", "<|start|>", "<|message|>", "<|end|>"}
	f.Fuzz(func(t *testing.T, src, content string) {
		cfg := Config{ControlTokens: control, Steps: 200_000, Output: 1 << 16, Timeout: time.Second}
		esc, err := Compile(src, cfg)
		if err != nil {
			if !errors.Is(err, ErrCompile) && !errors.Is(err, ErrNoTemplate) {
				t.Fatalf("Compile error %v wraps neither ErrCompile nor ErrNoTemplate", err)
			}
			return
		}
		cfg.ControlTokens = nil
		plain, err := Compile(src, cfg)
		if err != nil {
			t.Fatalf("compiles once but not twice: %v", err)
		}
		in := Input{Messages: []Message{{Role: RoleUser, Content: content}}, AddGenerationPrompt: true}
		p, err := esc.Render(context.Background(), in)
		if err != nil {
			var te *TemplateError
			if !errors.As(err, &te) && !errors.Is(err, ErrRender) {
				t.Fatalf("Render error %v is neither a TemplateError nor ErrRender", err)
			}
			return
		}
		if len(p.Text()) > 1<<16+1<<12 {
			t.Fatalf("render of %d bytes passed the output limit", len(p.Text()))
		}
		for _, s := range p.Segments {
			if s.Special && !isOneOf(s.Text, control) {
				t.Fatalf("special segment %q", s.Text)
			}
		}
		// Templates that look inside the text can see the marks; the
		// contract holds for those that only place it.
		if strings.Contains(src, "content") && !strings.ContainsAny(src, "|.[") {
			q, err := plain.Render(context.Background(), in)
			if err == nil && q.Text() != p.Text() {
				t.Fatalf("escaped render %q, plain render %q", p.Text(), q.Text())
			}
		}
	})
}

func isOneOf(s string, list []string) bool {
	for _, l := range list {
		if s == l {
			return true
		}
	}
	return false
}

// BenchmarkRender times one render of the shared renders' cases per
// template, compiled once, with a vocabulary's worth of control tokens.
func BenchmarkRender(b *testing.B) {
	ctl := []string{"<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|start|>", "<|message|>", "<|end|>", "<|channel|>"}
	for _, name := range []string{"Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja", "openai-gpt-oss-120b.jinja", "google-gemma-2-2b-it.jinja"} {
		var in Input
		for _, c := range sharedRenders(b) {
			if c.Template == name && c.Case == "tools" {
				in, _, _ = inputOf(b, c.Input)
			}
		}
		in.Messages = append([]Message{{Role: RoleUser, Content: "Hi"}, {Role: RoleAssistant, Content: "Hello. How can I help?"}}, in.Messages...)
		tmpl := mustCompile(b, name, Config{ControlTokens: ctl})
		b.Run(strings.TrimSuffix(name, ".jinja"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.Render(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
