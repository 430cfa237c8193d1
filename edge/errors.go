package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/models/lora"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Sentinel errors for refusals the edge decides itself. Each is reported to
// clients through the error table (Classify).
var (
	ErrInvalidInput   = errors.New("edge: invalid input")
	ErrUnknownModel   = errors.New("edge: unknown model")
	ErrModelForbidden = errors.New("edge: model not allowed for this token")
	// ErrModelNotEntitled is a model closed to the tenant's class
	// (PropAllowedClasses).
	ErrModelNotEntitled = errors.New("edge: model not included in the tenant's plan")
	ErrPromptTooLong    = errors.New("edge: prompt and max_tokens exceed the context window")
	ErrAccountMismatch  = errors.New("edge: account id does not match the token's tenant")
	ErrNotFound         = errors.New("edge: not found")
	ErrBrokenStream     = errors.New("edge: reply stream ended without a final frame")
	ErrConfig           = errors.New("edge: invalid config")
)

// InputError is a request body that does not decode or validate. Field names
// the offending field as the client wrote it ("messages[1].content"), or is
// empty when the body as a whole is at fault. It wraps ErrInvalidInput.
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%v: %s", ErrInvalidInput, e.Msg)
	}
	return fmt.Sprintf("%v: %s: %s", ErrInvalidInput, e.Field, e.Msg)
}

func (e *InputError) Unwrap() error { return ErrInvalidInput }

// ModelError names the model a request asked for that is unknown (wraps
// ErrUnknownModel) or not allowed for the token (wraps ErrModelForbidden).
type ModelError struct {
	Name string
	Err  error
}

func (e *ModelError) Error() string { return fmt.Sprintf("%v: %q", e.Err, e.Name) }
func (e *ModelError) Unwrap() error { return e.Err }

// LengthError is a request refused at admission: its prompt plus max_tokens
// do not fit the model's context window. It wraps ErrPromptTooLong.
type LengthError struct {
	PromptTokens int
	MaxTokens    int
	Context      int
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("%v: %s", ErrPromptTooLong, e.message())
}

func (e *LengthError) message() string {
	return fmt.Sprintf("prompt is %d tokens and max_tokens is %d; the model's context window is %d tokens",
		e.PromptTokens, e.MaxTokens, e.Context)
}

func (e *LengthError) Unwrap() error { return ErrPromptTooLong }

// Row is one line of the error table: how one kind of refusal looks on the
// native (Workers AI) API and on the OpenAI API.
type Row struct {
	Name    string // stable identifier, e.g. "prompt_too_long"
	Status  int    // HTTP status on the native API
	Code    int    // numeric code in the native envelope's errors[].code
	Message string // default message; an instance may say more

	OpenAIStatus int    // HTTP status on the OpenAI API
	OpenAIType   string // error.type
	OpenAICode   string // error.code; "" renders as null
}

// The error table. Codes 3003-3042 and 5004-5035 are Workers AI's own (see
// its "Errors" reference); 3037, 3038 and 3043-3051 are Bulkhead's
// for refusals Workers AI does not document a code for; 10000 and 9109 are the
// Cloudflare API's authentication and authorization codes.
var (
	rowInvalidInput = Row{"invalid_input", http.StatusBadRequest, 5004, "Invalid input",
		http.StatusBadRequest, "invalid_request_error", ""}
	rowUnknownModel = Row{"unknown_model", http.StatusBadRequest, 5007, "No such model or task",
		http.StatusNotFound, "invalid_request_error", "model_not_found"}
	rowModelForbidden = Row{"model_forbidden", http.StatusForbidden, 5018, "The account is not allowed to access this model",
		http.StatusForbidden, "invalid_request_error", "model_not_allowed"}
	rowModelPlan = Row{"model_requires_plan", http.StatusForbidden, 5035, "This model requires a paid plan",
		http.StatusForbidden, "invalid_request_error", "model_not_allowed"}
	rowPromptTooLong = Row{"prompt_too_long", http.StatusRequestEntityTooLarge, 3006, "Request is too large",
		http.StatusBadRequest, "invalid_request_error", "context_length_exceeded"}
	rowBodyTooLarge = Row{"body_too_large", http.StatusRequestEntityTooLarge, 3006, "Request is too large",
		http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large"}
	rowQuotaExhausted = Row{"quota_exhausted", http.StatusTooManyRequests, 3036, "You have used up your daily allocation of neurons",
		http.StatusTooManyRequests, "insufficient_quota", "insufficient_quota"}
	rowRateLimited = Row{"rate_limited", http.StatusTooManyRequests, 3037, "Rate limited: too many requests per minute",
		http.StatusTooManyRequests, "requests", "rate_limit_exceeded"}
	rowConcurrency = Row{"too_many_concurrent", http.StatusTooManyRequests, 3038, "Rate limited: too many concurrent requests",
		http.StatusTooManyRequests, "requests", "rate_limit_exceeded"}
	rowCapacity = Row{"capacity_exceeded", http.StatusTooManyRequests, 3040, "Capacity temporarily exceeded, please try again",
		http.StatusTooManyRequests, "server_error", "capacity_exceeded"}
	rowTimeout = Row{"timeout", http.StatusRequestTimeout, 3007, "Request timeout",
		http.StatusRequestTimeout, "server_error", "timeout"}
	rowAborted = Row{"aborted", http.StatusRequestTimeout, 3008, "Request was aborted",
		http.StatusRequestTimeout, "server_error", "aborted"}
	rowUnauthenticated = Row{"unauthenticated", http.StatusUnauthorized, 10000, "Authentication error",
		http.StatusUnauthorized, "invalid_request_error", "invalid_api_key"}
	rowForbidden = Row{"forbidden", http.StatusForbidden, 9109, "Unauthorized to access requested resource",
		http.StatusForbidden, "invalid_request_error", "permission_denied"}
	rowUnavailable = Row{"unavailable", http.StatusServiceUnavailable, 3043, "Service temporarily unavailable",
		http.StatusServiceUnavailable, "server_error", "service_unavailable"}
	rowNotFound = Row{"not_found", http.StatusNotFound, 3044, "Not found",
		http.StatusNotFound, "invalid_request_error", "not_found"}
	rowInternal = Row{"internal", http.StatusInternalServerError, 3045, "Internal server error",
		http.StatusInternalServerError, "server_error", ""}
	rowBodyTimeout = Row{"body_timeout", http.StatusRequestTimeout, 3046, "Request body not received in time",
		http.StatusRequestTimeout, "invalid_request_error", "request_timeout"}
	rowNoWorker = Row{"no_worker", http.StatusServiceUnavailable, 3047, "No worker is serving this model right now, please try again",
		http.StatusServiceUnavailable, "server_error", "model_unavailable"}
	rowStoreFull = Row{"store_full", http.StatusServiceUnavailable, 3048, "The request store is full, please try again",
		http.StatusServiceUnavailable, "server_error", "service_unavailable"}
	rowWorkerLost = Row{"worker_lost", http.StatusServiceUnavailable, 3049, "The worker running the request stopped, please try again",
		http.StatusServiceUnavailable, "server_error", "worker_lost"}
	rowDraining = Row{"draining", http.StatusServiceUnavailable, 3050, "This edge is shutting down, please retry",
		http.StatusServiceUnavailable, "server_error", "service_unavailable"}
	rowTenantQueueFull = Row{"tenant_queue_full", http.StatusTooManyRequests, 3051,
		"Too many of your requests are queued or running; retry when some have finished",
		http.StatusTooManyRequests, "requests", "tenant_queue_full"}
	rowAsyncResultsFull = Row{"async_results_full", http.StatusTooManyRequests, 3052,
		"Too many of your async results are kept; retry when older ones expire",
		http.StatusTooManyRequests, "requests", "async_results_full"}
	// Finetunes (LoRA adapters, finetunes.go). A finetune another tenant
	// holds is rowNotFound with finetuneNotFound, as one nobody holds.
	rowFinetuneExists = Row{"finetune_exists", http.StatusConflict, 3053, "A finetune of this name exists",
		http.StatusConflict, "invalid_request_error", "finetune_exists"}
	rowFinetunesFull = Row{"finetunes_full", http.StatusForbidden, 3054, "Finetune limit reached: delete one first",
		http.StatusForbidden, "invalid_request_error", "finetunes_full"}
	rowAdapterTooLarge = Row{"adapter_too_large", http.StatusRequestEntityTooLarge, 3055, "The adapter file is too large",
		http.StatusRequestEntityTooLarge, "invalid_request_error", "adapter_too_large"}
	rowNotAdapter = Row{"not_lora_adapter", http.StatusBadRequest, 3056, "The file is not a LoRA adapter",
		http.StatusBadRequest, "invalid_request_error", "not_lora_adapter"}
	rowBadAdapter = Row{"invalid_lora_adapter", http.StatusBadRequest, 3057, "The LoRA adapter cannot be used",
		http.StatusBadRequest, "invalid_request_error", "invalid_lora_adapter"}
	rowAdapterFailed = Row{"lora_failed", http.StatusBadRequest, 3058, "The LoRA adapter could not be applied to this model",
		http.StatusBadRequest, "invalid_request_error", "lora_failed"}
)

// finetuneNotFound is the message of every finetune lookup that finds
// nothing the caller holds.
const finetuneNotFound = "No such finetune"

// Retry-After of the 503s the edge answers at once.
const (
	retryNoWorker    = 5 * time.Second
	retryUnavailable = 2 * time.Second
	// retryTenantQueue: jobs end within seconds as a rule.
	retryTenantQueue = time.Second
)

// ErrorTable returns every row of the error table, for documentation and
// tests.
func ErrorTable() []Row {
	return []Row{
		rowInvalidInput, rowUnknownModel, rowModelForbidden, rowModelPlan, rowPromptTooLong,
		rowBodyTooLarge, rowQuotaExhausted, rowRateLimited, rowConcurrency,
		rowCapacity, rowTimeout, rowAborted, rowUnauthenticated, rowForbidden,
		rowUnavailable, rowNotFound, rowInternal,
		rowBodyTimeout, rowNoWorker, rowStoreFull, rowWorkerLost, rowDraining, rowTenantQueueFull,
		rowAsyncResultsFull, rowFinetuneExists, rowFinetunesFull, rowAdapterTooLarge, rowNotAdapter,
		rowBadAdapter, rowAdapterFailed,
	}
}

// Error is a refusal ready to render: its table row, the message for this
// instance, and the request field at fault (OpenAI's "param"), if any.
type Error struct {
	Row     Row
	Message string
	Param   string
	// RetryAfter, when positive, is sent as a Retry-After header (quota
	// refusals that know when a retry may succeed).
	RetryAfter time.Duration
	// RequestID names the request in the error body, for support and logs.
	RequestID string
	Err       error // the cause, for logs; never rendered
}

func (e *Error) Error() string {
	return fmt.Sprintf("edge: %s (%d): %s", e.Row.Name, e.Row.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

func newError(r Row, msg string, cause error) *Error {
	if msg == "" {
		msg = r.Message
	}
	return &Error{Row: r, Message: msg, Err: cause}
}

// Classify maps any error the request flow can meet to its table row. It is
// the only place that decides which row an error gets. Errors it does not
// know are internal errors whose text is not shown to the client.
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	// In this order: where an error matches several, the first decides.
	for _, classify := range [...]func(error) *Error{requestError, limitError, flowError, chatError, finetuneError} {
		if e := classify(err); e != nil {
			return e
		}
	}
	// ErrBrokenStream, queue.ErrGap and anything unknown: the client learns
	// only that the server failed; the cause goes to the log.
	return newError(rowInternal, "", err)
}

// requestError maps what is wrong with the request itself: its input,
// length, model, body or credentials, and a worker's refusal of it
// (classifyFrame); nil for any other error.
func requestError(err error) *Error {
	var (
		in  *InputError
		le  *LengthError
		ile *InputLengthError
		me  *ModelError
		fe  *queue.FrameError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &in):
		msg := in.Msg
		if in.Field != "" {
			msg = in.Field + ": " + in.Msg
		}
		return &Error{Row: rowInvalidInput, Message: msg, Param: in.Field, Err: err}
	case errors.As(err, &le):
		return &Error{Row: rowPromptTooLong, Message: le.message(), Param: "messages", Err: err}
	case errors.As(err, &ile):
		return &Error{Row: rowPromptTooLong, Message: ile.message(), Param: "input", Err: err}
	case errors.As(err, &me) && errors.Is(me.Err, ErrUnknownModel):
		return &Error{Row: rowUnknownModel, Message: fmt.Sprintf("No such model %s or task", me.Name), Param: "model", Err: err}
	case errors.As(err, &me) && errors.Is(me.Err, ErrModelForbidden):
		return &Error{Row: rowModelForbidden, Message: rowModelForbidden.Message, Param: "model", Err: err}
	case errors.As(err, &me) && errors.Is(me.Err, ErrModelNotEntitled):
		return &Error{Row: rowModelPlan, Message: fmt.Sprintf("%s: %s", rowModelPlan.Message, me.Name), Param: "model", Err: err}
	case errors.As(err, &mbe):
		return newError(rowBodyTooLarge, fmt.Sprintf("Request is too large: the body exceeds %d bytes", mbe.Limit), err)
	case errors.As(err, &fe):
		return classifyFrame(fe)
	case errors.Is(err, ErrAccountMismatch):
		return newError(rowForbidden, "the account id in the path does not match the token", err)
	case errors.Is(err, auth.ErrForbidden):
		return newError(rowForbidden, "", err)
	case errors.Is(err, auth.ErrUnauthenticated):
		return newError(rowUnauthenticated, "", err)
	}
	return nil
}

// limitError maps the tenant's limits (quota) and the queue's bounds, with
// when to retry; nil for any other error.
func limitError(err error) *Error {
	var qe *quota.LimitError
	switch {
	case errors.As(err, &qe) && qe.Key != "":
		return withRetry(keyLimitError(qe, err), err)
	case errors.Is(err, quota.ErrBudgetExhausted):
		return withRetry(newError(rowQuotaExhausted, "", err), err)
	case errors.Is(err, quota.ErrRateLimited):
		return withRetry(newError(rowRateLimited, "", err), err)
	case errors.Is(err, quota.ErrConcurrency):
		return withRetry(newError(rowConcurrency, limitMessage(rowConcurrency, err), err), err)
	case errors.Is(err, quota.ErrQueueBound):
		return retryIn(newError(rowTenantQueueFull, limitMessage(rowTenantQueueFull, err), err), retryTenantQueue)
	case errors.Is(err, quota.ErrAsyncRecords):
		return withRetry(newError(rowAsyncResultsFull, recordsMessage(err), err), err)
	case errors.Is(err, queue.ErrTenantQueueFull):
		return retryIn(newError(rowTenantQueueFull,
			"Too many of your requests for this model are waiting in the queue; retry when some have finished", err), retryTenantQueue)
	case errors.Is(err, quota.ErrUnavailable):
		return newError(rowUnavailable, "", err)
	case errors.Is(err, queue.ErrQueueFull):
		return newError(rowCapacity, "", err)
	}
	return nil
}

// flowError maps what happened to a request on its way: the body's
// deadline, no worker, the queue's store, a lost worker, a draining edge,
// timeouts, the client going away and records not found; nil for any other
// error.
func flowError(err error) *Error {
	switch {
	case errors.Is(err, ErrBodyTimeout):
		return newError(rowBodyTimeout, "", err)
	case errors.Is(err, queue.ErrNoWorker):
		return retryIn(newError(rowNoWorker, "", err), retryNoWorker)
	case errors.Is(err, queue.ErrStoreFull):
		return retryIn(newError(rowStoreFull, "", err), retryUnavailable)
	case errors.Is(err, queue.ErrUnavailable):
		return retryIn(newError(rowUnavailable, "", err), retryUnavailable)
	case errors.Is(err, queue.ErrWorkerLost):
		return retryIn(newError(rowWorkerLost, "", err), retryUnavailable)
	case errors.Is(err, ErrDraining):
		return retryIn(newError(rowDraining, "", err), retryDraining)
	case errors.Is(err, queue.ErrStreamTimeout), errors.Is(err, context.DeadlineExceeded):
		return newError(rowTimeout, "", err)
	case errors.Is(err, context.Canceled):
		return newError(rowAborted, "", err)
	case errors.Is(err, ErrNotFound), errors.Is(err, queue.ErrNotFound):
		return newError(rowNotFound, "", err)
	}
	return nil
}

// finetuneError maps the refusals of the finetune API and of a request's
// lora; nil for any other error.
func finetuneError(err error) *Error {
	detail := func(r Row) string {
		if d := clientDetail(err.Error()); d != "" {
			return r.Message + ": " + d
		}
		return r.Message
	}
	switch {
	case errors.Is(err, queue.ErrFinetuneNotFound):
		e := newError(rowNotFound, finetuneNotFound, err)
		e.Param = "lora"
		return e
	case errors.Is(err, queue.ErrFinetuneExists):
		return newError(rowFinetuneExists, "", err)
	case errors.Is(err, queue.ErrFinetunesFull):
		return newError(rowFinetunesFull, fmt.Sprintf("%s (an account may hold %d)", rowFinetunesFull.Message, queue.MaxFinetunes), err)
	case errors.Is(err, queue.ErrAdapterQuota):
		return newError(rowAdapterTooLarge, "Your finetunes' files would exceed your share of the adapter store: delete some first", err)
	case errors.Is(err, queue.ErrAdapterTooLarge):
		return newError(rowAdapterTooLarge, fmt.Sprintf("%s: the limit is %d bytes", rowAdapterTooLarge.Message, queue.MaxAdapterFileBytes), err)
	case errors.Is(err, queue.ErrFinetuneInvalid):
		msg := clientDetail(strings.TrimPrefix(err.Error(), queue.ErrFinetuneInvalid.Error()+": "))
		return newError(rowInvalidInput, msg, err) // the table's message when msg is ""
	case errors.Is(err, lora.ErrNotAdapter):
		return newError(rowNotAdapter, detail(rowNotAdapter), err)
	case errors.Is(err, lora.ErrBadAdapter):
		return newError(rowBadAdapter, detail(rowBadAdapter), err)
	case errors.Is(err, ErrNoFinetunes):
		return &Error{Row: rowInvalidInput, Message: "lora: LoRA adapters are not enabled on this deployment", Param: "lora", Err: err}
	}
	return nil
}

// limitMessage says how many jobs a concurrency or queue-bound refusal
// counted against which limit (an async batch asks for one slot per job).
func limitMessage(r Row, err error) string {
	var le *quota.LimitError
	if !errors.As(err, &le) || le.Requested == 0 {
		return r.Message
	}
	return fmt.Sprintf("%s: %d of your jobs are queued or running, this request adds %d, the limit is %d",
		r.Message, le.InUse, le.Requested, int(le.Limit))
}

// keyLimitError is the refusal of a request by its API key's own limits
// (billing/ledger.KeyPolicy): the tenant's rows, naming the key.
func keyLimitError(qe *quota.LimitError, err error) *Error {
	switch {
	case errors.Is(qe.Err, quota.ErrBudgetExhausted):
		period := "daily"
		if qe.Period == queue.PeriodMonth {
			period = "monthly"
		}
		return newError(rowQuotaExhausted, fmt.Sprintf("Your API key %s has used up its %s budget of neurons", qe.Key, period), err)
	case errors.Is(qe.Err, quota.ErrConcurrency):
		return newError(rowConcurrency, fmt.Sprintf("Rate limited: your API key %s has %d requests in flight, its limit", qe.Key, qe.InUse), err)
	default:
		return newError(rowRateLimited, fmt.Sprintf("Rate limited: your API key %s made its requests for the last minute", qe.Key), err)
	}
}

// recordsMessage says how many async results a refusal counted.
func recordsMessage(err error) string {
	var le *quota.LimitError
	if !errors.As(err, &le) || le.Requested == 0 {
		return rowAsyncResultsFull.Message
	}
	return fmt.Sprintf("%s: %d of your async results are kept, this request adds %d, the limit is %d",
		rowAsyncResultsFull.Message, le.InUse, le.Requested, int(le.Limit))
}

func withRetry(e *Error, err error) *Error {
	var le *quota.LimitError
	if errors.As(err, &le) {
		e.RetryAfter = le.RetryAfter
	}
	return e
}

func retryIn(e *Error, d time.Duration) *Error {
	e.RetryAfter = d
	return e
}

// classifyFrame maps a worker's error frame. For the refusals a worker
// explains (which limit, which field, why it stopped) clients see the
// worker's message if it is one short printable line (clientDetail), else
// the table's; internal errors and unknown kinds always show the table's
// message: their text may quote an internal error and goes to the log only.
func classifyFrame(fe *queue.FrameError) *Error {
	var r Row
	switch fe.Kind {
	case queue.ErrKindPromptTooLong:
		r = rowPromptTooLong
	case queue.ErrKindCapacity:
		r = rowCapacity
	case queue.ErrKindInvalidInput:
		r = rowInvalidInput
	case queue.ErrKindUnknownModel:
		r = rowUnknownModel
	case queue.ErrKindTimeout:
		r = rowTimeout
	case queue.ErrKindAborted:
		r = rowAborted
	case queue.ErrKindUnavailable:
		return retryIn(newError(rowUnavailable, "", fe), retryUnavailable)
	case queue.ErrKindAdapter:
		r = rowAdapterFailed
	default:
		return newError(rowInternal, "", fe)
	}
	return newError(r, clientDetail(fe.Message), fe)
}

// maxDetail bounds the worker detail a client message carries.
const maxDetail = 200

// clientDetail is msg if it is one printable line of at most maxDetail
// bytes, else "".
func clientDetail(msg string) string {
	if len(msg) > maxDetail {
		return ""
	}
	for _, c := range msg {
		if c < 0x20 || c == 0x7f || c == '\uFFFD' {
			return ""
		}
	}
	return msg
}

// nativeEnvelope is the Workers AI response envelope.
type nativeEnvelope struct {
	Result   any           `json:"result"`
	Success  bool          `json:"success"`
	Errors   []nativeError `json:"errors"`
	Messages []string      `json:"messages"`
	// RequestID names the refused request (error envelopes only).
	RequestID string `json:"request_id,omitempty"`
}

type nativeError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// openAIError is OpenAI's error body.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message   string  `json:"message"`
	Type      string  `json:"type"`
	Param     *string `json:"param"`
	Code      *string `json:"code"`
	RequestID string  `json:"request_id,omitempty"`
}

func (e *Error) native() nativeEnvelope {
	return nativeEnvelope{
		Result:    nil,
		Success:   false,
		Errors:    []nativeError{{Code: e.Row.Code, Message: e.Message}},
		Messages:  []string{},
		RequestID: e.RequestID,
	}
}

func (e *Error) openAI() openAIError {
	body := openAIErrorBody{Message: e.Message, Type: e.Row.OpenAIType, RequestID: e.RequestID}
	if e.Param != "" {
		p := e.Param
		body.Param = &p
	}
	if e.Row.OpenAICode != "" {
		c := e.Row.OpenAICode
		body.Code = &c
	}
	return openAIError{Error: body}
}

// writeJSON writes v as a JSON response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own response types reach here; they always marshal.
		http.Error(w, `{"success":false}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeNativeError(w http.ResponseWriter, e *Error) {
	setRetryAfter(w, e)
	writeJSON(w, e.Row.Status, e.native())
}

func writeOpenAIError(w http.ResponseWriter, e *Error) {
	setRetryAfter(w, e)
	writeJSON(w, e.Row.OpenAIStatus, e.openAI())
}

func setRetryAfter(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
}
