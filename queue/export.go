package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The usage export: once billing has counted a usage event in the ledger it
// publishes it again, as a CloudEvent (billing/export), on the export
// stream. Unlike the usage stream, which is billing's work queue, the export
// stream is a log (limits retention): each reader consumes it with its own
// durable consumer, to feed an external meter (OpenMeter, Lago, Stripe), and
// reading never removes an event. Only billing publishes there, and the
// export role (RoleExport) only reads there.
const (
	ExportStream = "BULKHEAD_EXPORT"
	ExportPrefix = "bulkhead.export.usage." // + tenant token (see ExportSubject)
)

// ExportSubject is the subject of a tenant's exported usage events:
// ExportPrefix plus the tenant as one subject token, so a reader may filter
// one tenant.
func ExportSubject(tenant string) string { return ExportPrefix + ModelToken(tenant) }

// ExportConsumer creates, or finds again, a reader's durable pull consumer
// on the export stream: explicit acks, redelivery after ackWait, and no
// limit on deliveries, so a reader that acknowledges only what it has
// handed on loses nothing. A new consumer starts at the oldest event the
// stream holds, or at the next one with fromNow. tenant, if not empty, keeps
// it to that tenant's events.
func ExportConsumer(ctx context.Context, js jetstream.JetStream, name, tenant string, fromNow bool, ackWait time.Duration) (jetstream.Consumer, error) {
	if name == "" || ackWait <= 0 {
		return nil, fmt.Errorf("%w: export consumer %q, ack wait %v", ErrConfig, name, ackWait)
	}
	filter := ExportPrefix + ">"
	if tenant != "" {
		if !ValidTenant(tenant) {
			return nil, fmt.Errorf("%w: export consumer tenant %q", ErrConfig, tenant)
		}
		filter = ExportSubject(tenant)
	}
	deliver := jetstream.DeliverAllPolicy
	if fromNow {
		deliver = jetstream.DeliverNewPolicy
	}
	c, err := js.Consumer(ctx, ExportStream, name)
	if err == nil {
		return c, nil // its position is what it acknowledged so far
	}
	c, err = js.CreateConsumer(ctx, ExportStream, jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "usage export reader",
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 1024,
		DeliverPolicy: deliver,
	})
	if err != nil {
		return nil, fmt.Errorf("queue: export consumer %s: %w", name, err)
	}
	return c, nil
}

// ExportContentType is the content type of an export message: a CloudEvent
// in structured mode, JSON (CloudEvents 1.0 JSON format).
const ExportContentType = "application/cloudevents+json"

// PublishExport puts one counted usage event, encoded as a CloudEvent, on
// its tenant's export subject, with Nats-Msg-Id = requestID: billing
// publishing it again after a crash within the stream's de-duplication
// window adds nothing, and a reader de-duplicates later copies by the
// CloudEvent's id, which is the request id too.
func PublishExport(ctx context.Context, js jetstream.JetStream, tenant, requestID string, event []byte) error {
	if !ValidTenant(tenant) || requestID == "" {
		return fmt.Errorf("%w: export of request %q for tenant %q", ErrBadMessage, requestID, tenant)
	}
	msg := nats.NewMsg(ExportSubject(tenant))
	msg.Header.Set(nats.MsgIdHdr, requestID)
	msg.Header.Set("Content-Type", ExportContentType)
	msg.Data = event
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("queue: export of %s: %w", requestID, err)
	}
	return nil
}
