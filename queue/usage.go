package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Usage stream names.
const (
	UsageStream   = "BULKHEAD_USAGE"  // work-queue stream holding bulkhead.usage.>
	UsagePrefix   = "bulkhead.usage." // + tenant token (see UsageSubject)
	UsageConsumer = "billing"         // the durable consumer the billing process reads with
)

// UsageSubject is the subject of a tenant's usage events: UsagePrefix plus the
// tenant as one subject token (see ModelToken), so "bulkhead.usage.>" sees all.
func UsageSubject(tenant string) string { return UsagePrefix + ModelToken(tenant) }

// Outcomes a usage event reports: how the request ended.
const (
	OutcomeStop      = "stop"      // completed: end of sequence or a stop sequence
	OutcomeLength    = "length"    // completed: max_tokens reached
	OutcomeCancelled = "cancelled" // the client went away or cancelled
	OutcomeTimeout   = "timeout"   // the job's deadline passed
	OutcomeRefused   = "refused"   // the worker refused it before it ran (input, context, capacity)
	OutcomeError     = "error"     // the worker failed it
)

// Outcomes lists every outcome, in the order reports show them.
func Outcomes() []string {
	return []string{OutcomeStop, OutcomeLength, OutcomeCancelled, OutcomeTimeout, OutcomeRefused, OutcomeError}
}

// OutcomeOf is the outcome of a job that ended with an error frame of kind.
func OutcomeOf(kind ErrorKind) string {
	switch kind {
	case ErrKindAborted:
		return OutcomeCancelled
	case ErrKindTimeout:
		return OutcomeTimeout
	case ErrKindPromptTooLong, ErrKindCapacity, ErrKindInvalidInput, ErrKindUnknownModel, ErrKindAdapter:
		return OutcomeRefused
	}
	return OutcomeError
}

// UsageEvent is what one request that reached a worker consumed. Exactly one
// is published per request, when it ends, whatever the outcome, on the usage
// stream with Nats-Msg-Id = RequestID (PublishUsage); billing rolls them up.
//
// PromptTokens counts every prompt token the engine took, CachedTokens how
// many of them came from the tenant's prefix cache (priced at the cached
// rate), CompletionTokens the tokens actually produced, also for a request
// cancelled or failed mid-stream. MicroNeurons is the cost in millionths of a
// neuron at the rates the edge priced the job at (Job.Rates); Neurons is the
// same number as a decimal, for people.
type UsageEvent struct {
	Tenant           string    `json:"tenant"`
	Model            string    `json:"model"`
	RequestID        string    `json:"request_id"`
	PromptTokens     int       `json:"prompt_tokens"`
	CompletionTokens int       `json:"completion_tokens"`
	CachedTokens     int       `json:"cached_tokens,omitempty"`
	Finish           string    `json:"finish"` // the outcome: one of Outcomes()
	Time             time.Time `json:"time"`   // when the request ended

	MicroNeurons int64   `json:"micro_neurons"`
	Neurons      float64 `json:"neurons"`
	QueueMs      int64   `json:"queue_ms"`          // submitted → claimed by a worker
	TTFTMs       int64   `json:"ttft_ms,omitempty"` // submitted → first token (0: none)
	TotalMs      int64   `json:"total_ms"`          // submitted → end
	WorkerID     string  `json:"worker_id"`         // the worker that ended it
	Error        string  `json:"error,omitempty"`   // the error kind, when it failed

	Metadata map[string]string `json:"metadata,omitempty"` // the request's (Job.Metadata)
	User     string            `json:"user,omitempty"`     // the request's end user (Job.User)
	Key      string            `json:"key,omitempty"`      // the tenant's API key (Job.Key)
	// LoRA and LoRAName name the finetune the request ran with (Job.LoRA):
	// its id and its name; empty without one.
	LoRA     string `json:"lora,omitempty"`
	LoRAName string `json:"lora_name,omitempty"`
}

// Validate checks what the ledger relies on.
func (e *UsageEvent) Validate() error {
	switch {
	case e.RequestID == "":
		return fmt.Errorf("%w: usage event without request id", ErrBadMessage)
	case !ValidTenant(e.Tenant):
		return fmt.Errorf("%w: usage event %s tenant %q: want 1-%d letters, digits, '-' or '_'", ErrBadMessage, e.RequestID, e.Tenant, MaxTenantLen)
	case e.Model == "":
		return fmt.Errorf("%w: usage event %s without model", ErrBadMessage, e.RequestID)
	case e.Time.IsZero():
		return fmt.Errorf("%w: usage event %s without time", ErrBadMessage, e.RequestID)
	case e.PromptTokens < 0 || e.CompletionTokens < 0 || e.CachedTokens < 0 || e.CachedTokens > e.PromptTokens:
		return fmt.Errorf("%w: usage event %s token counts %d/%d/%d", ErrBadMessage, e.RequestID,
			e.PromptTokens, e.CachedTokens, e.CompletionTokens)
	case e.MicroNeurons < 0:
		return fmt.Errorf("%w: usage event %s negative neurons", ErrBadMessage, e.RequestID)
	case e.QueueMs < 0 || e.TTFTMs < 0 || e.TotalMs < 0:
		return fmt.Errorf("%w: usage event %s negative times", ErrBadMessage, e.RequestID)
	}
	if err := ValidateMetadata(e.Metadata); err != nil {
		return fmt.Errorf("%w: usage event %s metadata %v", ErrBadMessage, e.RequestID, err)
	}
	if e.Key != "" && !ValidKey(e.Key) {
		return fmt.Errorf("%w: usage event %s key %q", ErrBadMessage, e.RequestID, e.Key)
	}
	if err := ValidateUser(e.User); err != nil {
		return fmt.Errorf("%w: usage event %s user: %v", ErrBadMessage, e.RequestID, err)
	}
	return nil
}

// DecodeUsage decodes and validates a usage event.
func DecodeUsage(b []byte) (*UsageEvent, error) {
	var e UsageEvent
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// PublishUsage publishes ev on the usage stream with Nats-Msg-Id =
// ev.RequestID, so a second event for the same request within the stream's
// de-duplication window is dropped (the ledger drops later ones). It waits
// for the stream's acknowledgement: an event that returns nil is stored.
func PublishUsage(ctx context.Context, js jetstream.JetStream, ev *UsageEvent) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(UsageSubject(ev.Tenant))
	msg.Data = b
	msg.Header.Set(jetstream.MsgIDHeader, ev.RequestID)
	InjectTrace(ctx, msg.Header) // billing's consume span joins the request's trace
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		var api *jetstream.APIError
		if errors.As(err, &api) && api.ErrorCode == jsStoreFailed {
			return fmt.Errorf("%w: usage stream: %s", ErrQueueFull, api.Description)
		}
		return fmt.Errorf("queue: publishing usage of %s: %w", ev.RequestID, err)
	}
	return nil
}

// UsageConsumerConfig configures the billing consumer. Zero values take the
// defaults noted.
type UsageConsumerConfig struct {
	AckWait       time.Duration // redeliver an event not acked this long; default 30s
	MaxAckPending int           // events handed out and not yet acked; default 1024
}

// EnsureUsageConsumer creates or updates the durable pull consumer billing
// reads the usage stream with: explicit acks, and no limit on deliveries, so
// an event is never dropped before it was counted.
func EnsureUsageConsumer(ctx context.Context, js jetstream.JetStream, cfg UsageConsumerConfig) (jetstream.Consumer, error) {
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxAckPending == 0 {
		cfg.MaxAckPending = 1024
	}
	if cfg.AckWait < 0 || cfg.MaxAckPending < 0 {
		return nil, fmt.Errorf("%w: usage consumer AckWait %v, MaxAckPending %d", ErrConfig, cfg.AckWait, cfg.MaxAckPending)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, UsageStream, jetstream.ConsumerConfig{
		Durable:       UsageConsumer,
		Description:   "billing: usage events into the ledger",
		FilterSubject: UsagePrefix + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("queue: usage consumer: %w", err)
	}
	return c, nil
}
