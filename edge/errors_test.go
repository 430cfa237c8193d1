package edge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/models/chat"
	"github.com/bulkhead-ai/bulkhead/models/lora"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

func TestErrorTableRows(t *testing.T) {
	names := map[string]bool{}
	for _, r := range ErrorTable() {
		switch {
		case names[r.Name]:
			t.Errorf("row %q appears twice", r.Name)
		case r.Status < 400 || r.Status > 599 || r.OpenAIStatus < 400 || r.OpenAIStatus > 599:
			t.Errorf("row %q: statuses %d/%d are not errors", r.Name, r.Status, r.OpenAIStatus)
		case r.Code == 0 || r.Message == "" || r.OpenAIType == "":
			t.Errorf("row %q is incomplete: %+v", r.Name, r)
		}
		names[r.Name] = true
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		name     string
		err      error
		row      Row
		msgHas   string
		param    string
		retryAft time.Duration
	}{
		{"input", &InputError{Field: "max_tokens", Msg: "must be an integer"}, rowInvalidInput, "max_tokens: must be an integer", "max_tokens", 0},
		{"input wrapped", fmt.Errorf("requests[1]: %w", &InputError{Msg: "bad"}), rowInvalidInput, "bad", "", 0},
		{"length", &LengthError{PromptTokens: 5000, MaxTokens: 256, Context: 4096}, rowPromptTooLong,
			"prompt is 5000 tokens and max_tokens is 256; the model's context window is 4096 tokens", "messages", 0},
		{"unknown model", &ModelError{Name: "@cf/x", Err: ErrUnknownModel}, rowUnknownModel, "No such model @cf/x or task", "model", 0},
		{"model forbidden", &ModelError{Name: "@cf/x", Err: ErrModelForbidden}, rowModelForbidden, "not allowed", "model", 0},
		{"body too large", &http.MaxBytesError{Limit: 10}, rowBodyTooLarge, "exceeds 10 bytes", "", 0},
		{"account", ErrAccountMismatch, rowForbidden, "account id", "", 0},
		{"auth forbidden", fmt.Errorf("%w: scope", auth.ErrForbidden), rowForbidden, "Unauthorized", "", 0},
		{"auth unauthenticated", fmt.Errorf("%w: expired", auth.ErrUnauthenticated), rowUnauthenticated, "Authentication error", "", 0},
		{"budget", &quota.LimitError{Err: quota.ErrBudgetExhausted, RetryAfter: 90 * time.Minute}, rowQuotaExhausted, "neurons", "", 90 * time.Minute},
		{"rate", &quota.LimitError{Err: quota.ErrRateLimited, RetryAfter: 3 * time.Second}, rowRateLimited, "per minute", "", 3 * time.Second},
		{"concurrency", quota.ErrConcurrency, rowConcurrency, "concurrent", "", 0},
		{"concurrency of a batch", &quota.LimitError{Err: quota.ErrConcurrency, Limit: 2, Requested: 32}, rowConcurrency,
			"0 of your jobs are queued or running, this request adds 32, the limit is 2", "", 0},
		{"class queue bound", &quota.LimitError{Err: quota.ErrQueueBound, Limit: 8, InUse: 7, Requested: 2, RetryAfter: time.Second},
			rowTenantQueueFull, "7 of your jobs are queued or running, this request adds 2, the limit is 8", "", time.Second},
		{"stream's tenant bound", fmt.Errorf("%w: tenant a", queue.ErrTenantQueueFull), rowTenantQueueFull, "waiting in the queue", "", time.Second},
		{"no such finetune", queue.ErrFinetuneNotFound, rowNotFound, "No such finetune", "lora", 0},
		{"finetune name taken", fmt.Errorf("%w: %q", queue.ErrFinetuneExists, "poet"), rowFinetuneExists, "exists", "", 0},
		{"finetunes full", queue.ErrFinetunesFull, rowFinetunesFull, "may hold 30", "", 0},
		{"adapter file too large", queue.ErrAdapterTooLarge, rowAdapterTooLarge, "268435456 bytes", "", 0},
		{"adapter share", queue.ErrAdapterQuota, rowAdapterTooLarge, "share of the adapter store", "", 0},
		{"finetune invalid", fmt.Errorf("%w: model is required", queue.ErrFinetuneInvalid), rowInvalidInput, "model is required", "", 0},
		{"not an adapter", fmt.Errorf("%w: general.type", lora.ErrNotAdapter), rowNotAdapter, "general.type", "", 0},
		{"bad adapter", fmt.Errorf("%w: rank 64", lora.ErrBadAdapter), rowBadAdapter, "rank 64", "", 0},
		{"adapter store full", fmt.Errorf("%w: adapters", queue.ErrStoreFull), rowStoreFull, "store is full", "", 2 * time.Second},
		{"worker's adapter failure", &queue.FrameError{Kind: queue.ErrKindAdapter, Message: "the LoRA adapter does not fit the model"}, rowAdapterFailed,
			"does not fit", "", 0},
		{"redis down", quota.ErrUnavailable, rowUnavailable, "unavailable", "", 0},
		{"queue full", fmt.Errorf("%w: maximum messages", queue.ErrQueueFull), rowCapacity, "Capacity", "", 0},
		{"idle timeout", queue.ErrStreamTimeout, rowTimeout, "timeout", "", 0},
		{"deadline", context.DeadlineExceeded, rowTimeout, "timeout", "", 0},
		{"canceled", context.Canceled, rowAborted, "aborted", "", 0},
		{"gap", queue.ErrGap, rowInternal, "Internal", "", 0},
		{"broken", ErrBrokenStream, rowInternal, "Internal", "", 0},
		{"not found", ErrNotFound, rowNotFound, "Not found", "", 0},
		{"queue not found", queue.ErrNotFound, rowNotFound, "Not found", "", 0},
		{"chat template refusal", fmt.Errorf("render: %w", &chat.TemplateError{Message: "System role not supported"}), rowInvalidInput, "System role not supported", "messages", 0},
		{"chat invalid role", fmt.Errorf("%w: message 0 has role \"x\"", chat.ErrInvalidRole), rowInvalidInput, "invalid role", "messages", 0},
		{"chat render failure", fmt.Errorf("%w: budget", chat.ErrRender), rowInvalidInput, "cannot render", "messages", 0},
		{"unknown error text hidden", errors.New("secret detail"), rowInternal, "Internal server error", "", 0},
		{"frame prompt too long", &queue.FrameError{Kind: queue.ErrKindPromptTooLong, Message: "10 + 5 > 12"}, rowPromptTooLong, "10 + 5 > 12", "", 0},
		{"frame capacity", &queue.FrameError{Kind: queue.ErrKindCapacity, Message: "busy"}, rowCapacity, "busy", "", 0},
		{"frame invalid", &queue.FrameError{Kind: queue.ErrKindInvalidInput, Message: "bad"}, rowInvalidInput, "bad", "", 0},
		{"frame unknown model", &queue.FrameError{Kind: queue.ErrKindUnknownModel, Message: "m"}, rowUnknownModel, "m", "", 0},
		{"frame timeout", &queue.FrameError{Kind: queue.ErrKindTimeout, Message: "late"}, rowTimeout, "late", "", 0},
		{"frame aborted", &queue.FrameError{Kind: queue.ErrKindAborted, Message: "gone"}, rowAborted, "gone", "", 0},
		{"frame internal hides text", &queue.FrameError{Kind: queue.ErrKindInternal, Message: "panic at x.go:12"}, rowInternal, "Internal server error", "", 0},
		{"frame unknown kind", &queue.FrameError{Kind: "new_kind", Message: "?"}, rowInternal, "Internal server error", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := Classify(c.err)
			if e.Row != c.row {
				t.Fatalf("row %q, want %q", e.Row.Name, c.row.Name)
			}
			if !strings.Contains(e.Message, c.msgHas) {
				t.Errorf("message %q lacks %q", e.Message, c.msgHas)
			}
			if e.Param != c.param {
				t.Errorf("param %q, want %q", e.Param, c.param)
			}
			if e.RetryAfter != c.retryAft {
				t.Errorf("retry after %v, want %v", e.RetryAfter, c.retryAft)
			}
			if !errors.Is(e, c.err) && c.err != nil {
				t.Errorf("the row does not wrap its cause")
			}
		})
	}
	if Classify(nil) != nil {
		t.Error("Classify(nil) != nil")
	}
}

// TestErrorsOverHTTP drives every error row through the real handlers and
// checks status, code and message on the native API.
func TestErrorsOverHTTP(t *testing.T) {
	h := newHarness(t, harnessOpts{maxBody: 4096, idleTimeout: 300 * time.Millisecond, maxPerTenant: 1})
	run := "/ai/run/" + modelStories
	fail := func(kind queue.ErrorKind, msg string) behaviour {
		return func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
			_ = rp.Fail(ctx, kind, msg)
		}
	}
	rawFrames := func(frames ...queue.Frame) behaviour {
		return func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
			for _, f := range frames {
				b, _ := queue.EncodeFrame(&f)
				_ = h.nc.Publish(job.Reply, b)
			}
		}
	}
	silent := func(context.Context, *harness, *queue.Job, *queue.Replier) {}
	// Fill the idle model's queue (no worker, at most one job per model).
	status, _, body := h.do("POST", "/ai/run/"+modelIdle+"?queueRequest=true", "alice", `{"requests":[{"prompt":"x"}]}`)
	if status != http.StatusOK {
		t.Fatalf("filling the idle queue: %d %s", status, body)
	}

	cases := []struct {
		name, path, token, body string
		limiter                 error
		worker                  behaviour
		status, code            int
		msgHas                  string
		enqueues                bool
	}{
		{name: "no token", path: run, body: `{"prompt":"x"}`, status: 401, code: 10000, msgHas: "Authentication error"},
		{name: "bad token", path: run, token: "forged", body: `{"prompt":"x"}`, status: 401, code: 10000},
		{name: "scope missing", path: run, token: "reader", body: `{"prompt":"x"}`, status: 403, code: 9109},
		{name: "account mismatch", path: "/client/v4/accounts/bob/ai/run/" + modelStories, token: "alice", body: `{"prompt":"x"}`,
			status: 403, code: 9109, msgHas: "account id"},
		{name: "unknown model", path: "/ai/run/@cf/meta/nope", token: "alice", body: `{"prompt":"x"}`,
			status: 400, code: 5007, msgHas: "No such model @cf/meta/nope or task"},
		{name: "model not allowed", path: run, token: "limited", body: `{"prompt":"x"}`, status: 403, code: 5018},
		{name: "malformed json", path: run, token: "alice", body: `{"prompt":`, status: 400, code: 5004, msgHas: "malformed JSON"},
		{name: "syntax error", path: run, token: "alice", body: `{"prompt" "x"}`, status: 400, code: 5004, msgHas: "malformed JSON at byte"},
		{name: "empty body", path: run, token: "alice", body: ``, status: 400, code: 5004, msgHas: "empty"},
		{name: "not an object", path: run, token: "alice", body: `["x"]`, status: 400, code: 5004, msgHas: "JSON object"},
		{name: "trailing data", path: run, token: "alice", body: `{"prompt":"x"} {}`, status: 400, code: 5004, msgHas: "after the JSON object"},
		{name: "wrong type", path: run, token: "alice", body: `{"prompt":"x","max_tokens":"many"}`, status: 400, code: 5004,
			msgHas: "max_tokens: must be an integer, not string"},
		{name: "float for int", path: run, token: "alice", body: `{"prompt":"x","max_tokens":1.5}`, status: 400, code: 5004, msgHas: "max_tokens"},
		{name: "nested wrong type", path: run, token: "alice", body: `{"messages":[{"role":1,"content":"x"}]}`, status: 400, code: 5004,
			msgHas: "messages.role: must be a string"},
		{name: "bad role", path: run, token: "alice", body: `{"messages":[{"role":"robot","content":"x"}]}`, status: 400, code: 5004,
			msgHas: "messages[0].role"},
		{name: "content not text", path: run, token: "alice", body: `{"messages":[{"role":"user","content":5}]}`, status: 400, code: 5004,
			msgHas: "messages[0].content"},
		{name: "both prompt and messages", path: run, token: "alice", body: `{"prompt":"x","messages":[]}`, status: 400, code: 5004},
		{name: "neither", path: run, token: "alice", body: `{"stream":true}`, status: 400, code: 5004, msgHas: "prompt or messages"},
		{name: "empty prompt", path: run, token: "alice", body: `{"prompt":""}`, status: 400, code: 5004, msgHas: "prompt"},
		{name: "temperature range", path: run, token: "alice", body: `{"prompt":"x","temperature":9}`, status: 400, code: 5004, msgHas: "temperature"},
		{name: "zero max_tokens", path: run, token: "alice", body: `{"prompt":"x","max_tokens":0}`, status: 400, code: 5004, msgHas: "max_tokens"},
		{name: "stop type", path: run, token: "alice", body: `{"prompt":"x","stop":5}`, status: 400, code: 5004, msgHas: "stop"},
		{name: "body too large", path: run, token: "alice", body: `{"prompt":"` + strings.Repeat("a", 5000) + `"}`,
			status: 413, code: 3006, msgHas: "4096 bytes"},
		{name: "prompt too long", path: run, token: "alice", body: `{"prompt":"Once upon a time","max_tokens":100000}`,
			status: 413, code: 3006, msgHas: "max_tokens is 100000; the model's context window is 2048 tokens"},
		{name: "rate limited", path: run, token: "alice", body: `{"prompt":"x"}`, limiter: &quota.LimitError{Err: quota.ErrRateLimited, RetryAfter: time.Second},
			status: 429, code: 3037},
		{name: "concurrency", path: run, token: "alice", body: `{"prompt":"x"}`, limiter: quota.ErrConcurrency, status: 429, code: 3038},
		{name: "budget", path: run, token: "alice", body: `{"prompt":"x"}`, limiter: quota.ErrBudgetExhausted, status: 429, code: 3036},
		{name: "redis down", path: run, token: "alice", body: `{"prompt":"x"}`, limiter: quota.ErrUnavailable, status: 503, code: 3043},
		{name: "tenant queue full", path: "/ai/run/" + modelIdle + "?queueRequest=true", token: "alice", body: `{"requests":[{"prompt":"x"}]}`,
			status: 429, code: 3051, msgHas: "waiting in the queue"},
		{name: "tenant class bound", path: run, token: "alice", body: `{"prompt":"x"}`, status: 429, code: 3051,
			limiter: &quota.LimitError{Err: quota.ErrQueueBound, Limit: 4, InUse: 4, Requested: 1, RetryAfter: time.Second},
			msgHas:  "4 of your jobs are queued or running, this request adds 1, the limit is 4"},
		{name: "worker busy", path: run + "?rejectIfBusy=true", token: "alice", body: `{"prompt":"x"}`,
			worker: fail(queue.ErrKindCapacity, "all slots busy"), status: 429, code: 3040, msgHas: "all slots busy", enqueues: true},
		{name: "worker prompt too long", path: run, token: "alice", body: `{"prompt":"x"}`,
			worker: fail(queue.ErrKindPromptTooLong, "prompt is 600 tokens"), status: 413, code: 3006, msgHas: "600", enqueues: true},
		{name: "worker timeout", path: run, token: "alice", body: `{"prompt":"x"}`,
			worker: fail(queue.ErrKindTimeout, "deadline"), status: 408, code: 3007, enqueues: true},
		{name: "worker aborted", path: run, token: "alice", body: `{"prompt":"x"}`,
			worker: fail(queue.ErrKindAborted, "cancelled"), status: 408, code: 3008, enqueues: true},
		{name: "worker internal", path: run, token: "alice", body: `{"prompt":"x"}`,
			worker: fail(queue.ErrKindInternal, "nan in logits"), status: 500, code: 3045, msgHas: "Internal server error", enqueues: true},
		{name: "worker invalid", path: run, token: "alice", body: `{"prompt":"x"}`,
			worker: fail(queue.ErrKindInvalidInput, "bad sampling"), status: 400, code: 5004, msgHas: "bad sampling", enqueues: true},
		{name: "worker unknown model", path: run, token: "alice", body: `{"prompt":"x"}`,
			worker: fail(queue.ErrKindUnknownModel, "not served here"), status: 400, code: 5007, enqueues: true},
		{name: "frame gap", path: run, token: "alice", body: `{"prompt":"x"}`,
			worker: rawFrames(queue.Frame{Seq: 1, Kind: queue.KindToken, Text: "a"}, queue.Frame{Seq: 3, Kind: queue.KindToken, Text: "c"}),
			status: 500, code: 3045, enqueues: true},
		{name: "worker silent", path: run, token: "alice", body: `{"prompt":"x"}`, worker: silent, status: 408, code: 3007, enqueues: true},
		{name: "gap in stream before first frame", path: run, token: "alice", body: `{"prompt":"x","stream":true}`,
			worker: rawFrames(queue.Frame{Seq: 2, Kind: queue.KindToken, Text: "b"}), status: 500, code: 3045, enqueues: true},
		{name: "no route", path: "/ai/nothing", token: "alice", body: `{}`, status: 404, code: 3044},
		{name: "async poll unknown", path: run, token: "alice", body: `{"request_id":"0123456789abcdef0123456789abcdef-1"}`, status: 404, code: 3044},
		{name: "async poll malformed", path: run, token: "alice", body: `{"request_id":"../../etc"}`, status: 404, code: 3044},
		{name: "batch without queueRequest", path: run, token: "alice", body: `{"requests":[{"prompt":"x"}]}`, status: 400, code: 5004},
		{name: "batch too long prompt", path: run + "?queueRequest=true", token: "alice",
			body: `{"requests":[{"prompt":"x"},{"prompt":"y","max_tokens":9999}]}`, status: 413, code: 3006},
		{name: "batch bad field", path: run + "?queueRequest=true", token: "alice",
			body: `{"requests":[{"prompt":"x"},{"prompt":"y","top_k":"z"}]}`, status: 400, code: 5004, msgHas: "requests[1].top_k"},
		{name: "batch stream", path: run + "?queueRequest=true", token: "alice",
			body: `{"requests":[{"prompt":"x","stream":true}]}`, status: 400, code: 5004, msgHas: "requests[0].stream"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.limiter.set(c.limiter)
			defer h.limiter.set(nil)
			if c.worker != nil {
				h.setBehaviour(c.worker)
				defer h.setBehaviour(reply("Hello", " world"))
			}
			before := h.jobCount()
			status, hdr, body := h.do("POST", c.path, c.token, c.body)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, body)
			}
			code, msg := nativeErr(t, body)
			if code != c.code {
				t.Errorf("code %d, want %d (%s)", code, c.code, msg)
			}
			if !strings.Contains(msg, c.msgHas) {
				t.Errorf("message %q lacks %q", msg, c.msgHas)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if c.enqueues {
				testkit.Poll(t, 5*time.Second, testkit.Cond("the job to reach the worker", func() bool { return h.jobCount() == before+1 }))
			} else if n := h.jobCount(); n != before {
				t.Errorf("a refused request reached the worker (%d jobs, was %d)", n, before)
			}
			if c.limiter != nil && c.status == 429 && c.code == 3037 && hdr.Get("Retry-After") != "1" {
				t.Errorf("Retry-After %q, want 1", hdr.Get("Retry-After"))
			}
		})
	}
}
