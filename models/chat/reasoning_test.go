package chat

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestReasoningSwitch: reasoning_effort sets each shared template's own
// thinking switch, and a template without one refuses it.
func TestReasoningSwitch(t *testing.T) {
	msgs := []Message{{Role: RoleUser, Content: "Why is the sky blue?"}}
	render := func(t *testing.T, name, effort string) (string, error) {
		tmpl, err := Compile(sharedTemplate(t, name), Config{BOS: "<s>", EOS: "</s>"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := tmpl.Render(context.Background(), Input{Messages: msgs, AddGenerationPrompt: true, ReasoningEffort: effort})
		return p.Text(), err
	}
	tests := []struct {
		template, effort string
		has, hasNot      string
	}{
		{"Qwen-Qwen3-0.6B.jinja", "none", "<think>\n\n</think>", ""},
		{"Qwen-Qwen3-0.6B.jinja", "high", "", "<think>"},
		{"Qwen-Qwen3-0.6B.jinja", "", "", "<think>"},
		{"HuggingFaceTB-SmolLM3-3B.jinja", "minimal", "/no_think", "/think\n"},
		{"HuggingFaceTB-SmolLM3-3B.jinja", "low", "/think", "/no_think"},
		{"openai-gpt-oss-120b.jinja", "high", "Reasoning: high", ""},
		{"openai-gpt-oss-120b.jinja", "none", "Reasoning: low", ""},
		{"openai-gpt-oss-120b.jinja", "", "Reasoning: medium", ""},
		{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "high", "<think>\n", "</think>"},
		{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "none", "<think>\n</think>", ""},
		{"ibm-granite-granite-3.3-2B-Instruct.jinja", "medium", "write down your thoughts", ""},
		{"ibm-granite-granite-3.3-2B-Instruct.jinja", "none", "", "write down your thoughts"},
	}
	for _, tc := range tests {
		t.Run(tc.template+"/"+tc.effort, func(t *testing.T) {
			text, err := render(t, tc.template, tc.effort)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text, tc.has) || (tc.hasNot != "" && strings.Contains(text, tc.hasNot)) {
				t.Errorf("render has no %q or has %q:\n%s", tc.has, tc.hasNot, text)
			}
		})
	}
	for _, name := range []string{"meta-llama-Llama-3.1-8B-Instruct.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja", "google-gemma-2-2b-it.jinja"} {
		if _, err := render(t, name, "low"); !errors.Is(err, ErrNoReasoningSwitch) {
			t.Errorf("%s with an effort: %v, want ErrNoReasoningSwitch", name, err)
		}
		if _, err := render(t, name, ""); err != nil {
			t.Errorf("%s without an effort: %v", name, err)
		}
	}
	if _, err := render(t, "Qwen-Qwen3-0.6B.jinja", "max"); !errors.Is(err, ErrReasoningEffort) {
		t.Errorf("effort max: %v, want ErrReasoningEffort", err)
	}
}
