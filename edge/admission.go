package edge

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/chat"
	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
	"github.com/bulkhead-ai/bulkhead/models/toolcall"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// PropTrustContent is the catalog property that turns the control-token
// protection off for one model ("true"): message text may then hold the
// model's control tokens, as before chat templates were rendered by origin.
// It exists for compatibility with clients that wrote control tokens into
// messages on purpose; see docs/chat.md.
const PropTrustContent = "chat_trust_content"

// trustContent reads a model's PropTrustContent.
func trustContent(m *catalog.Model) bool { return m.Properties[PropTrustContent] == "true" }

// vocab is what admission needs of one model beyond its catalog entry: the
// tokenizer the worker uses and the chat template from the same GGUF file.
type vocab struct {
	tok     *tokenizer.Tokenizer
	tmpl    *chat.Template  // nil: the plain "role: content" fallback
	tools   toolcall.Format // how the model writes tool calls; toolcall.None without
	control map[int32]bool  // control tokens a tool-call format reads (see frameText)
	created int64           // the model file's modification time (Unix), for /v1/models
}

// loadVocab reads a model file's tokenizer metadata (no tensor data) and
// compiles its chat template. trust turns off the control-token protection
// (PropTrustContent).
func loadVocab(log *slog.Logger, name, path string, trust bool) (*vocab, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: model %q: %w", ErrConfig, name, err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%w: model %q: %w", ErrConfig, name, err)
	}
	v := &vocab{tok: tok}
	if st, err := os.Stat(path); err == nil {
		v.created = st.ModTime().Unix()
	}
	src := tok.ChatTemplate()
	if tok.Model() == "bert" || tok.Model() == "t5" {
		return v, nil // an encoder's vocabulary: no conversation to render
	}
	if strings.TrimSpace(src) == "" {
		log.Warn("edge: model file has no chat template; messages are rendered as plain \"role: content\" lines",
			"model", name)
		return v, nil
	}
	tmpl, err := chat.Compile(src, chat.Config{
		BOS:           tok.Piece(tok.BOS()),
		EOS:           tok.Piece(tok.EOS()),
		ControlTokens: tok.ControlTokens(),
		TrustContent:  trust,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: model %q: %w", ErrConfig, name, err)
	}
	if err := tmpl.Probe(context.Background(), DefaultMaxBodyBytes); err != nil {
		log.Warn("edge: the chat template cannot render the largest conversation a request carries within its render limits; such requests will be refused",
			"model", name, "err", err)
	}
	v.tmpl = tmpl
	v.tools = toolcall.Detect(src)
	v.control = map[int32]bool{}
	for _, text := range v.tools.ControlTokens() {
		// Only tokens the detokenizer drops; user-defined ones (Qwen's
		// <tool_call>) are in the frames' text already.
		if id, ok := tok.TokenID(text); ok && tok.IsControl(id) {
			v.control[id] = true
		}
	}
	log.Info("edge: chat template compiled", "model", name, "tool_calls", v.tools.String(), "trust_content", trust)
	return v, nil
}

// admitted is a request's final prompt as the worker will see it, and its
// token count under the worker's tokenization (EncodeSegments(segments,
// addBOS) for a rendered conversation, Encode(prompt, addBOS, parseSpecial)
// otherwise).
type admitted struct {
	prompt       string
	segments     []queue.Segment // a rendered conversation; prompt is their text
	addBOS       bool
	parseSpecial bool
	tokens       int
	maxTokens    int
}

// render builds the prompt. Raw prompts are used as-is and may contain the
// model's special tokens written out (Workers AI's raw mode: the caller
// writes the template). Conversations go through the model's chat template:
// only the template's own control tokens are parsed, never text from the
// request. BOS is added when the tokenizer asks for it and the template did
// not write it. A model without a template gets "role: content" lines
// ending with "assistant:", tokenized as plain text.
func (v *vocab) render(ctx context.Context, in *genInput) (admitted, error) {
	if in.reasoningEffort != "" && (in.raw || v.tmpl == nil) {
		return admitted{}, fmt.Errorf("%w (the model renders no chat template here)", chat.ErrNoReasoningSwitch)
	}
	if in.raw {
		return admitted{prompt: in.prompt, addBOS: true, parseSpecial: true}, nil
	}
	if v.tmpl != nil {
		now := in.now
		if now.IsZero() {
			now = time.Now()
		}
		now = now.UTC() // strftime_now writes UTC dates and times
		p, err := v.tmpl.Render(ctx, chat.Input{
			Messages:            in.messages,
			Tools:               in.templateTools(),
			AddGenerationPrompt: true,
			Now:                 now,
			ReasoningEffort:     in.reasoningEffort,
		})
		if err != nil {
			return admitted{}, err
		}
		a := admitted{segments: make([]queue.Segment, len(p.Segments))}
		for i, s := range p.Segments {
			a.segments[i] = queue.Segment{Text: s.Text, Special: s.Special}
		}
		a.prompt = queue.SegmentText(a.segments)
		bos := v.tok.Piece(v.tok.BOS())
		a.addBOS = !(bos != "" && len(p.Segments) > 0 && p.Segments[0].Special && strings.HasPrefix(p.Segments[0].Text, bos))
		return a, nil
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

// encode tokenizes an admitted prompt as the worker will.
func (v *vocab) encode(a admitted) []int32 {
	if len(a.segments) == 0 {
		return v.tok.Encode(a.prompt, a.addBOS, a.parseSpecial)
	}
	segs := make([]tokenizer.Segment, len(a.segments))
	for i, s := range a.segments {
		segs[i] = tokenizer.Segment{Text: s.Text, Special: s.Special}
	}
	return v.tok.EncodeSegments(segs, a.addBOS)
}

// renderSlots bounds the renders and tokenizations running at once in this
// process. Both are CPU work: more of them than cores only adds the memory
// each holds (a render's is bounded by chat.DefaultMemory), so the edge's
// memory for admission is at most slots times that, whatever the number of
// requests.
var renderSlots = newSlots(max(2, min(runtime.GOMAXPROCS(0), 8)))

// slots is a counting semaphore whose wait ends with its context.
type slots chan struct{}

func newSlots(n int) slots { return make(slots, n) }

func (s slots) acquire(ctx context.Context) (release func(), err error) {
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// checkLogitBias refuses a logit_bias naming a token outside the model's
// vocabulary, or banning every token of it.
func (v *vocab) checkLogitBias(bias []queue.TokenBias) error {
	n, bans := v.tok.VocabSize(), 0
	for _, b := range bias {
		if int(b.Token) >= n {
			return &InputError{Field: "logit_bias", Msg: fmt.Sprintf("token %d is not in the model's vocabulary of %d tokens", b.Token, n)}
		}
		if b.Bias <= -100 {
			bans++
		}
	}
	if n > 0 && bans == n {
		return &InputError{Field: "logit_bias", Msg: "bans every token of the model's vocabulary"}
	}
	return nil
}

// admit renders and tokenizes the prompt and checks it against the context
// window. defaultMax is used when the request gave no max_tokens; a negative
// defaultMax, -n, means n or the rest of the window, whichever is less (the
// OpenAI API's default, bounded: see PropDefaultMaxTokens).
func (v *vocab) admit(ctx context.Context, in *genInput, window, defaultMax int) (admitted, error) {
	if err := v.checkLogitBias(in.logitBias); err != nil {
		return admitted{}, err
	}
	release, err := renderSlots.acquire(ctx)
	if err != nil {
		return admitted{}, err
	}
	defer release()
	a, err := v.render(ctx, in)
	if err != nil {
		return admitted{}, err
	}
	a.tokens = len(v.encode(a))
	if a.tokens == 0 {
		return admitted{}, &InputError{Field: "prompt", Msg: "encodes to no tokens"}
	}
	a.maxTokens = in.maxTokens
	if a.maxTokens == 0 {
		a.maxTokens = defaultMax
		if defaultMax < 0 {
			a.maxTokens = max(min(-defaultMax, window-a.tokens), 1)
		}
	}
	if a.tokens+a.maxTokens > window {
		return admitted{}, &LengthError{PromptTokens: a.tokens, MaxTokens: a.maxTokens, Context: window}
	}
	return a, nil
}
