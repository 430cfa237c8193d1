package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/chat"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Limits on request fields.
const (
	maxStopSequences = 4
	maxStopLen       = 256
)

// genInput is a decoded, validated generation request, whichever API it came
// from.
type genInput struct {
	prompt   string         // text; used as-is when raw
	messages []chat.Message // a conversation; rendered with the model's template
	raw      bool           // prompt bypasses the chat template
	now      time.Time      // arrival; the template's strftime_now

	tools      []json.RawMessage // tool definitions, OpenAI's shape
	toolChoice toolChoice

	stream       bool
	includeUsage bool // OpenAI stream_options.include_usage
	maxTokens    int  // 0: the API's default
	sampling     queue.Sampling
	stop         []string
	cachePrefix  bool // the request allows the tenant's prefix cache (the default; queue.Job.CachePrefix)
	rejectIfBusy bool // options.rejectIfBusy in the body (the ?rejectIfBusy=true query says it too)

	// grammar is response_format or a forced tool call (structured.go).
	grammar *queue.Grammar
	// logprobs asks for token logprobs, with topLogprobs alternatives
	// (logprobs.go).
	logprobs    bool
	topLogprobs int
	// logitBias is OpenAI's logit_bias, by token id (parseLogitBias);
	// admission checks the ids against the model's vocabulary.
	logitBias []queue.TokenBias
	// cacheKey is OpenAI's prompt_cache_key: the request's session for
	// routing (as the x-session-affinity header, which wins).
	cacheKey string
	// prediction is OpenAI's predicted output (queue.Job.Prediction).
	prediction string
	// noDraft is the body's speculate false (queue.Job.NoDraft).
	noDraft bool
	// metadata is the request's metadata (queue.Job.Metadata).
	metadata map[string]string
	// user is the request's end user (queue.Job.User).
	user string
	// singleCall is parallel_tool_calls false: an answer carries the
	// model's first tool call only (as vLLM does).
	singleCall bool
	// reasoningEffort is OpenAI's reasoning_effort, for the template's
	// thinking switch (chat.Input.ReasoningEffort).
	reasoningEffort string
	// n is OpenAI's n: the choices to sample (choices.go); 0 or 1 is one.
	n int
	// lora names one of the caller's finetunes of the model (the body's
	// lora, or OpenAI's model "<base>:<finetune>"); adapter is it once
	// resolved (resolveLoRA), for queue.Job.LoRA.
	lora    string
	adapter *queue.LoRARef
}

// nativeRequest is the Workers AI text-generation body. Unknown fields are
// ignored, as Workers AI does.
type nativeRequest struct {
	Prompt            *string         `json:"prompt"`
	Messages          []wireMessage   `json:"messages"`
	Raw               bool            `json:"raw"`
	Stream            bool            `json:"stream"`
	MaxTokens         *int            `json:"max_tokens"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	Seed              *int64          `json:"seed"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	Stop              json.RawMessage `json:"stop"`
	CachePrefix       *bool           `json:"cache_prefix"` // false opts out of the tenant's prefix cache
	Speculate         *bool           `json:"speculate"`    // false turns speculative decoding off (ours)
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ResponseFormat    json.RawMessage `json:"response_format"`
	Options           *requestOptions `json:"options"`
	// Lora names one of the caller's finetunes of the model, by name or
	// id (Workers AI's lora).
	Lora string `json:"lora"`

	// Async batch submission (?queueRequest=true) and polling.
	Requests  []json.RawMessage `json:"requests"`
	RequestID *string           `json:"request_id"`
	// Webhook, on an async batch, is where each job's end is announced
	// (webhook.go).
	Webhook *queue.Webhook `json:"webhook"`
	// EventSubject, on an async batch, is the tenant's event subject each
	// job's end is sent to on the bus (queue/events.go).
	EventSubject *string `json:"event_subject"`
}

// wireMessage is one chat turn as clients send it. Content is a string, or
// (OpenAI) an array of {"type":"text","text":...} parts. Assistant turns
// may carry tool calls (then content may be null), tool turns answer one.
type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// openAIRequest holds the fields OpenAI's chat and completion bodies share;
// both embed it, so they decode at the top level of the body.
type openAIRequest struct {
	Model            *string         `json:"model"`
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	N                *int            `json:"n"`
	// Lora names one of the caller's finetunes of the model (as the
	// native API's lora; also "model": "<base>:<finetune>").
	Lora             string             `json:"lora"`
	LogitBias        map[string]float64 `json:"logit_bias"`        // token id (decimal) → bias in [-100, 100]
	Metadata         map[string]string  `json:"metadata"`          // up to 16 pairs, carried into usage (queue.ValidateMetadata)
	PromptCacheKey   *string            `json:"prompt_cache_key"`  // routes like x-session-affinity
	User             *string            `json:"user"`              // the end user, carried into usage
	SafetyIdentifier *string            `json:"safety_identifier"` // OpenAI's newer name for user; wins
	CachePrefix      *bool              `json:"cache_prefix"`      // false opts out of the tenant's prefix cache (ours)
	Speculate        *bool              `json:"speculate"`         // false turns speculative decoding off (ours)
	ResponseFormat   json.RawMessage    `json:"response_format"`
	Prediction       *wirePrediction    `json:"prediction"` // predicted outputs: drafts for speculative decoding
	Options          *requestOptions    `json:"options"`    // Workers AI's, on its OpenAI-compatible endpoint too
}

// wirePrediction is OpenAI's prediction object: {"type": "content",
// "content": the expected output, a string or text parts}.
type wirePrediction struct {
	Type    string          `json:"type"`
	Content json.RawMessage `json:"content"`
}

// parsePrediction reads a prediction object's text.
func parsePrediction(p *wirePrediction) (string, error) {
	if p == nil {
		return "", nil
	}
	if p.Type != "content" {
		return "", &InputError{Field: "prediction.type", Msg: fmt.Sprintf("is %q; the only prediction type is \"content\"", p.Type)}
	}
	if len(p.Content) == 0 || string(p.Content) == "null" {
		return "", &InputError{Field: "prediction.content", Msg: "is required: the expected output, a string or an array of text parts"}
	}
	text, err := parseContent(p.Content)
	if err != nil {
		return "", &InputError{Field: "prediction.content", Msg: err.Error()}
	}
	return text, nil
}

// requestOptions is Workers AI's "options" object of a request body.
type requestOptions struct {
	// RejectIfBusy asks for 429 (3040) at once when no worker has room,
	// instead of waiting in the queue (Workers AI's options.rejectIfBusy).
	RejectIfBusy bool `json:"rejectIfBusy"`
}

// busy reports options.rejectIfBusy.
func (o *requestOptions) busy() bool { return o != nil && o.RejectIfBusy }

// chatRequest is OpenAI's /v1/chat/completions body.
type chatRequest struct {
	openAIRequest
	Messages            []wireMessage   `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"` // false: the answer keeps the model's first call only
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	ReasoningEffort     *string         `json:"reasoning_effort"` // the template's thinking switch (chat.Input.ReasoningEffort)
}

// completionRequest is OpenAI's /v1/completions body.
type completionRequest struct {
	openAIRequest
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"` // the legacy API's count of top alternatives (0 to 20)
}

// decodeJSON decodes exactly one JSON object from r into v. Malformed JSON,
// a value of the wrong type (named by field), an empty body and trailing data
// are *InputError; an over-long body is the reader's *http.MaxBytesError.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		return unembed(decodeError(err), v)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
		return nil
	case err == nil:
		return &InputError{Msg: "unexpected data after the JSON object"}
	default:
		return decodeError(err)
	}
}

// unembed drops from an *InputError's field the names of the structs v
// embeds (openAIRequest): the JSON decoder names the Go path of a promoted
// field, but the client sent it at the top level.
func unembed(err error, v any) error {
	var in *InputError
	if !errors.As(err, &in) || in.Field == "" {
		return err
	}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return err
	}
	for i := range t.NumField() {
		if f := t.Field(i); f.Anonymous {
			in.Field = strings.TrimPrefix(in.Field, f.Name+".")
		}
	}
	return err
}

// decodeRaw decodes one already-isolated JSON value (an element of an array).
func decodeRaw(b []byte, v any, prefix string) error {
	err := decodeJSON(bytes.NewReader(b), v)
	var in *InputError
	if errors.As(err, &in) {
		in.Field = joinField(prefix, in.Field)
	}
	return err
}

func joinField(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

func decodeError(err error) error {
	var (
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &mbe):
		return err
	case errors.Is(err, io.EOF):
		return &InputError{Msg: "request body is empty"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &InputError{Msg: "malformed JSON: unexpected end of input"}
	case errors.As(err, &se):
		return &InputError{Msg: fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))}
	case errors.As(err, &te):
		if te.Field == "" {
			return &InputError{Msg: fmt.Sprintf("the body must be a JSON object, not %s", te.Value)}
		}
		return &InputError{Field: te.Field, Msg: fmt.Sprintf("must be %s, not %s", typeName(te.Type), te.Value)}
	}
	return &InputError{Msg: "malformed JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
}

func typeName(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// checkFloat refuses an optional number outside [lo, hi] (or NaN), naming
// field; checkInt is the same for integers.
func checkFloat(field string, v *float64, lo, hi float64) error {
	if v == nil {
		return nil
	}
	if math.IsNaN(*v) || *v < lo || *v > hi {
		return &InputError{Field: field, Msg: fmt.Sprintf("must be between %g and %g, not %g", lo, hi, *v)}
	}
	return nil
}

func checkInt(field string, v *int, lo, hi int) error {
	if v == nil {
		return nil
	}
	if *v < lo || *v > hi {
		return &InputError{Field: field, Msg: fmt.Sprintf("must be between %d and %d, not %d", lo, hi, *v)}
	}
	return nil
}

func f32(v *float64) float32 {
	if v == nil {
		return 0
	}
	return float32(*v)
}

// parseStop reads "stop": absent, null, a string, or an array of strings.
func parseStop(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, &InputError{Field: "stop", Msg: "must be a string or an array of strings"}
		}
		list = []string{s}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, &InputError{Field: "stop", Msg: "must be a string or an array of strings"}
	}
	if len(list) > maxStopSequences {
		return nil, &InputError{Field: "stop", Msg: fmt.Sprintf("at most %d stop sequences, not %d", maxStopSequences, len(list))}
	}
	for i, s := range list {
		if s == "" || len(s) > maxStopLen {
			return nil, &InputError{Field: fmt.Sprintf("stop[%d]", i), Msg: fmt.Sprintf("must be 1 to %d bytes", maxStopLen)}
		}
	}
	return list, nil
}

// parseMessages converts wire messages to chat turns. OpenAI's "developer"
// role is a system message; content may be a string or text parts. An
// assistant turn with tool calls may have no content; a tool turn names the
// call it answers when the client sends its id.
func parseMessages(msgs []wireMessage) ([]chat.Message, error) {
	if len(msgs) == 0 {
		return nil, &InputError{Field: "messages", Msg: "must hold at least one message"}
	}
	out := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		field := fmt.Sprintf("messages[%d]", i)
		role := m.Role
		switch role {
		case chat.RoleSystem, chat.RoleUser, chat.RoleAssistant, chat.RoleTool:
		case "developer":
			role = chat.RoleSystem
		default:
			return nil, &InputError{Field: field + ".role",
				Msg: fmt.Sprintf("must be system, user, assistant or tool, not %q", m.Role)}
		}
		if len(m.ToolCalls) > 0 && role != chat.RoleAssistant {
			return nil, &InputError{Field: field + ".tool_calls", Msg: "only assistant messages have tool calls"}
		}
		var text string
		if c := bytes.TrimSpace(m.Content); len(m.ToolCalls) == 0 || (len(c) > 0 && string(c) != "null") {
			t, err := parseContent(m.Content)
			if err != nil {
				return nil, &InputError{Field: field + ".content", Msg: err.Error()}
			}
			text = t
		}
		msg := chat.Message{Role: role, Content: text, ToolCallID: m.ToolCallID, Name: m.Name}
		for j, c := range m.ToolCalls {
			tc, err := c.toChat()
			if err != nil {
				return nil, &InputError{Field: fmt.Sprintf("%s.tool_calls[%d]", field, j), Msg: err.Error()}
			}
			msg.ToolCalls = append(msg.ToolCalls, tc)
		}
		out[i] = msg
	}
	return out, nil
}

type contentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

func parseContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New("is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", errors.New("must be a string or an array of text parts")
		}
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or an array of text parts")
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("part %d: only {\"type\":\"text\",\"text\":...} parts are supported", j)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// nativeInput validates a native body (not an async batch or poll). prefix
// names the body's place in a batch in the fields of its errors.
func nativeInput(req *nativeRequest, prefix string) (*genInput, error) {
	in := &genInput{raw: req.Raw, stream: req.Stream, cachePrefix: cacheAllowed(req.CachePrefix), noDraft: isFalse(req.Speculate),
		rejectIfBusy: req.Options.busy(), now: time.Now(), lora: req.Lora}
	err := in.nativeText(req)
	if err == nil {
		err = in.nativeSampling(req)
	}
	if err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			ie.Field = joinField(prefix, ie.Field)
		}
		return nil, err
	}
	return in, nil
}

// nativeText reads what a native body asks to complete: its prompt or its
// messages, and the tools the template writes.
func (in *genInput) nativeText(req *nativeRequest) error {
	switch {
	case req.Prompt != nil && req.Messages != nil:
		return &InputError{Msg: "give either prompt or messages, not both"}
	case req.Prompt != nil:
		if *req.Prompt == "" {
			return &InputError{Field: "prompt", Msg: "must not be empty"}
		}
		if req.Raw {
			in.prompt = *req.Prompt
		} else {
			in.messages = []chat.Message{{Role: chat.RoleUser, Content: *req.Prompt}}
		}
	case req.Messages != nil:
		if req.Raw {
			return &InputError{Field: "raw", Msg: "raw needs prompt, not messages"}
		}
		msgs, err := parseMessages(req.Messages)
		if err != nil {
			return err
		}
		in.messages = msgs
	default:
		return &InputError{Msg: "one of prompt or messages is required"}
	}
	tools, err := parseTools(req.Tools, true)
	if err != nil {
		return err
	}
	if len(tools) > 0 && req.Raw {
		return &InputError{Field: "tools", Msg: "raw prompts do not go through the chat template, which writes the tools"}
	}
	in.tools = tools
	in.toolChoice, err = parseToolChoice(req.ToolChoice, tools)
	return err
}

// nativeSampling reads how a native body asks to generate: its limits,
// sampling parameters, stop sequences and response format.
func (in *genInput) nativeSampling(req *nativeRequest) error {
	for _, err := range []error{
		checkInt("max_tokens", req.MaxTokens, 1, math.MaxInt32),
		checkFloat("temperature", req.Temperature, 0, 5),
		checkFloat("top_p", req.TopP, 0, 1),
		checkInt("top_k", req.TopK, 0, 50),
		checkFloat("repetition_penalty", req.RepetitionPenalty, 0, 2),
		checkFloat("frequency_penalty", req.FrequencyPenalty, -2, 2),
		checkFloat("presence_penalty", req.PresencePenalty, -2, 2),
	} {
		if err != nil {
			return err
		}
	}
	if req.Seed != nil && *req.Seed < 0 {
		return &InputError{Field: "seed", Msg: "must not be negative"}
	}
	stop, err := parseStop(req.Stop)
	if err != nil {
		return err
	}
	in.stop = stop
	rf, err := parseResponseFormat(req.ResponseFormat, true)
	if err != nil {
		return err
	}
	if err := in.setGrammar(rf); err != nil {
		return err
	}
	if req.MaxTokens != nil {
		in.maxTokens = *req.MaxTokens
	}
	in.sampling = queue.Sampling{
		Temperature:       f32(req.Temperature),
		TopP:              f32(req.TopP),
		RepetitionPenalty: f32(req.RepetitionPenalty),
		FrequencyPenalty:  f32(req.FrequencyPenalty),
		PresencePenalty:   f32(req.PresencePenalty),
	}
	if req.TopK != nil {
		in.sampling.TopK = *req.TopK
	}
	if req.Seed != nil {
		in.sampling.Seed = uint64(*req.Seed)
	}
	return nil
}

// input validates the fields chat and completion requests share into in;
// maxTokens is the endpoint's own token limit (chat's max_completion_tokens
// wins over max_tokens).
func (r *openAIRequest) input(in *genInput, maxTokens *int) error {
	in.lora = r.Lora
	for _, err := range []error{
		checkInt("max_tokens", maxTokens, 1, math.MaxInt32),
		checkInt("n", r.N, 1, MaxChoices),
		checkFloat("temperature", r.Temperature, 0, 2),
		checkFloat("top_p", r.TopP, 0, 1),
		checkFloat("frequency_penalty", r.FrequencyPenalty, -2, 2),
		checkFloat("presence_penalty", r.PresencePenalty, -2, 2),
	} {
		if err != nil {
			return err
		}
	}
	st, err := parseStop(r.Stop)
	if err != nil {
		return err
	}
	if in.logitBias, err = parseLogitBias(r.LogitBias); err != nil {
		return err
	}
	if err := queue.ValidateMetadata(r.Metadata); err != nil {
		return &InputError{Field: "metadata", Msg: err.Error()}
	}
	in.metadata = r.Metadata
	for _, u := range []struct {
		field string
		v     *string
	}{{"user", r.User}, {"safety_identifier", r.SafetyIdentifier}} {
		if u.v == nil {
			continue
		}
		if err := queue.ValidateUser(*u.v); err != nil {
			return &InputError{Field: u.field, Msg: err.Error()}
		}
		in.user = *u.v
	}
	if r.PromptCacheKey != nil {
		if len(*r.PromptCacheKey) > MaxSessionKey {
			return &InputError{Field: "prompt_cache_key", Msg: fmt.Sprintf("is %d bytes; at most %d", len(*r.PromptCacheKey), MaxSessionKey)}
		}
		in.cacheKey = *r.PromptCacheKey
	}
	if r.StreamOptions != nil && !r.Stream {
		return &InputError{Field: "stream_options", Msg: "is only allowed when stream is true"}
	}
	in.cachePrefix = cacheAllowed(r.CachePrefix)
	in.noDraft = isFalse(r.Speculate)
	if in.prediction, err = parsePrediction(r.Prediction); err != nil {
		return err
	}
	in.n = 1
	if r.N != nil {
		in.n = *r.N
	}
	in.rejectIfBusy = r.Options.busy()
	in.stop = st
	in.stream = r.Stream
	in.includeUsage = r.StreamOptions != nil && r.StreamOptions.IncludeUsage
	if maxTokens != nil {
		in.maxTokens = *maxTokens
	}
	in.sampling = queue.Sampling{
		Temperature:      f32(r.Temperature),
		TopP:             f32(r.TopP),
		FrequencyPenalty: f32(r.FrequencyPenalty),
		PresencePenalty:  f32(r.PresencePenalty),
	}
	if r.Seed != nil {
		in.sampling.Seed = uint64(*r.Seed) // OpenAI accepts any integer; negative ones map one-to-one
	}
	return nil
}

// parseLogitBias reads OpenAI's logit_bias: token ids as decimal strings,
// each with a bias in [-100, 100] (-100 bans the token), at most
// queue.MaxLogitBias of them; in token order.
func parseLogitBias(m map[string]float64) ([]queue.TokenBias, error) {
	if len(m) == 0 {
		return nil, nil
	}
	if len(m) > queue.MaxLogitBias {
		return nil, &InputError{Field: "logit_bias", Msg: fmt.Sprintf("names %d tokens; at most %d", len(m), queue.MaxLogitBias)}
	}
	out := make([]queue.TokenBias, 0, len(m))
	for k, v := range m {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 || strconv.FormatInt(id, 10) != k {
			return nil, &InputError{Field: "logit_bias", Msg: fmt.Sprintf("key %q is not a token id (a non-negative integer)", k)}
		}
		if math.IsNaN(v) || v < -100 || v > 100 {
			return nil, &InputError{Field: "logit_bias", Msg: fmt.Sprintf("token %d: bias must be between -100 and 100, not %g", id, v)}
		}
		out = append(out, queue.TokenBias{Token: int32(id), Bias: float32(v)})
	}
	slices.SortFunc(out, func(a, b queue.TokenBias) int { return int(a.Token - b.Token) })
	return out, nil
}

// isFalse reports a boolean field sent as false (absent and null are not).
func isFalse(b *bool) bool { return b != nil && !*b }

// cacheAllowed reads the body's cache_prefix: absent, null or true leaves
// the tenant's prefix cache on; only false turns it off for the request.
func cacheAllowed(v *bool) bool { return v == nil || *v }

func requireModel(model *string) (string, error) {
	if model == nil || *model == "" {
		return "", &InputError{Field: "model", Msg: "is required"}
	}
	return *model, nil
}

// chatInput validates an OpenAI chat completion body and returns the model.
func chatInput(req *chatRequest) (string, *genInput, error) {
	model, err := requireModel(req.Model)
	if err != nil {
		return "", nil, err
	}
	in := &genInput{now: time.Now()}
	maxTokens := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		if err := checkInt("max_completion_tokens", req.MaxCompletionTokens, 1, math.MaxInt32); err != nil {
			return "", nil, err
		}
		maxTokens = req.MaxCompletionTokens
	}
	if err := req.input(in, maxTokens); err != nil {
		return "", nil, err
	}
	if req.Messages == nil {
		return "", nil, &InputError{Field: "messages", Msg: "is required"}
	}
	msgs, err := parseMessages(req.Messages)
	if err != nil {
		return "", nil, err
	}
	in.messages = msgs
	if in.tools, err = parseTools(req.Tools, false); err != nil {
		return "", nil, err
	}
	if in.toolChoice, err = parseToolChoice(req.ToolChoice, in.tools); err != nil {
		return "", nil, err
	}
	rf, err := parseResponseFormat(req.ResponseFormat, false)
	if err != nil {
		return "", nil, err
	}
	if err := in.setGrammar(rf); err != nil {
		return "", nil, err
	}
	if err := checkTopLogprobs("top_logprobs", req.TopLogprobs); err != nil {
		return "", nil, err
	}
	if req.TopLogprobs != nil && (req.Logprobs == nil || !*req.Logprobs) {
		return "", nil, &InputError{Field: "top_logprobs", Msg: "needs logprobs true"}
	}
	in.logprobs = req.Logprobs != nil && *req.Logprobs
	if req.TopLogprobs != nil {
		in.topLogprobs = *req.TopLogprobs
	}
	in.singleCall = req.ParallelToolCalls != nil && !*req.ParallelToolCalls
	if req.ReasoningEffort != nil {
		switch e := *req.ReasoningEffort; e {
		case chat.ReasoningNone, chat.ReasoningMinimal, chat.ReasoningLow, chat.ReasoningMedium, chat.ReasoningHigh:
			in.reasoningEffort = e
		default:
			return "", nil, &InputError{Field: "reasoning_effort", Msg: fmt.Sprintf("must be none, minimal, low, medium or high, not %q", e)}
		}
	}
	return model, in, nil
}

// completionInput validates an OpenAI completion body. The prompt is a string
// or an array holding exactly one string; it is used as-is (no template).
func completionInput(req *completionRequest) (string, *genInput, error) {
	model, err := requireModel(req.Model)
	if err != nil {
		return "", nil, err
	}
	in := &genInput{raw: true}
	if err := req.input(in, req.MaxTokens); err != nil {
		return "", nil, err
	}
	raw := bytes.TrimSpace(req.Prompt)
	var prompt string
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", nil, &InputError{Field: "prompt", Msg: "is required"}
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &prompt); err != nil {
			return "", nil, &InputError{Field: "prompt", Msg: "must be a string"}
		}
	default:
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil || len(list) != 1 {
			return "", nil, &InputError{Field: "prompt", Msg: "must be a string or an array of exactly one string"}
		}
		prompt = list[0]
	}
	if prompt == "" {
		return "", nil, &InputError{Field: "prompt", Msg: "must not be empty"}
	}
	in.prompt = prompt
	rf, err := parseResponseFormat(req.ResponseFormat, false)
	if err != nil {
		return "", nil, err
	}
	if err := in.setGrammar(rf); err != nil {
		return "", nil, err
	}
	if err := checkTopLogprobs("logprobs", req.Logprobs); err != nil {
		return "", nil, err
	}
	if req.Logprobs != nil {
		in.logprobs, in.topLogprobs = true, *req.Logprobs
	}
	return model, in, nil
}
