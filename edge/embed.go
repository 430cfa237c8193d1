package edge

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Encoder models (catalog tasks text-embeddings and text-classification)
// answer OpenAI's POST /v1/embeddings and Workers AI's native
// POST /ai/run/{model} ({"text": ...} -> {"shape", "data", "pooling"}; a
// reranker's {"query", "contexts", "top_k"} -> {"response": [{"id",
// "score"}]}). Each request is one encoder job: counted and checked here
// (every input within the model's window unless truncation is asked),
// reserved and billed per input token at the model's price, and answered
// whole from the job's final frame.

// InputLengthError is an encoder input over the model's window.
type InputLengthError struct {
	Input, Tokens, Context int
}

func (e *InputLengthError) Error() string {
	return fmt.Sprintf("%v: %s", ErrPromptTooLong, e.message())
}

func (e *InputLengthError) message() string {
	return fmt.Sprintf("input %d is %d tokens; the model's window is %d tokens", e.Input, e.Tokens, e.Context)
}

func (e *InputLengthError) Unwrap() error { return ErrPromptTooLong }

// embedCall is one decoded encoder request on its way to a worker.
type embedCall struct {
	p     auth.Principal
	m     *catalog.Model
	v     *vocab
	e     *queue.Embed
	busy  bool // reject_if_busy
	write func(w http.ResponseWriter, vecs [][]float32, pooling string, u queue.Usage)
	fail  func(w http.ResponseWriter, e *Error)
}

// embed runs one encoder request to its end: quota, counting, reservation,
// the job, and its final frame rendered by c.write.
func (s *Server) embed(w http.ResponseWriter, r *http.Request, c embedCall) {
	ri := infoOf(r)
	ri.model = c.m.Name
	release, err := s.acquireSync(r.Context(), c.p, ri.id)
	if err != nil {
		c.fail(w, s.refuse(r, err))
		return
	}
	var used quota.Usage
	defer func() { release(used) }()
	tokens, err := s.countInputs(c)
	if err == nil {
		err = s.reserve(r.Context(), c.p, c.m, []string{ri.id}, []admitted{{tokens: tokens}})
	}
	if err != nil {
		c.fail(w, s.refuse(r, err))
		return
	}
	job := &queue.Job{
		ID: ri.id, Tenant: c.p.Tenant, Key: c.p.Key, Model: c.m.Name, Embed: c.e, PromptTokens: tokens,
		RejectIfBusy: c.busy || r.URL.Query().Get("rejectIfBusy") == "true",
		Reply:        queue.ReplySubject(ri.id), Deadline: time.Now().Add(s.cfg.RequestTimeout),
		Rates: jobRates(c.m), Weight: s.class(c.p.Tenant).Weight,
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout+replyGrace)
	defer cancel()
	ectx, espan := s.startSpan(ctx, spanEnqueue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", queue.JobSubject(c.m.Name))))
	replies, err := s.cfg.Queue.Submit(ectx, job)
	endSpan(espan, err)
	if err != nil {
		c.fail(w, s.refuse(r, err))
		return
	}
	defer replies.Close()
	finished := false
	defer func() {
		if !finished {
			if err := s.cancel(r.Context(), job.ID); err != nil {
				s.log.Warn("edge: cancel", "id", job.ID, "error", err)
			}
		}
	}()
	fr, err := replies.Next(ctx)
	switch {
	case err != nil && r.Context().Err() != nil:
		return // the client is gone
	case errors.Is(err, io.EOF):
		err = ErrBrokenStream
	case err == nil && fr.Kind == queue.KindError && fr.Error != nil:
		finished = true
		err = fr.Error
	case err == nil && (fr.Kind != queue.KindFinal || fr.Usage == nil || fr.Vectors == nil):
		finished = fr.Kind == queue.KindFinal || fr.Kind == queue.KindError
		err = ErrBrokenStream
	}
	if err != nil {
		c.fail(w, s.refuse(r, err))
		return
	}
	finished = true
	vecs, err := fr.Vectors.Unpack()
	if err != nil || len(vecs) != c.e.Count() {
		c.fail(w, s.refuse(r, ErrBrokenStream))
		return
	}
	used = charge(c.m, ri.id, *fr.Usage)
	s.cfg.Metrics.tokens(c.m.Name, fr.Usage.PromptTokens, 0)
	ri.span.SetAttributes(queue.AttrInTokens.Int(fr.Usage.PromptTokens))
	c.write(w, vecs, fr.Vectors.Pooling, *fr.Usage)
}

// countInputs counts an encoder request's tokens as the worker will make
// them and refuses an input over the model's window (unless truncation was
// asked, when it counts the window).
func (s *Server) countInputs(c embedCall) (int, error) {
	tok, window := c.v.tok, c.m.ContextWindow
	total := 0
	add := func(i, n int) error {
		if n > window {
			if !c.e.Truncate {
				return &InputLengthError{Input: i, Tokens: n, Context: window}
			}
			n = window
		}
		total += n
		return nil
	}
	for i, text := range c.e.Inputs {
		var n int
		if c.m.Task == catalog.TaskTextClassification {
			n = len(tok.EncodePair(c.e.Query, text))
		} else {
			n = len(tok.Encode(text, true, false))
		}
		if err := add(i, n); err != nil {
			return 0, err
		}
	}
	for i, ids := range c.e.Tokens {
		if len(ids) == 0 {
			return 0, &InputError{Field: "input", Msg: fmt.Sprintf("input %d is an empty list of tokens", i)}
		}
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() {
				return 0, &InputError{Field: "input", Msg: fmt.Sprintf("input %d holds token %d; the model's vocabulary has %d", i, id, tok.VocabSize())}
			}
		}
		n := len(ids)
		if tok.AddBOS() && ids[0] != tok.BOS() {
			n++
		}
		if tok.AddEOS() && ids[len(ids)-1] != tok.EOS() {
			n++
		}
		if err := add(len(c.e.Inputs)+i, n); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// encoderTask refuses a model of another task than the route serves.
func encoderTask(m *catalog.Model, want string, route string) error {
	if m.Task == want {
		return nil
	}
	return &InputError{Field: "model", Msg: fmt.Sprintf("model %s serves %s, not %s; %s", m.Name, m.Task, want, route)}
}

// openAIEmbedRequest is OpenAI's POST /v1/embeddings body.
type openAIEmbedRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

// embedInputs reads OpenAI's input: a string, an array of strings, an
// array of token ids, or an array of arrays of token ids.
func embedInputs(raw json.RawMessage) (*queue.Embed, error) {
	bad := &InputError{Field: "input", Msg: "must be a string, an array of strings, an array of token ids or an array of arrays of token ids"}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, &InputError{Field: "input", Msg: "is required"}
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return &queue.Embed{Inputs: []string{one}}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		if len(many) == 0 {
			return nil, &InputError{Field: "input", Msg: "is an empty array"}
		}
		return &queue.Embed{Inputs: many}, nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return nil, &InputError{Field: "input", Msg: "is an empty array"}
		}
		return &queue.Embed{Tokens: [][]int32{ids}}, nil
	}
	var lists [][]int32
	if json.Unmarshal(raw, &lists) == nil {
		if len(lists) == 0 {
			return nil, &InputError{Field: "input", Msg: "is an empty array"}
		}
		return &queue.Embed{Tokens: lists}, nil
	}
	return nil, bad
}

// checkCount refuses more inputs than a job carries.
func checkCount(field string, n int) error {
	if n > queue.MaxEmbedInputs {
		return &InputError{Field: field, Msg: fmt.Sprintf("%d inputs; at most %d per request", n, queue.MaxEmbedInputs)}
	}
	return nil
}

// handleEmbeddings serves POST /v1/embeddings.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r, auth.ScopeRun)
	if err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	var req openAIEmbedRequest
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	e, err := embedInputs(req.Input)
	if err == nil {
		err = checkCount("input", e.Count())
	}
	if err == nil && req.Model == "" {
		err = &InputError{Field: "model", Msg: "is required"}
	}
	b64 := false
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		b64 = true
	default:
		err = cmp.Or(err, error(&InputError{Field: "encoding_format", Msg: fmt.Sprintf("%q: want float or base64", req.EncodingFormat)}))
	}
	if err == nil {
		err = queue.ValidateUser(req.User)
		if err != nil {
			err = &InputError{Field: "user", Msg: err.Error()}
		}
	}
	if err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	m, v, err := s.lookupModel(p, req.Model)
	if err == nil {
		err = encoderTask(m, catalog.TaskTextEmbeddings, "embeddings come from a text-embeddings model")
	}
	if err == nil && req.Dimensions != nil && *req.Dimensions != m.Dims {
		err = &InputError{Field: "dimensions", Msg: fmt.Sprintf("model %s makes vectors of %d dimensions and cannot shorten them", m.Name, m.Dims)}
	}
	if err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	e.Normalize = true // OpenAI's embeddings are unit length
	s.embed(w, r, embedCall{p: p, m: m, v: v, e: e, fail: writeOpenAIError,
		write: func(w http.ResponseWriter, vecs [][]float32, _ string, u queue.Usage) {
			writeJSON(w, http.StatusOK, openAIEmbeddings(m.Name, vecs, b64, u))
		}})
}

type openAIEmbedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string of little-endian float32s
}

type openAIEmbedUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type openAIEmbedResponse struct {
	Object string            `json:"object"`
	Data   []openAIEmbedding `json:"data"`
	Model  string            `json:"model"`
	Usage  openAIEmbedUsage  `json:"usage"`
}

func openAIEmbeddings(model string, vecs [][]float32, b64 bool, u queue.Usage) openAIEmbedResponse {
	out := openAIEmbedResponse{Object: "list", Model: model, Usage: openAIEmbedUsage{u.PromptTokens, u.PromptTokens}}
	for i, v := range vecs {
		var emb any = v
		if b64 {
			b := make([]byte, 0, 4*len(v))
			for _, x := range v {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		out.Data = append(out.Data, openAIEmbedding{Object: "embedding", Index: i, Embedding: emb})
	}
	return out
}

// nativeEmbedRequest is Workers AI's body for its text-embeddings models and
// its reranker; with ?queueRequest=true, a batch of such bodies in
// requests, or a poll (request_id).
type nativeEmbedRequest struct {
	Text         json.RawMessage `json:"text"`
	Pooling      string          `json:"pooling"`
	Truncate     bool            `json:"truncate_inputs"`
	Query        *string         `json:"query"`
	Contexts     []nativeContext `json:"contexts"`
	TopK         *int            `json:"top_k"`
	RejectIfBusy bool            `json:"rejectIfBusy"`

	Requests     []json.RawMessage `json:"requests"`
	RequestID    *string           `json:"request_id"`
	Webhook      *queue.Webhook    `json:"webhook"`
	EventSubject *string           `json:"event_subject"`
}

type nativeContext struct {
	Text string `json:"text"`
}

// handleEncoderRun serves POST /ai/run/{model} for an encoder model: one
// request, an async batch (?queueRequest=true with requests), or a poll.
func (s *Server) handleEncoderRun(w http.ResponseWriter, r *http.Request, p auth.Principal, m *catalog.Model, v *vocab) {
	var req nativeEmbedRequest
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	queued := r.URL.Query().Get("queueRequest") == "true"
	switch {
	case req.RequestID != nil:
		if req.Text != nil || req.Query != nil || req.Contexts != nil || req.Requests != nil {
			writeNativeError(w, s.refuse(r, &InputError{Field: "request_id", Msg: "a poll carries only request_id"}))
			return
		}
		s.pollAsync(w, r, p, *req.RequestID)
	case !p.HasScope(auth.ScopeRun):
		writeNativeError(w, s.refuse(r, p.RequireScope(auth.ScopeRun)))
	case queued:
		s.submitEncoderAsync(w, r, p, m, v, &req)
	case req.Requests != nil || req.Webhook != nil || req.EventSubject != nil:
		writeNativeError(w, s.refuse(r, &InputError{Field: "requests", Msg: "batches, webhooks and event subjects need ?queueRequest=true"}))
	default:
		e, top, err := encoderInput(m, &req, "")
		if err != nil {
			writeNativeError(w, s.refuse(r, err))
			return
		}
		s.embed(w, r, embedCall{p: p, m: m, v: v, e: e, busy: req.RejectIfBusy, fail: writeNativeError,
			write: func(w http.ResponseWriter, vecs [][]float32, pooling string, u queue.Usage) {
				writeJSON(w, http.StatusOK, success(nativeEncoded(m.Dims, vecs, pooling, top, u)))
			}})
	}
}

// encoderInput reads one native body for model m (field prefixes its
// errors' field names, for the requests of a batch): an embedding model's
// texts, or a reranker's query and contexts and how many of the best to
// answer (top, 0: all).
func encoderInput(m *catalog.Model, req *nativeEmbedRequest, field string) (e *queue.Embed, top int, err error) {
	in := func(f string) string { return joinField(field, f) }
	if m.Task == catalog.TaskTextClassification {
		switch {
		case req.Query == nil:
			return nil, 0, &InputError{Field: in("query"), Msg: "is required"}
		case len(req.Contexts) == 0:
			return nil, 0, &InputError{Field: in("contexts"), Msg: "must hold at least one {\"text\": ...}"}
		case req.Text != nil:
			return nil, 0, &InputError{Field: in("text"), Msg: fmt.Sprintf("model %s ranks contexts against a query", m.Name)}
		case req.TopK != nil && *req.TopK < 1:
			return nil, 0, &InputError{Field: in("top_k"), Msg: "must be at least 1"}
		}
		if err := checkCount(in("contexts"), len(req.Contexts)); err != nil {
			return nil, 0, err
		}
		e = &queue.Embed{Query: *req.Query, Truncate: req.Truncate}
		for _, c := range req.Contexts {
			e.Inputs = append(e.Inputs, c.Text)
		}
		if req.TopK != nil {
			top = *req.TopK
		}
		return e, top, nil
	}
	e, err = nativeTexts(req.Text)
	switch {
	case err != nil:
		var ie *InputError
		if errors.As(err, &ie) {
			ie.Field = in(ie.Field)
		}
		return nil, 0, err
	case req.Query != nil || req.Contexts != nil || req.TopK != nil:
		return nil, 0, &InputError{Field: in("query"), Msg: fmt.Sprintf("model %s embeds texts; query, contexts and top_k are for rerankers", m.Name)}
	case req.Pooling != "" && req.Pooling != m.Pooling:
		return nil, 0, &InputError{Field: in("pooling"), Msg: fmt.Sprintf("model %s pools by %s", m.Name, m.Pooling)}
	}
	if err := checkCount(in("text"), e.Count()); err != nil {
		return nil, 0, err
	}
	e.Truncate, e.Normalize = req.Truncate, true
	return e, 0, nil
}

// nativeEncoded is the native result of an encoder job: an embedding
// model's shape, data and pooling, or a reranker's contexts by score, best
// first (the top of them when top > 0).
func nativeEncoded(dims int, vecs [][]float32, pooling string, top int, u queue.Usage) any {
	if pooling != "rank" {
		return nativeEmbedResult{Shape: [2]int{len(vecs), dims}, Data: vecs, Pooling: pooling, Usage: toNativeUsage(u)}
	}
	ranked := make([]rankedContext, len(vecs))
	for i, vec := range vecs {
		ranked[i] = rankedContext{ID: i, Score: vec[0]}
	}
	slices.SortStableFunc(ranked, func(a, b rankedContext) int { return cmp.Compare(b.Score, a.Score) })
	if top > 0 && top < len(ranked) {
		ranked = ranked[:top]
	}
	return nativeRerankResult{Response: ranked, Usage: toNativeUsage(u)}
}

// submitEncoderAsync queues an async batch of encoder requests, as
// submitAsync does for generation: every request checked and counted
// first, one job each, all or none. A poll answers each request's native
// result (a reranker's: every context, best first).
func (s *Server) submitEncoderAsync(w http.ResponseWriter, r *http.Request, p auth.Principal, m *catalog.Model, v *vocab, req *nativeEmbedRequest) {
	fail := func(err error) { writeNativeError(w, s.refuse(r, err)) }
	var err error
	switch {
	case req.Text != nil || req.Query != nil || req.Contexts != nil:
		err = &InputError{Field: "requests", Msg: "with queueRequest=true, send the inputs inside requests"}
	case len(req.Requests) == 0:
		err = &InputError{Field: "requests", Msg: "must hold at least one request"}
	case len(req.Requests) > s.cfg.MaxBatchRequests:
		err = &InputError{Field: "requests", Msg: fmt.Sprintf("at most %d requests, not %d", s.cfg.MaxBatchRequests, len(req.Requests))}
	case req.Webhook != nil:
		err = s.checkWebhook(r.Context(), req.Webhook)
	}
	if err == nil && req.EventSubject != nil {
		err = checkEventSubject(*req.EventSubject)
	}
	if err != nil {
		fail(err)
		return
	}
	embeds := make([]*queue.Embed, len(req.Requests))
	admits := make([]admitted, len(req.Requests))
	for i, raw := range req.Requests {
		prefix := fmt.Sprintf("requests[%d]", i)
		var one nativeEmbedRequest
		if err := decodeRaw(raw, &one, prefix); err != nil {
			fail(err)
			return
		}
		if one.Requests != nil || one.RequestID != nil {
			fail(&InputError{Field: prefix, Msg: "requests do not nest"})
			return
		}
		e, _, err := encoderInput(m, &one, prefix)
		if err == nil {
			admits[i].tokens, err = s.countInputs(embedCall{m: m, v: v, e: e})
		}
		if err != nil {
			fail(fmt.Errorf("%s: %w", prefix, err))
			return
		}
		embeds[i] = e
	}
	requestID, ids, done, err := s.batchSlots(r.Context(), p, len(embeds))
	if err != nil {
		fail(err)
		return
	}
	queued := false // then the jobs hold their slots until they end
	defer func() { done(queued) }()
	if err := s.reserve(r.Context(), p, m, ids, admits); err != nil {
		fail(err)
		return
	}
	jobs := make([]*queue.Job, len(embeds))
	for i, e := range embeds {
		jobs[i] = &queue.Job{
			ID: ids[i], Tenant: p.Tenant, Key: p.Key, Model: m.Name, Embed: e, PromptTokens: admits[i].tokens, Async: true,
			Deadline: time.Now().Add(s.cfg.RequestTimeout), Rates: jobRates(m), Weight: s.class(p.Tenant).Weight,
			Webhook: req.Webhook,
		}
		if req.EventSubject != nil {
			jobs[i].EventSubject = *req.EventSubject
		}
	}
	if queued = s.queueBatch(w, r, requestID, jobs); queued {
		writeJSON(w, http.StatusOK, success(asyncResult{Status: asyncQueued, RequestID: requestID, Model: m.Name}))
	}
}

type nativeEmbedResult struct {
	Shape   [2]int      `json:"shape"`
	Data    [][]float32 `json:"data"`
	Pooling string      `json:"pooling"`
	Usage   nativeUsage `json:"usage"`
}

// nativeTexts reads Workers AI's text: a string or an array of strings.
func nativeTexts(raw json.RawMessage) (*queue.Embed, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, &InputError{Field: "text", Msg: "is required"}
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return &queue.Embed{Inputs: []string{one}}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) != nil {
		return nil, &InputError{Field: "text", Msg: "must be a string or an array of strings"}
	}
	if len(many) == 0 {
		return nil, &InputError{Field: "text", Msg: "is an empty array"}
	}
	return &queue.Embed{Inputs: many}, nil
}

type rankedContext struct {
	ID    int     `json:"id"`
	Score float32 `json:"score"`
}

type nativeRerankResult struct {
	Response []rankedContext `json:"response"`
	Usage    nativeUsage     `json:"usage"`
}

// openAIRerankRequest is the rerank body llama.cpp's server, vLLM, Jina and
// Cohere share (POST /v1/rerank).
type openAIRerankRequest struct {
	Model           string            `json:"model"`
	Query           *string           `json:"query"`
	Documents       []json.RawMessage `json:"documents"`
	TopN            *int              `json:"top_n"`
	ReturnDocuments bool              `json:"return_documents"`
}

type rerankDocument struct {
	Text string `json:"text"`
}

type rerankResult struct {
	Index          int             `json:"index"`
	RelevanceScore float32         `json:"relevance_score"`
	Document       *rerankDocument `json:"document,omitempty"`
}

type rerankResponse struct {
	Object  string           `json:"object"`
	Model   string           `json:"model"`
	Results []rerankResult   `json:"results"`
	Usage   openAIEmbedUsage `json:"usage"`
}

// handleRerank serves POST /v1/rerank for a text-classification model: the
// documents by relevance to the query, best first (the top_n of them),
// each score the model's raw one, as /ai/run's.
func (s *Server) handleRerank(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r, auth.ScopeRun)
	if err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	var req openAIRerankRequest
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	e := &queue.Embed{}
	switch {
	case req.Model == "":
		err = &InputError{Field: "model", Msg: "is required"}
	case req.Query == nil:
		err = &InputError{Field: "query", Msg: "is required"}
	case len(req.Documents) == 0:
		err = &InputError{Field: "documents", Msg: "must hold at least one document"}
	case req.TopN != nil && *req.TopN < 1:
		err = &InputError{Field: "top_n", Msg: "must be at least 1"}
	default:
		err = checkCount("documents", len(req.Documents))
	}
	for i, raw := range req.Documents {
		if err != nil {
			break
		}
		var text string
		var doc rerankDocument
		switch {
		case json.Unmarshal(raw, &text) == nil:
		case json.Unmarshal(raw, &doc) == nil:
			text = doc.Text
		default:
			err = &InputError{Field: fmt.Sprintf("documents[%d]", i), Msg: "must be a string or {\"text\": ...}"}
		}
		e.Inputs = append(e.Inputs, text)
	}
	var m *catalog.Model
	var v *vocab
	if err == nil {
		m, v, err = s.lookupModel(p, req.Model)
	}
	if err == nil {
		err = encoderTask(m, catalog.TaskTextClassification, "reranking needs a text-classification model")
	}
	if err != nil {
		writeOpenAIError(w, s.refuse(r, err))
		return
	}
	e.Query = *req.Query
	s.embed(w, r, embedCall{p: p, m: m, v: v, e: e, fail: writeOpenAIError,
		write: func(w http.ResponseWriter, vecs [][]float32, _ string, u queue.Usage) {
			out := rerankResponse{Object: "list", Model: m.Name, Results: make([]rerankResult, len(vecs)),
				Usage: openAIEmbedUsage{u.PromptTokens, u.PromptTokens}}
			for i, vec := range vecs {
				out.Results[i] = rerankResult{Index: i, RelevanceScore: vec[0]}
				if req.ReturnDocuments {
					out.Results[i].Document = &rerankDocument{Text: e.Inputs[i]}
				}
			}
			slices.SortStableFunc(out.Results, func(a, b rerankResult) int { return cmp.Compare(b.RelevanceScore, a.RelevanceScore) })
			if req.TopN != nil && *req.TopN < len(out.Results) {
				out.Results = out.Results[:*req.TopN]
			}
			writeJSON(w, http.StatusOK, out)
		}})
}
