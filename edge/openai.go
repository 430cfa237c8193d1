package edge

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/toolcall"
)

// OpenAI response shapes.
type openAIUsage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
	// CompletionTokensDetails is sent for a request with a prediction.
	CompletionTokensDetails *completionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// completionTokensDetails is OpenAI's breakdown of a predicted output's
// tokens: of the prediction, those the completion kept and the rest.
type completionTokensDetails struct {
	AcceptedPredictionTokens int `json:"accepted_prediction_tokens"`
	RejectedPredictionTokens int `json:"rejected_prediction_tokens"`
}

func usageOf(res *result) *openAIUsage {
	u := &openAIUsage{
		PromptTokens:        res.usage.PromptTokens,
		CompletionTokens:    res.usage.CompletionTokens,
		TotalTokens:         res.usage.PromptTokens + res.usage.CompletionTokens,
		PromptTokensDetails: cachedDetails(res.usage.CachedTokens),
	}
	if res.usage.AcceptedPrediction > 0 || res.usage.RejectedPrediction > 0 {
		u.CompletionTokensDetails = &completionTokensDetails{res.usage.AcceptedPrediction, res.usage.RejectedPrediction}
	}
	return u
}

// chatMessage is an answer's message. Content is null only when the answer
// is tool calls and nothing else.
type chatMessage struct {
	Role      string           `json:"role"`
	Content   *string          `json:"content"`
	ToolCalls []openAIToolCall `json:"tool_calls,omitempty"`
}

// openAIToolCall is one call; Arguments is the JSON object as a string. In
// a stream's delta it also carries its Index.
type openAIToolCall struct {
	Index    *int               `json:"index,omitempty"`
	ID       string             `json:"id"`
	Type     string             `json:"type"`
	Function openAIFunctionCall `json:"function"`
}

type openAIFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

func toOpenAICall(c toolcall.Call) openAIToolCall {
	return openAIToolCall{ID: c.ID, Type: "function", Function: openAIFunctionCall{Name: c.Name, Arguments: c.Arguments}}
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	// Seed is the choice's sampling seed when the request asked for
	// several (n): a request with n 1 and this seed samples the same.
	Seed *uint64 `json:"seed,omitempty"`
}

// openAIHead begins every OpenAI answer and chunk.
type openAIHead struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

// head is res's openAIHead: its id (after prefix), object type, time and
// model.
func head(res *result, prefix, object string) openAIHead {
	return openAIHead{ID: prefix + res.id, Object: object, Created: res.created, Model: res.model}
}

type chatCompletion struct {
	openAIHead
	Choices []chatChoice `json:"choices"`
	Usage   *openAIUsage `json:"usage"`
}

// seedOf is the seed a choice reports: only with several choices.
func seedOf(res *result) *uint64 { return res.seed }

type chatDelta struct {
	Role      string           `json:"role,omitempty"`
	Content   *string          `json:"content,omitempty"`
	ToolCalls []openAIToolCall `json:"tool_calls,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	Seed         *uint64   `json:"seed,omitempty"` // on a choice's last chunk, with several choices
}

type chatChunk struct {
	openAIHead
	Choices []chunkChoice `json:"choices"`
	// Usage is omitted unless stream_options.include_usage asked for it;
	// then it is null on every chunk but the last, which carries it.
	Usage any `json:"usage,omitempty"`
}

type textChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	Seed         *uint64 `json:"seed,omitempty"` // with several choices (chatChoice.Seed)
}

type textCompletion struct {
	openAIHead
	Choices []textChoice `json:"choices"`
	Usage   any          `json:"usage,omitempty"`
}

var jsonNull = json.RawMessage("null")

func ptr[T any](v T) *T { return &v }

// chatFormat renders /v1/chat/completions answers and chunks.
type chatFormat struct{ includeUsage bool }

func (chatFormat) writeError(w http.ResponseWriter, e *Error) { writeOpenAIError(w, e) }

func (f chatFormat) writeResult(w http.ResponseWriter, res *result) {
	c, _ := f.choice(res)
	f.writeChoices(w, res, []any{c})
}

var _ choicesFormat = chatFormat{}

func (chatFormat) choice(res *result) (any, error) {
	return chatChoice{Index: res.index, Message: chatMessage{Role: "assistant", Content: &res.text},
		Logprobs: res.chatLogprobs(false), FinishReason: res.finish, Seed: seedOf(res)}, nil
}

func (chatFormat) writeChoices(w http.ResponseWriter, res *result, choices []any) {
	cs := make([]chatChoice, len(choices))
	for i, c := range choices {
		cs[i] = c.(chatChoice)
	}
	writeJSON(w, http.StatusOK, chatCompletion{openAIHead: head(res, "chatcmpl-", "chat.completion"), Choices: cs, Usage: usageOf(res)})
}

var _ toolChoicesAPI = chatFormat{}

// writeToolResult answers with the text and the calls parsed from it.
func (f chatFormat) writeToolResult(w http.ResponseWriter, res *result, content string, calls []toolcall.Call) {
	f.writeChoices(w, res, []any{f.toolChoice(res, content, calls)})
}

// toolChoice is res as a choice whose message is content and calls.
func (chatFormat) toolChoice(res *result, content string, calls []toolcall.Call) any {
	msg := chatMessage{Role: "assistant", Content: &content}
	if len(calls) > 0 && strings.TrimSpace(content) == "" {
		msg.Content = nil
	}
	for _, c := range calls {
		msg.ToolCalls = append(msg.ToolCalls, toOpenAICall(c))
	}
	return chatChoice{Index: res.index, Message: msg, Logprobs: res.chatLogprobs(false), FinishReason: res.finish, Seed: seedOf(res)}
}

// streamCall sends one whole call as one tool_calls delta.
func (f chatFormat) streamCall(sw *sse, res *result, index int, c toolcall.Call) error {
	tc := toOpenAICall(c)
	tc.Index = &index
	return sw.json("", f.chunk(res, chatDelta{ToolCalls: []openAIToolCall{tc}}, nil))
}

func (f chatFormat) chunk(res *result, d chatDelta, finish *string) chatChunk {
	c := chatChunk{
		openAIHead: head(res, "chatcmpl-", "chat.completion.chunk"),
		Choices:    []chunkChoice{{Index: res.index, Delta: d, FinishReason: finish}},
	}
	if f.includeUsage {
		c.Usage = jsonNull
	}
	return c
}

func (f chatFormat) streamBegin(sw *sse, res *result) error {
	return sw.json("", f.chunk(res, chatDelta{Role: "assistant", Content: ptr("")}, nil))
}

func (f chatFormat) streamText(sw *sse, res *result, text string) error {
	c := f.chunk(res, chatDelta{Content: &text}, nil)
	c.Choices[0].Logprobs = res.chatLogprobs(true)
	return sw.json("", c)
}

func (f chatFormat) streamEnd(sw *sse, res *result) error {
	if err := f.streamFinish(sw, res); err != nil {
		return err
	}
	return f.streamClose(sw, res)
}

func (f chatFormat) streamFinish(sw *sse, res *result) error {
	end := f.chunk(res, chatDelta{}, ptr(res.finish))
	end.Choices[0].Logprobs = res.chatLogprobs(true)
	end.Choices[0].Seed = seedOf(res)
	return sw.json("", end)
}

func (f chatFormat) streamClose(sw *sse, res *result) error {
	if f.includeUsage {
		last := f.chunk(res, chatDelta{}, nil)
		last.Choices = []chunkChoice{}
		last.Usage = usageOf(res)
		if err := sw.json("", last); err != nil {
			return err
		}
	}
	return sw.done()
}

func (chatFormat) streamError(sw *sse, e *Error) error { return sw.json("error", e.openAI()) }

// completionFormat renders /v1/completions answers and chunks.
type completionFormat struct{ includeUsage bool }

func (completionFormat) writeError(w http.ResponseWriter, e *Error) { writeOpenAIError(w, e) }

func (f completionFormat) writeResult(w http.ResponseWriter, res *result) {
	c, _ := f.choice(res)
	f.writeChoices(w, res, []any{c})
}

var _ choicesFormat = completionFormat{}

func (completionFormat) choice(res *result) (any, error) {
	return textChoice{Text: res.text, Index: res.index, Logprobs: res.textLogprobs(false), FinishReason: ptr(res.finish), Seed: seedOf(res)}, nil
}

func (completionFormat) writeChoices(w http.ResponseWriter, res *result, choices []any) {
	cs := make([]textChoice, len(choices))
	for i, c := range choices {
		cs[i] = c.(textChoice)
	}
	writeJSON(w, http.StatusOK, textCompletion{openAIHead: head(res, "cmpl-", "text_completion"), Choices: cs, Usage: usageOf(res)})
}

func (f completionFormat) chunk(res *result, text string, finish *string) textCompletion {
	c := textCompletion{
		openAIHead: head(res, "cmpl-", "text_completion"),
		Choices:    []textChoice{{Text: text, Index: res.index, FinishReason: finish}},
	}
	if f.includeUsage {
		c.Usage = jsonNull
	}
	return c
}

func (completionFormat) streamBegin(*sse, *result) error { return nil }

func (f completionFormat) streamText(sw *sse, res *result, text string) error {
	c := f.chunk(res, text, nil)
	c.Choices[0].Logprobs = res.textLogprobs(true)
	return sw.json("", c)
}

func (f completionFormat) streamEnd(sw *sse, res *result) error {
	if err := f.streamFinish(sw, res); err != nil {
		return err
	}
	return f.streamClose(sw, res)
}

func (f completionFormat) streamFinish(sw *sse, res *result) error {
	end := f.chunk(res, "", ptr(res.finish))
	end.Choices[0].Logprobs = res.textLogprobs(true)
	end.Choices[0].Seed = seedOf(res)
	return sw.json("", end)
}

func (f completionFormat) streamClose(sw *sse, res *result) error {
	if f.includeUsage {
		last := f.chunk(res, "", nil)
		last.Choices = []textChoice{}
		last.Usage = usageOf(res)
		if err := sw.json("", last); err != nil {
			return err
		}
	}
	return sw.done()
}

func (completionFormat) streamError(sw *sse, e *Error) error { return sw.json("error", e.openAI()) }

// handleChat serves POST /v1/chat/completions.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	s.openAIRun(w, r, &req, func() (string, *genInput, error) { return chatInput(&req) },
		func(in *genInput, v *vocab) format {
			return withTools(chatFormat{includeUsage: in.includeUsage}, v, in)
		})
}

// handleCompletions serves POST /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	s.openAIRun(w, r, &req, func() (string, *genInput, error) { return completionInput(&req) },
		func(in *genInput, _ *vocab) format { return completionFormat{includeUsage: in.includeUsage} })
}

// openAIRun is the flow both OpenAI generation routes share. Without
// max_tokens a request may use the rest of the context window, as OpenAI's
// API does.
func (s *Server) openAIRun(w http.ResponseWriter, r *http.Request, body any,
	validate func() (string, *genInput, error), formatFor func(*genInput, *vocab) format) {
	p, err := s.authenticate(r, auth.ScopeRun)
	if err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), body); err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	name, in, err := validate()
	if err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	m, v, err := s.lookupModel(p, s.baseModel(name, in))
	if err == nil {
		err = encoderTask(m, catalog.TaskTextGeneration, "use /v1/embeddings for embeddings")
	}
	if err == nil {
		err = s.resolveLoRA(r.Context(), p, m, in)
	}
	if err == nil {
		err = checkChoices(in, formatFor(in, v))
	}
	if err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	c := call{p: p, m: m, v: v, in: in, defaultMax: -s.defaultMaxTokens(m), f: formatFor(in, v)}
	if in.n <= 1 {
		s.generate(w, r, c)
		return
	}
	formats := make([]choicesFormat, in.n)
	for i := range formats {
		formats[i] = formatFor(in, v).(choicesFormat) // checkChoices: every one is; each a new one
	}
	s.generateChoices(w, r, c, formats)
}

// baseModel reads OpenAI's model "<base>:<finetune>": a name the catalog
// does not hold whose part before its last colon it does is that base
// model, the rest naming one of the caller's finetunes (in.lora, unless
// the body's lora names one; then both must agree, else the name is left
// whole and refused as unknown).
func (s *Server) baseModel(name string, in *genInput) string {
	if _, ok := s.cfg.Catalog.Lookup(name); ok {
		return name
	}
	i := strings.LastIndexByte(name, ':')
	if i <= 0 || i == len(name)-1 {
		return name
	}
	base, ft := name[:i], name[i+1:]
	if _, ok := s.cfg.Catalog.Lookup(base); !ok || in.lora != "" && in.lora != ft {
		return name
	}
	in.lora = ft
	return base
}

type openAIModel struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Created       int64  `json:"created"`
	OwnedBy       string `json:"owned_by"`
	ContextWindow int    `json:"context_window"`
	MaxModelLen   int    `json:"max_model_len"`
}

type modelList struct {
	Object string        `json:"object"`
	Data   []openAIModel `json:"data"`
}

// handleModels serves GET /v1/models: the catalog models the token may use.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r, auth.ScopeRead, auth.ScopeRun)
	if err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	out := modelList{Object: "list", Data: []openAIModel{}}
	for _, m := range s.cfg.Catalog.Models() {
		if !p.AllowsModel(m.Name) {
			continue
		}
		var created int64
		if v := s.vocabs[m.Name]; v != nil {
			created = v.created
		}
		out.Data = append(out.Data, openAIModel{
			ID: m.Name, Object: "model", Created: created, OwnedBy: "bulkhead",
			ContextWindow: m.ContextWindow, MaxModelLen: m.ContextWindow,
		})
	}
	writeJSON(w, http.StatusOK, out)
}
