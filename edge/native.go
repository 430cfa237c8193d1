package edge

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/toolcall"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// nativeUsage is the usage object of Workers AI answers.
type nativeUsage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// promptTokensDetails breaks the prompt tokens down, in OpenAI's shape; both
// APIs send it only when some prompt tokens came from the prefix cache.
type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// cachedDetails is the prompt_tokens_details of cached prompt tokens, or nil
// when there are none.
func cachedDetails(cached int) *promptTokensDetails {
	if cached <= 0 {
		return nil
	}
	return &promptTokensDetails{CachedTokens: cached}
}

func toNativeUsage(u queue.Usage) nativeUsage {
	return nativeUsage{
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
		TotalTokens:         u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails: cachedDetails(u.CachedTokens),
	}
}

// nativeResult is result of a finished text generation.
type nativeResult struct {
	Response  string           `json:"response"`
	ToolCalls []nativeToolCall `json:"tool_calls,omitempty"`
	Usage     *nativeUsage     `json:"usage,omitempty"`
}

// nativeToolCall is Workers AI's tool call: the function's name and its
// arguments as an object (plus the id a follow-up "tool" message names).
type nativeToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

func toNativeCall(c toolcall.Call) nativeToolCall {
	return nativeToolCall{ID: c.ID, Name: c.Name, Arguments: json.RawMessage(c.Arguments)}
}

func success(result any) nativeEnvelope {
	return nativeEnvelope{Result: result, Success: true, Errors: []nativeError{}, Messages: []string{}}
}

// nativeFormat renders Workers AI answers.
type nativeFormat struct{}

func (nativeFormat) writeError(w http.ResponseWriter, e *Error) { writeNativeError(w, e) }

func (nativeFormat) writeResult(w http.ResponseWriter, res *result) {
	u := toNativeUsage(res.usage)
	writeJSON(w, http.StatusOK, success(nativeResult{Response: res.text, Usage: &u}))
}

var _ toolAPI = nativeFormat{}

func (nativeFormat) writeToolResult(w http.ResponseWriter, res *result, content string, calls []toolcall.Call) {
	u := toNativeUsage(res.usage)
	out := nativeResult{Response: content, Usage: &u}
	for _, c := range calls {
		out.ToolCalls = append(out.ToolCalls, toNativeCall(c))
	}
	writeJSON(w, http.StatusOK, success(out))
}

func (nativeFormat) streamCall(sw *sse, _ *result, _ int, c toolcall.Call) error {
	return sw.json("", nativeResult{Response: "", ToolCalls: []nativeToolCall{toNativeCall(c)}})
}

func (nativeFormat) streamBegin(*sse, *result) error { return nil }

func (nativeFormat) streamText(sw *sse, _ *result, text string) error {
	return sw.json("", nativeResult{Response: text})
}

func (nativeFormat) streamEnd(sw *sse, res *result) error {
	u := toNativeUsage(res.usage)
	if err := sw.json("", nativeResult{Response: "", Usage: &u}); err != nil {
		return err
	}
	return sw.done()
}

func (nativeFormat) streamError(sw *sse, e *Error) error { return sw.json("error", e.native()) }

// handleRun serves POST /ai/run/{model...}: a generation, an async batch
// (?queueRequest=true with {"requests":[...]}), or a poll ({"request_id":...}).
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	// ai:read may poll async results; everything else takes ai:run.
	p, err := s.authenticate(r, auth.ScopeRun, auth.ScopeRead)
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	m, v, err := s.lookupModel(p, r.PathValue("model"))
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	if catalog.Encoder(m.Task) {
		s.handleEncoderRun(w, r, p, m, v)
		return
	}
	var req nativeRequest
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	queued := false
	if q := r.URL.Query().Get("queueRequest"); q != "" {
		queued, err = strconv.ParseBool(q)
		if err != nil {
			writeNativeError(w, s.refuse(r, &InputError{Field: "queueRequest", Msg: "must be true or false"}))
			return
		}
	}
	switch {
	case req.RequestID != nil:
		if req.Prompt != nil || req.Messages != nil || req.Requests != nil || req.Webhook != nil || req.EventSubject != nil {
			writeNativeError(w, s.refuse(r, &InputError{Field: "request_id", Msg: "a poll carries only request_id"}))
			return
		}
		s.pollAsync(w, r, p, *req.RequestID)
	case !p.HasScope(auth.ScopeRun):
		writeNativeError(w, s.refuse(r, p.RequireScope(auth.ScopeRun)))
	case queued:
		s.submitAsync(w, r, p, m, v, &req)
	case req.Requests != nil:
		writeNativeError(w, s.refuse(r, &InputError{Field: "requests", Msg: "batches need ?queueRequest=true"}))
	case req.Webhook != nil:
		writeNativeError(w, s.refuse(r, &InputError{Field: "webhook", Msg: "announces queued batches only (?queueRequest=true)"}))
	case req.EventSubject != nil:
		writeNativeError(w, s.refuse(r, &InputError{Field: "event_subject", Msg: "announces queued batches only (?queueRequest=true)"}))
	default:
		in, err := nativeInput(&req, "")
		if err == nil {
			err = s.resolveLoRA(r.Context(), p, m, in)
		}
		if err != nil {
			writeNativeError(w, s.refuse(r, err))
			return
		}
		s.generate(w, r, call{p: p, m: m, v: v, in: in, defaultMax: s.defaultMaxTokens(m), f: withTools(nativeFormat{}, v, in)})
	}
}

// modelInfo is one entry of the native model search.
type modelInfo struct {
	ID          string          `json:"id"`
	Source      int             `json:"source"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Task        taskInfo        `json:"task"`
	Tags        []string        `json:"tags"`
	Properties  []modelProperty `json:"properties"`
}

type taskInfo struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
}

type modelProperty struct {
	PropertyID string `json:"property_id"`
	Value      string `json:"value"`
}

type resultInfo struct {
	Count      int `json:"count"`
	Page       int `json:"page"`
	PerPage    int `json:"per_page"`
	TotalCount int `json:"total_count"`
}

type searchEnvelope struct {
	nativeEnvelope
	ResultInfo resultInfo `json:"result_info"`
}

// stableUUID derives a UUID-shaped id from a name, so ids stay the same
// across restarts and nodes.
func stableUUID(name string) string {
	h := sha256.Sum256([]byte(name))
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func taskName(task string) string {
	switch task {
	case catalog.TaskTextGeneration:
		return "Text Generation"
	case catalog.TaskTextEmbeddings:
		return "Text Embeddings"
	case catalog.TaskTextClassification:
		return "Text Classification"
	}
	return task
}

func describeModel(m *catalog.Model) modelInfo {
	props := []modelProperty{
		{PropertyID: "context_window", Value: strconv.Itoa(m.ContextWindow)},
		{PropertyID: "neurons_per_m_prompt_tokens", Value: strconv.FormatFloat(m.Prices.NeuronsPerMPromptTokens, 'g', -1, 64)},
		{PropertyID: "neurons_per_m_completion_tokens", Value: strconv.FormatFloat(m.Prices.NeuronsPerMCompletionTokens, 'g', -1, 64)},
	}
	keys := make([]string, 0, len(m.Properties))
	for k := range m.Properties {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		props = append(props, modelProperty{PropertyID: k, Value: m.Properties[k]})
	}
	return modelInfo{
		ID: stableUUID(m.Name), Source: 1, Name: m.Name, Description: m.Description,
		Task:       taskInfo{ID: stableUUID("task:" + m.Task), Name: taskName(m.Task), Description: ""},
		Tags:       []string{},
		Properties: props,
	}
}

// handleModelsSearch serves GET /ai/models/search: the catalog models the
// token may use, filtered by ?search= (name or description, any case) and
// ?task= (id or name), paged by ?page= and ?per_page=.
func (s *Server) handleModelsSearch(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r, auth.ScopeRead, auth.ScopeRun)
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	q := r.URL.Query()
	page, err := queryInt(q.Get("page"), "page", 1)
	if err == nil {
		var perPage int
		perPage, err = queryInt(q.Get("per_page"), "per_page", 50)
		if err == nil {
			s.searchModels(w, p, q.Get("search"), q.Get("task"), page, perPage)
			return
		}
	}
	writeNativeError(w, s.refuse(r, err))
}

func (s *Server) searchModels(w http.ResponseWriter, p auth.Principal, search, task string, page, perPage int) {
	search, task = strings.ToLower(search), strings.ToLower(task)
	var all []modelInfo
	for _, m := range s.cfg.Catalog.Models() {
		if !p.AllowsModel(m.Name) {
			continue
		}
		if search != "" && !strings.Contains(strings.ToLower(m.Name), search) &&
			!strings.Contains(strings.ToLower(m.Description), search) {
			continue
		}
		if task != "" && task != strings.ToLower(m.Task) && task != strings.ToLower(taskName(m.Task)) {
			continue
		}
		all = append(all, describeModel(m))
	}
	lo := min((page-1)*perPage, len(all))
	hi := min(lo+perPage, len(all))
	out := searchEnvelope{
		nativeEnvelope: success(append([]modelInfo{}, all[lo:hi]...)),
		ResultInfo:     resultInfo{Count: hi - lo, Page: page, PerPage: perPage, TotalCount: len(all)},
	}
	writeJSON(w, http.StatusOK, out)
}

func queryInt(v, name string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, &InputError{Field: name, Msg: "must be an integer from 1 to 1000"}
	}
	return n, nil
}
