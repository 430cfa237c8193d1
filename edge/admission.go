package edge

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/chat"
	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
)

// vocab is what admission needs of one model beyond its catalog entry: the
// tokenizer the worker uses and the chat template from the same GGUF file.
type vocab struct {
	tok     *tokenizer.Tokenizer
	tmpl    chat.Template
	hasTmpl bool  // false: the plain "role: content" fallback
	created int64 // the model file's modification time (Unix), for /v1/models
}

// loadVocab reads a model file's tokenizer metadata (no tensor data).
func loadVocab(log *slog.Logger, name, path string) (*vocab, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: model %q: %w", ErrInvalidConfig, name, err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%w: model %q: %w", ErrInvalidConfig, name, err)
	}
	v := &vocab{tok: tok}
	if st, err := os.Stat(path); err == nil {
		v.created = st.ModTime().Unix()
	}
	tmpl, err := chat.Detect(tok.ChatTemplate())
	if err == nil {
		v.tmpl, v.hasTmpl = tmpl, true
		log.Info("edge: chat template", "model", name, "template", tmpl.Name())
	} else {
		log.Warn("edge: model has no supported chat template; messages are rendered as plain \"role: content\" lines",
			"model", name)
	}
	return v, nil
}

// admitted is a request's final prompt as the worker will see it, and its
// token count under the worker's tokenization (Encode(prompt, addBOS,
// parseSpecial)).
type admitted struct {
	prompt       string
	addBOS       bool
	parseSpecial bool
	tokens       int
	maxTokens    int
}

// render builds the prompt text. Raw prompts are used as-is and may contain
// the model's special tokens written out (Workers AI's raw mode: the caller
// writes the template). Conversations go through the model's chat template,
// whose special tokens are parsed; a model without a supported template gets
// "role: content" lines ending with "assistant:", tokenized as plain text.
func (v *vocab) render(in *genInput) (admitted, error) {
	if in.raw {
		return admitted{prompt: in.prompt, addBOS: true, parseSpecial: true}, nil
	}
	if v.hasTmpl {
		text, err := v.tmpl.Render(in.messages, true)
		if err != nil {
			return admitted{}, err
		}
		return admitted{prompt: text, addBOS: !v.tmpl.AddsBOS(), parseSpecial: true}, nil
	}
	var b strings.Builder
	for _, m := range in.messages {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	b.WriteString(chat.RoleAssistant + ":")
	return admitted{prompt: b.String(), addBOS: true}, nil
}

// admit renders and tokenizes the prompt and checks it against the context
// window. defaultMax is used when the request gave no max_tokens; a negative
// defaultMax means "the rest of the window" (OpenAI's default).
func (v *vocab) admit(in *genInput, window, defaultMax int) (admitted, error) {
	a, err := v.render(in)
	if err != nil {
		return admitted{}, err
	}
	a.tokens = len(v.tok.Encode(a.prompt, a.addBOS, a.parseSpecial))
	if a.tokens == 0 {
		return admitted{}, &InputError{Field: "prompt", Msg: "encodes to no tokens"}
	}
	a.maxTokens = in.maxTokens
	if a.maxTokens == 0 {
		a.maxTokens = defaultMax
		if defaultMax < 0 {
			a.maxTokens = max(window-a.tokens, 1)
		}
	}
	if a.tokens+a.maxTokens > window {
		return admitted{}, &LengthError{PromptTokens: a.tokens, MaxTokens: a.maxTokens, Context: window}
	}
	return a, nil
}
