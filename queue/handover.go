package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the decode hand-over stream: a prefill worker that has run a
// prompt publishes a Handover here, and a decode worker takes it.
const (
	DecodeStream = "BULKHEAD_DECODE" // work-queue stream holding decode.>
	DecodePrefix = "decode."
)

// MaxManifestBytes bounds the manifest a Handover may carry.
const MaxManifestBytes = 4 << 20

// DecodeSubject is the model's own decode subject: hand-overs published
// before per-tenant decode subjects (TenantDecodeSubject) land there.
func DecodeSubject(model string) string { return DecodePrefix + ModelToken(model) }

// TenantDecodeSubject is the subject tenant's decode hand-overs for model
// are published on: one queue per tenant (OpenDecodeQueues).
func TenantDecodeSubject(model, tenant string) string {
	return DecodeSubject(model) + "." + TenantToken(tenant)
}

// DecodeReadyPrefix is the subject prefix of the doorbells a prefill worker
// rings after publishing a hand-over: DecodeReadyPrefix + model token + "." +
// tenant token (core NATS, no payload).
const DecodeReadyPrefix = "bulkhead.decodeready."

// DecodeReadySubject is the doorbell of tenant's hand-overs for model.
func DecodeReadySubject(model, tenant string) string {
	return DecodeReadyPrefix + ModelToken(model) + "." + TenantToken(tenant)
}

// DecodeConsumerName is the durable consumer every decode worker serving
// model shares on the decode stream. Prefill and unified workers share
// ConsumerName(model) on the jobs stream: a work-queue stream allows one
// consumer per subject, so the roles differ by stream, not by name.
func DecodeConsumerName(model string) string { return "decode-" + ModelToken(model) }

// DecodeMsgID is the Nats-Msg-Id of a job's decode hand-over: a prefill
// worker that publishes it twice (a retry) hands the job over once.
func DecodeMsgID(jobID string) string { return jobID + "/decode" }

// Handover is a job whose prompt has been prefilled, on its way to a decode
// worker: the original job, unchanged, and the KV hand-over manifest as the
// prefill worker encoded it. The queue carries the manifest as opaque JSON;
// the decode worker parses and verifies it. CachedTokens is how many prompt
// tokens the prefill worker served from the tenant's prefix cache; it is
// informational (usage reporting only) and not checked here: the decode
// worker bounds it by the prompt it tokenized itself.
type Handover struct {
	Job          Job             `json:"job"`
	Manifest     json.RawMessage `json:"manifest"`
	CachedTokens int             `json:"cached_tokens,omitempty"`
}

// EncodeHandover is the decode hand-over codec (JSON).
func EncodeHandover(d *Handover) ([]byte, error) { return json.Marshal(d) }

// DecodeHandover decodes and checks a decode hand-over: the job validates and
// a manifest of at most MaxManifestBytes is present (not verified here).
func DecodeHandover(b []byte) (*Handover, error) {
	var d Handover
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if err := d.Job.Validate(); err != nil {
		return nil, err
	}
	m := bytes.TrimSpace(d.Manifest)
	switch {
	case len(m) == 0 || bytes.Equal(m, []byte("null")):
		return nil, fmt.Errorf("%w: hand-over of %s without manifest", ErrBadMessage, d.Job.ID)
	case len(m) > MaxManifestBytes:
		return nil, fmt.Errorf("%w: hand-over of %s: manifest of %d bytes, limit %d", ErrBadMessage, d.Job.ID, len(m), MaxManifestBytes)
	}
	return &d, nil
}

// PublishHandover publishes a decode hand-over on its tenant's decode
// subject (TenantDecodeSubject) with Nats-Msg-Id DecodeMsgID(job id) and
// ctx's trace context, then rings its doorbell. A full stream is
// ErrQueueFull; a hand-over already published is ErrDuplicate.
func PublishHandover(ctx context.Context, js jetstream.JetStream, d *Handover) error {
	if err := d.Job.Validate(); err != nil {
		return err
	}
	b, err := EncodeHandover(d)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(TenantDecodeSubject(d.Job.Model, d.Job.Tenant))
	msg.Data = b
	msg.Header.Set(jetstream.MsgIDHeader, DecodeMsgID(d.Job.ID))
	InjectTrace(ctx, msg.Header)
	// Retried while the decode stream has no leader (LeaderWait).
	ack, retried, err := publishMsg(ctx, js, msg)
	if err != nil {
		var api *jetstream.APIError
		if errors.As(err, &api) && api.ErrorCode == jsStoreFailed && strings.Contains(api.Description, "maximum") {
			return fmt.Errorf("%w: decode stream: %s", ErrQueueFull, api.Description)
		}
		return fmt.Errorf("queue: publishing hand-over of %s: %w", d.Job.ID, err)
	}
	if ack.Duplicate && !retried {
		return fmt.Errorf("%w: hand-over of %s", ErrDuplicate, d.Job.ID)
	}
	// Best effort: decode workers also read the stream's counts.
	_ = js.Conn().Publish(DecodeReadySubject(d.Job.Model, d.Job.Tenant), nil)
	return nil
}

// EnsureDecodeConsumer creates or updates the durable pull consumer decode
// workers share for model's decode subject (explicit acks) and returns it.
func EnsureDecodeConsumer(ctx context.Context, js jetstream.JetStream, model string, cfg ConsumerConfig) (jetstream.Consumer, error) {
	return ensureConsumer(ctx, js, durable{stream: DecodeStream, model: model, name: DecodeConsumerName(model),
		subjects: []string{DecodeSubject(model)}, description: "decode hand-overs for " + model}, cfg)
}
