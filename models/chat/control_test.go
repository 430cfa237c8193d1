package chat_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/chat"
	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
)

// vocabOf names, for each shared template, the shared vocabulary closest to
// its model's (the tiny arch files carry their family's real vocabulary).
var vocabOf = map[string]string{
	"meta-llama-Llama-3.2-3B-Instruct.jinja":            "tokenizer/ggml-vocab-llama-bpe.gguf",
	"meta-llama-Llama-3.1-8B-Instruct.jinja":            "tokenizer/ggml-vocab-llama-bpe.gguf",
	"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "tokenizer/ggml-vocab-llama-bpe.gguf",
	"Qwen-Qwen2.5-7B-Instruct.jinja":                    "tokenizer/ggml-vocab-qwen2.gguf",
	"Qwen-Qwen3-0.6B.jinja":                             "tokenizer/ggml-vocab-qwen2.gguf",
	"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja":    "tokenizer/ggml-vocab-qwen2.gguf",
	"HuggingFaceTB-SmolLM3-3B.jinja":                    "tokenizer/ggml-vocab-qwen2.gguf",
	"google-gemma-2-2b-it.jinja":                        "models/archs/gemma2-tiny-f32.gguf",
	"microsoft-Phi-3.5-mini-instruct.jinja":             "models/archs/phi3-tiny-f16.gguf",
	"mistralai-Mistral-Nemo-Instruct-2407.jinja":        "tokenizer/ggml-vocab-llama-spm.gguf",
	"ibm-granite-granite-3.3-2B-Instruct.jinja":         "tokenizer/ggml-vocab-gpt-2.gguf",
	"openai-gpt-oss-120b.jinja":                         "tokenizer/ggml-vocab-gpt-2.gguf",
}

// markup finds control-token-looking text in a template's source.
var markup = regexp.MustCompile(`<\|[A-Za-z0-9_]+\|>|<(?:start|end)_of_[a-z]+>|</?s>|<bos>|<eos>|\[/?[A-Z_]{3,}\]|<｜[^｜]{1,40}｜>`)

func loadTokenizer(t *testing.T, rel string) *tokenizer.Tokenizer {
	t.Helper()
	f, err := gguf.Open(refdatatest.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func countControl(tok *tokenizer.Tokenizer, ids []int32, ctl map[string]bool) int {
	n := 0
	for _, id := range ids {
		if ctl[tok.Piece(id)] {
			n++
		}
	}
	return n
}

func toTokSegs(p chat.Prompt) []tokenizer.Segment {
	segs := make([]tokenizer.Segment, len(p.Segments))
	for i, s := range p.Segments {
		segs[i] = tokenizer.Segment{Text: s.Text, Special: s.Special}
	}
	return segs
}

// TestControlTokenTextIsText: a user message holding every control-token
// text of a shared template (and of its vocabulary's control tokens that the
// template writes) renders to the same text transformers renders, and
// tokenizes to exactly as many control tokens as an innocent message does:
// none of them comes from the user's text.
func TestControlTokenTextIsText(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	for name, vocab := range vocabOf {
		t.Run(strings.TrimSuffix(name, ".jinja"), func(t *testing.T) {
			src := sharedTemplate(t, name)
			tok := loadTokenizer(t, vocab)
			ctlList := tok.ControlTokens()
			ctl := map[string]bool{}
			for _, c := range ctlList {
				ctl[c] = true
			}
			cfg := chat.Config{BOS: tok.Piece(tok.BOS()), EOS: tok.Piece(tok.EOS()), ControlTokens: ctlList}
			tmpl, err := chat.Compile(src, cfg)
			if err != nil {
				t.Fatal(err)
			}
			innocent := chat.Input{Messages: []chat.Message{{Role: chat.RoleUser, Content: "Hello there"}}, AddGenerationPrompt: true, Now: now}
			p0, err := tmpl.Render(ctx, innocent)
			if err != nil {
				t.Fatal(err)
			}
			written := markup.FindAllString(src, -1)
			for _, c := range ctlList {
				if strings.Contains(p0.Text(), c) {
					written = append(written, c)
				}
			}
			slices.Sort(written)
			written = slices.Compact(written)
			hostile := "Hello " + strings.Join(written, " ") + " there " + strings.Join(written, "") + "system\n"
			in := innocent
			in.Messages = []chat.Message{{Role: chat.RoleUser, Content: hostile}}
			p1, err := tmpl.Render(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			// The text is what transformers renders (nothing escaped).
			plain, err := chat.Compile(src, chat.Config{BOS: cfg.BOS, EOS: cfg.EOS})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := plain.Render(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if p1.Text() != ref.Text() {
				t.Fatalf("escaped render differs from the plain one:\n%q\n%q", p1.Text(), ref.Text())
			}
			for _, s := range p1.Segments {
				if s.Special && !ctl[s.Text] {
					t.Fatalf("special segment %q is no control token", s.Text)
				}
			}
			n0 := countControl(tok, tok.EncodeSegments(toTokSegs(p0), false), ctl)
			ids := tok.EncodeSegments(toTokSegs(p1), false)
			if n1 := countControl(tok, ids, ctl); n1 != n0 {
				t.Fatalf("hostile message gave %d control tokens, an innocent one %d", n1, n0)
			}
			// Whatever the template wrote still tokenizes as with parsing
			// on: the innocent prompt is Encode(text, parseSpecial).
			if got, want := tok.EncodeSegments(toTokSegs(p0), false), tok.Encode(p0.Text(), false, true); !slices.Equal(got, want) {
				t.Fatalf("innocent prompt: segments give %v, Encode %v", got, want)
			}
			hit := 0
			for _, w := range written {
				if ctl[w] {
					hit++
				}
			}
			t.Logf("%s: %d control-token texts in the message, %d of them control tokens of %s; %d template control tokens",
				name, len(written), hit, vocab, n0)
		})
	}
}

func sharedTemplate(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(refdatatest.Path(t, "chat/templates/"+name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
