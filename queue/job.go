package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrBadMessage reports a job or frame that does not decode or is incomplete.
var ErrBadMessage = errors.New("queue: bad message")

// Sampling carries a request's sampling parameters. Zero values mean the
// worker's defaults (greedy when Temperature is 0).
type Sampling struct {
	Temperature       float32 `json:"temperature,omitempty"`
	TopK              int     `json:"top_k,omitempty"`
	TopP              float32 `json:"top_p,omitempty"`
	MinP              float32 `json:"min_p,omitempty"`
	RepetitionPenalty float32 `json:"repetition_penalty,omitempty"`
	FrequencyPenalty  float32 `json:"frequency_penalty,omitempty"`
	PresencePenalty   float32 `json:"presence_penalty,omitempty"`
	Seed              uint64  `json:"seed,omitempty"`
}

// Job is one inference request as it travels from the edge to a worker.
//
// Tenant comes from the verified token at the edge, never from the request
// body. Prompt is the final prompt text (chat template already applied); the
// worker tokenizes it itself and checks admission again, so PromptTokens (the
// edge's count) is only a cross-check. A rendered conversation also carries
// Segments (see Segment): the worker tokenizes those, segment by segment,
// and Prompt is then their plain text.
//
// CachePrefix puts the request in its tenant's prefix cache: the worker
// reuses the KV of the leading full pages this prompt shares with earlier
// prompts of the same Tenant, and publishes this prompt's pages for later
// ones. The cache namespace is always Tenant; tenants never share. The edge
// sets it on every job unless the request body opted out (cache_prefix
// false) or the tenant's class keeps the cache off (tenants.Class).
type Job struct {
	ID           string    `json:"id"`     // request id; also the Nats-Msg-Id for de-duplication
	Tenant       string    `json:"tenant"` // tenant namespace (JWT sub)
	Model        string    `json:"model"`  // catalog name, e.g. @cf/meta/llama-3.2-1b-instruct
	Prompt       string    `json:"prompt"`
	Segments     []Segment `json:"segments,omitempty"`      // the prompt by origin; when set, Prompt is their text
	ParseSpecial bool      `json:"parse_special,omitempty"` // prompt contains template special tokens
	AddBOS       bool      `json:"add_bos,omitempty"`       // the worker adds BOS (the template did not)
	PromptTokens int       `json:"prompt_tokens"`           // the edge's count
	MaxTokens    int       `json:"max_tokens"`
	Sampling     Sampling  `json:"sampling"`
	Stop         []string  `json:"stop,omitempty"`
	RejectIfBusy bool      `json:"reject_if_busy,omitempty"`
	CachePrefix  bool      `json:"cache_prefix,omitempty"` // use Tenant's prefix cache (see above)
	Async        bool      `json:"async,omitempty"`        // results go to the results store, not only the reply subject
	// Key is the tenant's API key the request came with (the token's "key"
	// claim; "" for none), carried into its usage event.
	Key string `json:"key,omitempty"`
	// Webhook, on an async job, is where its end is announced (notify.go).
	Webhook *Webhook `json:"webhook,omitempty"`
	// EventSubject, on an async job, is the tenant's event subject its end
	// is also sent to (events.go).
	EventSubject string    `json:"event_subject,omitempty"`
	Reply        string    `json:"reply"`    // subject for reply frames
	Deadline     time.Time `json:"deadline"` // the worker gives up (ErrKindTimeout) after this
	// Rates are the prices the edge admitted the job at (neurons per
	// million tokens); the worker prices its usage event with them.
	Rates *Rates `json:"rates,omitempty"`
	// Submitted is when the job entered the jobs stream: workers set it from
	// the stream's timestamp when they take the job, so it travels with a
	// decode hand-over. Usage events measure queue, first-token and total
	// times from it.
	Submitted time.Time `json:"submitted,omitzero"`
	// Grammar, when set, constrains the output (structured output): the
	// worker compiles it and samples only tokens that keep the text valid.
	Grammar *Grammar `json:"grammar,omitempty"`
	// Logprobs asks for each token's log-probability on its frame, with the
	// TopLogprobs (0 to 20) most likely alternatives.
	Logprobs    bool `json:"logprobs,omitempty"`
	TopLogprobs int  `json:"top_logprobs,omitempty"`
	// LogitBias adds to the logits of its tokens before sampling (OpenAI's
	// logit_bias; -100 bans a token): at most MaxLogitBias entries, each
	// bias in [-100, 100]. The edge checked the ids against the model's
	// vocabulary; the worker checks them again.
	LogitBias []TokenBias `json:"logit_bias,omitempty"`
	// Metadata is the request's metadata (OpenAI's: string pairs within
	// ValidateMetadata's bounds), carried into its usage event.
	Metadata map[string]string `json:"metadata,omitempty"`
	// User is the tenant's own id for its end user (OpenAI's user or
	// safety_identifier), carried into the usage event; never a tenant.
	User string `json:"user,omitempty"`
	// Weight is the tenant's scheduling weight (its tenant class, see
	// docs/fairness.md): a worker's fair scheduler gives a tenant of weight
	// 2 twice the service of one of weight 1 when both wait. Only the edge
	// sets it, from the class of the verified tenant; 0 means 1.
	Weight float64 `json:"weight,omitempty"`
	// Route is the id of the worker the edge routed the job to (it holds,
	// or is likely to hold, the job's prefix; docs/routing.md): the job is
	// published on that worker's queue of the tenant (RouteSubject), not
	// the tenant's shared one. Empty: any worker takes it.
	Route string `json:"route,omitempty"`
	// Embed, when set, makes this an encoder job (embed.go): MaxTokens is
	// then 0 and Prompt empty.
	Embed *Embed `json:"embed,omitempty"`
	// Prediction is the output the client expects (OpenAI's predicted
	// outputs), as text: the worker tokenizes it and drafts from it
	// (speculative decoding). It never changes the output.
	Prediction string `json:"prediction,omitempty"`
	// NoDraft turns speculative decoding off for this job (the body's
	// speculate false).
	NoDraft bool `json:"no_draft,omitempty"`
	// LoRA, when set, is the adapter the job runs with: one of Tenant's
	// finetunes for Model, resolved by the edge (never by a client field
	// naming another tenant). The worker reads its files from Tenant's
	// objects only (AdapterObject) and checks their sha256.
	LoRA *LoRARef `json:"lora,omitempty"`
}

// Subject is the jobs-stream subject the job is published on: its worker's
// queue of the tenant when routed, else the tenant's shared queue.
func (j *Job) Subject() string {
	if j.Route != "" {
		return RouteSubject(j.Model, j.Tenant, j.Route)
	}
	return TenantJobSubject(j.Model, j.Tenant)
}

// ReadySubject is the doorbell rung after the job is stored: the routed
// worker's own bell when routed (only it reads that queue while it lives),
// else every worker's bell of the tenant.
func (j *Job) ReadySubject() string {
	if j.Route != "" {
		return ReadySubject(j.Model, j.Tenant) + "." + WorkerToken(j.Route)
	}
	return ReadySubject(j.Model, j.Tenant)
}

// SchedWeight is the job's scheduling weight: Weight, or 1 when unset.
func (j *Job) SchedWeight() float64 {
	if j.Weight == 0 {
		return 1
	}
	return j.Weight
}

// MaxLogitBias is the most tokens a job's LogitBias may name.
const MaxLogitBias = 1024

// TokenBias is one token's logit bias.
type TokenBias struct {
	Token int32   `json:"token"`
	Bias  float32 `json:"bias"`
}

// TokenLogprob is one token's log-probability on a token frame, with the
// most likely alternatives at its step when the job asked for them.
type TokenLogprob struct {
	Token   int32        `json:"token"`
	Logprob float32      `json:"logprob"`
	Top     []TopLogprob `json:"top,omitempty"`
}

// TopLogprob is one alternative token and its log-probability.
type TopLogprob struct {
	Token   int32   `json:"token"`
	Logprob float32 `json:"logprob"`
}

// Grammar kinds.
const (
	GrammarJSONObject = "json_object" // any JSON object
	GrammarJSONSchema = "json_schema" // the values Schema allows
)

// Grammar is a job's output constraint: a kind and, for json_schema, the
// JSON Schema the edge already checked compiles.
type Grammar struct {
	Kind   string          `json:"kind"`
	Schema json.RawMessage `json:"schema,omitempty"`
}

// Rates are a model's prices in neurons per million tokens: prompt tokens
// computed, prompt tokens served from the prefix cache, and completion tokens.
type Rates struct {
	Prompt       float64 `json:"prompt"`
	CachedPrompt float64 `json:"cached_prompt"`
	Completion   float64 `json:"completion"`
}

// Validate checks what every consumer of a job relies on.
func (j *Job) Validate() error {
	switch {
	case j.ID == "":
		return fmt.Errorf("%w: job without id", ErrBadMessage)
	case !ValidTenant(j.Tenant):
		return fmt.Errorf("%w: job %s tenant %q: want 1-%d letters, digits, '-' or '_'", ErrBadMessage, j.ID, j.Tenant, MaxTenantLen)
	case j.Model == "":
		return fmt.Errorf("%w: job %s without model", ErrBadMessage, j.ID)
	case j.MaxTokens < 1 && j.Embed == nil, j.MaxTokens != 0 && j.Embed != nil:
		return fmt.Errorf("%w: job %s max_tokens %d (embed %v)", ErrBadMessage, j.ID, j.MaxTokens, j.Embed != nil)
	case j.Reply == "" && !j.Async:
		return fmt.Errorf("%w: job %s has no reply subject", ErrBadMessage, j.ID)
	case j.Deadline.IsZero():
		return fmt.Errorf("%w: job %s has no deadline", ErrBadMessage, j.ID)
	case j.Weight < 0 || math.IsNaN(j.Weight) || math.IsInf(j.Weight, 0):
		return fmt.Errorf("%w: job %s weight %v", ErrBadMessage, j.ID, j.Weight)
	case len(j.Route) > 256:
		return fmt.Errorf("%w: job %s route of %d bytes", ErrBadMessage, j.ID, len(j.Route))
	case len(j.LogitBias) > MaxLogitBias:
		return fmt.Errorf("%w: job %s logit_bias of %d tokens", ErrBadMessage, j.ID, len(j.LogitBias))
	}
	if err := ValidateMetadata(j.Metadata); err != nil {
		return fmt.Errorf("%w: job %s metadata %v", ErrBadMessage, j.ID, err)
	}
	if j.LoRA != nil {
		if err := j.LoRA.validate(); err != nil {
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
	}
	if j.Embed != nil {
		if err := j.Embed.validate(); err != nil {
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
	}
	if j.Key != "" && !ValidKey(j.Key) {
		return fmt.Errorf("%w: job %s key %q", ErrBadMessage, j.ID, j.Key)
	}
	if j.EventSubject != "" && (!j.Async || !ValidEventSubject(j.EventSubject)) {
		return fmt.Errorf("%w: job %s: event subject %.140q on a job async %v", ErrBadMessage, j.ID, j.EventSubject, j.Async)
	}
	if j.Webhook != nil {
		if !j.Async {
			return fmt.Errorf("%w: job %s: a webhook on a job that is not async", ErrBadMessage, j.ID)
		}
		if err := j.Webhook.Validate(); err != nil {
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
	}
	if err := ValidateUser(j.User); err != nil {
		return fmt.Errorf("%w: job %s user: %v", ErrBadMessage, j.ID, err)
	}
	for _, b := range j.LogitBias {
		if b.Token < 0 || b.Bias != b.Bias || b.Bias < -100 || b.Bias > 100 {
			return fmt.Errorf("%w: job %s logit_bias token %d bias %v", ErrBadMessage, j.ID, b.Token, b.Bias)
		}
	}
	return j.validateSegments()
}

// EncodeJob and DecodeJob are the job codec (JSON).
func EncodeJob(j *Job) ([]byte, error) { return json.Marshal(j) }

// DecodeJob decodes and validates a job.
func DecodeJob(b []byte) (*Job, error) {
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	return &j, nil
}

// FrameKind says what a reply frame carries.
type FrameKind string

// Frame kinds. A stream is zero or more KindToken frames, then exactly one
// KindFinal or KindError frame; nothing follows the last frame.
const (
	KindToken FrameKind = "token"
	KindFinal FrameKind = "final"
	KindError FrameKind = "error"
	// KindHeartbeat says the worker holding the job is alive; it carries
	// nothing else, takes no seq (Seq 0) and may come at any time, so an
	// edge notices a dead worker within a few seconds (HeartbeatTimeout).
	KindHeartbeat FrameKind = "heartbeat"
)

// ErrorKind is a stable, machine-readable reason a worker refused or ended a
// request. The edge maps each kind to its one error table (HTTP status and
// numeric code); nothing downstream of the edge chooses HTTP statuses.
type ErrorKind string

// Error kinds a worker may send.
const (
	ErrKindPromptTooLong ErrorKind = "prompt_too_long"   // prompt + max_tokens > context window
	ErrKindCapacity      ErrorKind = "capacity_exceeded" // busy with reject_if_busy, or can never fit the KV pool
	ErrKindInvalidInput  ErrorKind = "invalid_input"
	ErrKindUnknownModel  ErrorKind = "unknown_model"
	ErrKindTimeout       ErrorKind = "timeout" // the job's deadline passed
	ErrKindAborted       ErrorKind = "aborted" // cancelled by the client
	ErrKindInternal      ErrorKind = "internal"
	ErrKindUnavailable   ErrorKind = "unavailable" // a store the job needs is full or down
	ErrKindAdapter       ErrorKind = "lora_failed" // the job's LoRA adapter could not be fetched, verified or applied
)

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// CachedTokens is how many of the PromptTokens were served from the
	// tenant's prefix cache instead of being computed (Job.CachePrefix).
	CachedTokens int `json:"cached_tokens,omitempty"`
	// AcceptedPrediction counts the Job.Prediction tokens the output kept
	// (as drafting followed the prediction), RejectedPrediction the
	// prediction's other tokens
	// (OpenAI's accepted_prediction_tokens and rejected_prediction_tokens).
	// Both are 0 without a prediction; neither is billed beyond the
	// CompletionTokens.
	AcceptedPrediction int `json:"accepted_prediction_tokens,omitempty"`
	RejectedPrediction int `json:"rejected_prediction_tokens,omitempty"`
}

// FrameError is the error a KindError frame carries.
type FrameError struct {
	Kind    ErrorKind `json:"kind"`
	Message string    `json:"message"`
}

func (e *FrameError) Error() string { return fmt.Sprintf("%s: %s", e.Kind, e.Message) }

// Frame is one reply message. Seq starts at 1 and increases by one per frame
// of a request, so a receiver can tell a gap or a stream cut short from a
// finished one.
type Frame struct {
	Seq    uint64      `json:"seq"`
	Kind   FrameKind   `json:"kind"`
	Text   string      `json:"text,omitempty"`   // token frames and final (held-back tail)
	Tokens []int32     `json:"tokens,omitempty"` // token ids in this frame
	Finish string      `json:"finish,omitempty"` // final: "stop" or "length"
	Usage  *Usage      `json:"usage,omitempty"`  // final
	Error  *FrameError `json:"error,omitempty"`  // error
	// Logprobs are the token frame's tokens' log-probabilities, when the
	// job asked (Job.Logprobs).
	Logprobs []TokenLogprob `json:"logprobs,omitempty"`
	// Vectors is an encoder job's result, on its final frame (Job.Embed).
	Vectors *Vectors `json:"vectors,omitempty"`
}

// EncodeFrame and DecodeFrame are the frame codec (JSON).
func EncodeFrame(f *Frame) ([]byte, error) { return json.Marshal(f) }

// DecodeFrame decodes and checks a frame.
func DecodeFrame(b []byte) (*Frame, error) {
	var f Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	switch {
	case f.Kind == KindHeartbeat:
		if f.Seq != 0 || f.Text != "" || f.Tokens != nil || f.Usage != nil || f.Error != nil || f.Finish != "" {
			return nil, fmt.Errorf("%w: heartbeat frame with content", ErrBadMessage)
		}
		return &f, nil
	case f.Seq == 0:
		return nil, fmt.Errorf("%w: frame without seq", ErrBadMessage)
	case f.Kind == KindFinal && f.Usage == nil:
		return nil, fmt.Errorf("%w: final frame without usage", ErrBadMessage)
	case f.Kind == KindError && f.Error == nil:
		return nil, fmt.Errorf("%w: error frame without error", ErrBadMessage)
	case f.Kind != KindToken && f.Kind != KindFinal && f.Kind != KindError:
		return nil, fmt.Errorf("%w: frame kind %q", ErrBadMessage, f.Kind)
	}
	return &f, nil
}
