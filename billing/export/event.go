package export

import (
	"encoding/json"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// EventType is the CloudEvents type of an exported usage event.
const EventType = "ai.bulkhead.usage"

// DefaultSource is the CloudEvents source when the operator names none
// (billing's --export-source): with the id, it identifies an event.
const DefaultSource = "bulkhead"

// Encode is ev as a CloudEvent in structured JSON mode: id the request id,
// source the given one, type EventType, subject the tenant, time when the
// request ended, and data the usage event itself (queue.UsageEvent's JSON:
// model, token counts, neurons, outcome, metadata, user, timings).
func Encode(ev *queue.UsageEvent, source string) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return nil, err
	}
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(ev.RequestID)
	e.SetSource(source)
	e.SetType(EventType)
	e.SetSubject(ev.Tenant)
	e.SetTime(ev.Time)
	if err := e.SetData(event.ApplicationJSON, ev); err != nil {
		return nil, fmt.Errorf("export: %s: %w", ev.RequestID, err)
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("export: %s: %w", ev.RequestID, err)
	}
	return json.Marshal(e)
}

// Decode reads an exported CloudEvent back into its usage event, checking
// that it is one: the type, and the subject naming the event's tenant.
func Decode(b []byte) (*event.Event, *queue.UsageEvent, error) {
	var e event.Event
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, nil, fmt.Errorf("export: not a CloudEvent: %w", err)
	}
	if err := e.Validate(); err != nil {
		return nil, nil, fmt.Errorf("export: %w", err)
	}
	if e.Type() != EventType {
		return nil, nil, fmt.Errorf("export: type %q, want %q", e.Type(), EventType)
	}
	var ev queue.UsageEvent
	if err := e.DataAs(&ev); err != nil {
		return nil, nil, fmt.Errorf("export: data: %w", err)
	}
	if err := ev.Validate(); err != nil {
		return nil, nil, err
	}
	if e.Subject() != ev.Tenant || e.ID() != ev.RequestID {
		return nil, nil, fmt.Errorf("export: subject %q and id %q do not match the event's tenant %q and request %q",
			e.Subject(), e.ID(), ev.Tenant, ev.RequestID)
	}
	return &e, &ev, nil
}
