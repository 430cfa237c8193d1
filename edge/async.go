package edge

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Async batches. A batch of n requests gets the request id "<32 hex>-<n>";
// its i-th request runs as the job "<32 hex>-<n>-<i>", whose status and
// result live in the queue's results bucket. The id thus says how many jobs
// to look up, and the edge keeps no state of its own: a poll works on any
// edge, after a restart. Every job carries the submitting tenant; a poll
// from another tenant, or for an id that is malformed or unknown, is the
// same 404.

// Async status values in poll answers.
const (
	asyncQueued  = queue.StatusQueued
	asyncRunning = queue.StatusRunning
	asyncDone    = queue.StatusDone
)

// asyncResult is the result of a submit or a poll.
type asyncResult struct {
	Status    string          `json:"status"`
	RequestID string          `json:"request_id"`
	Model     string          `json:"model,omitempty"`
	Responses []asyncResponse `json:"responses,omitempty"` // once done
	Usage     *nativeUsage    `json:"usage,omitempty"`     // once done: sum over responses
}

// asyncResponse is one request of a finished batch, in submission order:
// the native result, or the errors it ended with.
type asyncResponse struct {
	ID      int           `json:"id"`
	Success bool          `json:"success"`
	Result  *nativeResult `json:"result,omitempty"`
	Finish  string        `json:"finish_reason,omitempty"`
	Errors  []nativeError `json:"errors,omitempty"`

	encoded any // an encoder job's native result, written as "result" instead of Result
}

// MarshalJSON writes an encoder job's result in place of Result.
func (a asyncResponse) MarshalJSON() ([]byte, error) {
	type plain asyncResponse
	if a.encoded == nil {
		return json.Marshal(plain(a))
	}
	return json.Marshal(struct {
		plain
		Result any `json:"result"`
	}{plain(a), a.encoded})
}

func jobID(requestID string, i int) string { return requestID + "-" + strconv.Itoa(i) }

// parseRequestID returns a batch's size, or ok=false for an id this edge
// could not have issued.
func (s *Server) parseRequestID(id string) (n int, ok bool) {
	hexPart, count, found := strings.Cut(id, "-")
	if !found || len(hexPart) != 32 {
		return 0, false
	}
	if _, err := hex.DecodeString(hexPart); err != nil || strings.ToLower(hexPart) != hexPart {
		return 0, false
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || n > s.cfg.MaxBatchRequests || strconv.Itoa(n) != count {
		return 0, false
	}
	return n, true
}

// submitAsync admits every request of a batch and queues them. Nothing is
// queued unless every request passes admission and the quota: every job
// counts as one request of the tenant's rate window, and holds one slot of
// its concurrency limit and of its class's queue bound from now until the
// job ends (ReleaseEnded) or its lease expires. A batch that fails to queue
// part-way cancels the requests it queued, gives back every slot, and says
// so. The quota charges nothing itself: every job that runs is billed from
// its worker's usage event, the day total included.
func (s *Server) submitAsync(w http.ResponseWriter, r *http.Request, p auth.Principal,
	m *catalog.Model, v *vocab, req *nativeRequest) {
	fail := func(err error) { writeNativeError(w, s.refuse(r, err)) }
	ins, err := s.asyncInputs(req)
	if err == nil && req.Webhook != nil {
		err = s.checkWebhook(r.Context(), req.Webhook)
	}
	if err == nil && req.EventSubject != nil {
		err = checkEventSubject(*req.EventSubject)
	}
	if err != nil {
		fail(err)
		return
	}
	requestID, ids, done, err := s.batchSlots(r.Context(), p, len(ins))
	if err != nil {
		fail(err)
		return
	}
	queued := false // then the jobs hold their slots until they end
	defer func() { done(queued) }()

	jobs := make([]*queue.Job, len(ins))
	admits := make([]admitted, len(ins))
	for i, in := range ins {
		err := s.resolveLoRA(r.Context(), p, m, in)
		var a admitted
		if err == nil {
			a, err = v.admit(r.Context(), in, m.ContextWindow, s.defaultMaxTokens(m))
		}
		if err != nil {
			var ie *InputError
			if errors.As(err, &ie) {
				ie.Field = joinField(fmt.Sprintf("requests[%d]", i), ie.Field)
			}
			fail(fmt.Errorf("requests[%d]: %w", i, err))
			return
		}
		admits[i] = a
		jobs[i] = s.newJob(ids[i], p, m, a, in, r)
		jobs[i].Async = true
		jobs[i].Reply = "" // results go to the bucket only; nobody listens for frames
		jobs[i].Webhook = req.Webhook
		if req.EventSubject != nil {
			jobs[i].EventSubject = *req.EventSubject
		}
	}
	if err := s.reserve(r.Context(), p, m, ids, admits); err != nil {
		fail(err)
		return
	}
	if queued = s.queueBatch(w, r, requestID, jobs); queued {
		writeJSON(w, http.StatusOK, success(asyncResult{Status: asyncQueued, RequestID: requestID, Model: m.Name}))
	}
}

// batchSlots names an async batch of n jobs and takes a quota slot for each
// (acquireAsync). Call done with whether the batch went out: unless it did,
// the slots go back (a queued job's slot goes back when it ends).
func (s *Server) batchSlots(ctx context.Context, p auth.Principal, n int) (requestID string, ids []string, done func(queued bool), err error) {
	requestID = fmt.Sprintf("%s-%d", newID(), n)
	ids = make([]string, n)
	for i := range ids {
		ids[i] = jobID(requestID, i)
	}
	release, err := s.acquireAsync(ctx, p, ids)
	if err != nil {
		return "", nil, nil, err
	}
	return requestID, ids, func(queued bool) {
		if !queued {
			release(quota.Usage{}) // billed per job from usage events
		}
	}, nil
}

// asyncInputs validates the requests of an async batch, each as a native
// body that neither streams nor uses tools.
func (s *Server) asyncInputs(req *nativeRequest) ([]*genInput, error) {
	switch {
	case req.Prompt != nil || req.Messages != nil:
		return nil, &InputError{Field: "requests", Msg: "with queueRequest=true, send the prompts inside requests"}
	case len(req.Requests) == 0:
		return nil, &InputError{Field: "requests", Msg: "must hold at least one request"}
	case len(req.Requests) > s.cfg.MaxBatchRequests:
		return nil, &InputError{Field: "requests", Msg: fmt.Sprintf("at most %d requests, not %d", s.cfg.MaxBatchRequests, len(req.Requests))}
	}
	ins := make([]*genInput, len(req.Requests))
	for i, raw := range req.Requests {
		prefix := fmt.Sprintf("requests[%d]", i)
		var one nativeRequest
		if err := decodeRaw(raw, &one, prefix); err != nil {
			return nil, err
		}
		if one.Requests != nil || one.RequestID != nil {
			return nil, &InputError{Field: prefix, Msg: "requests do not nest"}
		}
		in, err := nativeInput(&one, prefix)
		if err != nil {
			return nil, err
		}
		if in.stream {
			return nil, &InputError{Field: prefix + ".stream", Msg: "queued requests cannot stream"}
		}
		if len(in.tools) > 0 {
			return nil, &InputError{Field: prefix + ".tools", Msg: "queued requests cannot use tools"}
		}
		ins[i] = in
	}
	return ins, nil
}

// queueBatch queues the jobs of batch requestID and reports whether all
// went out. When one cannot, the client never learns the batch's id: it
// cancels the jobs queued before it (one already running ends aborted and is
// billed for what it ran) and answers with the error, saying so.
func (s *Server) queueBatch(w http.ResponseWriter, r *http.Request, requestID string, jobs []*queue.Job) bool {
	for i, job := range jobs {
		err := s.cfg.Queue.SubmitAsync(r.Context(), job)
		if err == nil {
			continue
		}
		cancelled := 0
		for _, queued := range jobs[:i] {
			if cerr := s.cancel(r.Context(), queued.ID); cerr != nil {
				s.log.Error("edge: cancelling a job of a failed batch", "job", queued.ID, "error", cerr)
				continue
			}
			cancelled++
		}
		s.log.Warn("edge: async batch failed part-way; cancelled what it queued",
			"request_id", requestID, "queued", i, "cancelled", cancelled, "of", len(jobs), "error", err)
		e := s.refuse(r, err)
		e.Message = fmt.Sprintf("%s: requests[%d] could not be queued; the batch was not accepted and the %d request(s) queued before it were cancelled",
			e.Message, i, cancelled)
		writeNativeError(w, e)
		return false
	}
	return true
}

// pollAsync answers a poll: the batch's status while any request is queued
// or running, then every response.
func (s *Server) pollAsync(w http.ResponseWriter, r *http.Request, p auth.Principal, requestID string) {
	notFound := func() {
		writeNativeError(w, s.refuse(r, fmt.Errorf("%w: request %q", ErrNotFound, requestID)))
	}
	n, ok := s.parseRequestID(requestID)
	if !ok {
		notFound()
		return
	}
	results := make([]*queue.AsyncResult, n)
	for i := range results {
		res, err := s.cfg.Queue.AsyncStatus(r.Context(), jobID(requestID, i))
		switch {
		case errors.Is(err, queue.ErrNotFound):
			notFound()
			return
		case err != nil:
			writeNativeError(w, s.refuse(r, err))
			return
		case res.Tenant != p.Tenant:
			notFound()
			return
		}
		results[i] = res
	}
	out := asyncResult{Status: asyncDone, RequestID: requestID}
	for _, res := range results {
		switch res.Status {
		case asyncRunning:
			out.Status = asyncRunning
		case asyncQueued:
			if out.Status == asyncDone {
				out.Status = asyncQueued
			}
		}
	}
	if out.Status != asyncDone {
		writeJSON(w, http.StatusOK, success(out))
		return
	}
	var total queue.Usage
	out.Responses = make([]asyncResponse, n)
	for i, res := range results {
		out.Responses[i] = responseOf(i, res)
		if out.Responses[i].Success {
			total.PromptTokens += res.Usage.PromptTokens
			total.CompletionTokens += res.Usage.CompletionTokens
			total.CachedTokens += res.Usage.CachedTokens
		}
	}
	sum := toNativeUsage(total)
	out.Usage = &sum
	writeJSON(w, http.StatusOK, success(out))
}

// responseOf is the response of request i of a batch, from its job's ended
// record: the native result, or the errors it ended with.
func responseOf(i int, res *queue.AsyncResult) asyncResponse {
	one := asyncResponse{ID: i}
	if res.Status == asyncDone && res.Usage != nil && res.Vectors != nil {
		if vecs, err := res.Vectors.Unpack(); err == nil {
			one.Success, one.Finish = true, res.Finish
			one.encoded = nativeEncoded(res.Vectors.Dims, vecs, res.Vectors.Pooling, 0, *res.Usage)
			return one
		}
	} else if res.Status == asyncDone && res.Usage != nil {
		u := toNativeUsage(*res.Usage)
		one.Success, one.Finish = true, res.Finish
		one.Result = &nativeResult{Response: res.Text, Usage: &u}
		return one
	}
	// failed, or done without usage (a broken record)
	var e *Error
	if res.Error != nil {
		e = Classify(res.Error)
	} else {
		e = Classify(ErrBrokenStream)
	}
	one.Errors = []nativeError{{Code: e.Row.Code, Message: e.Message}}
	return one
}
