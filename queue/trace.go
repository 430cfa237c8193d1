package queue

import (
	"context"
	"slices"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
)

// Span attribute keys every node sets on a request's spans, beyond
// OpenTelemetry's own conventions (docs/operations.md lists them), so one
// trace reads the same from the edge to the worker. Prompt and completion
// text are never attributes.
const (
	AttrTenant    = attribute.Key("bulkhead.tenant")
	AttrRequestID = attribute.Key("bulkhead.request_id")
	AttrOutcome   = attribute.Key("bulkhead.outcome")
	AttrErrorType = attribute.Key("error.type")
	AttrModel     = attribute.Key("gen_ai.request.model")
	AttrMaxTokens = attribute.Key("gen_ai.request.max_tokens")
	AttrInTokens  = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutTokens = attribute.Key("gen_ai.usage.output_tokens")
	AttrFinish    = attribute.Key("gen_ai.response.finish_reasons")
	AttrKey       = attribute.Key("bulkhead.api_key")
	// AttrMetadataPrefix starts the key of each metadata pair the request
	// carried (bulkhead.metadata.<name>); MetadataAttributes makes them.
	AttrMetadataPrefix = "bulkhead.metadata."
)

// JobAttributes names a job on a span: tenant, request id, API key and
// each metadata pair, in key order (OpenAI's metadata is the caller's
// own labels, meant to be seen in traces and usage). Never its text.
func JobAttributes(j *Job) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrTenant.String(j.Tenant), AttrRequestID.String(j.ID)}
	if j.Key != "" {
		attrs = append(attrs, AttrKey.String(j.Key))
	}
	return append(attrs, MetadataAttributes(j.Metadata)...)
}

// MetadataAttributes is one attribute a metadata pair, in key order.
func MetadataAttributes(md map[string]string) []attribute.KeyValue {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]attribute.KeyValue, len(keys))
	for i, k := range keys {
		attrs[i] = attribute.String(AttrMetadataPrefix+k, md[k])
	}
	return attrs
}

// HeaderCarrier lets an OpenTelemetry text-map propagator read and write
// NATS message headers, so trace context (W3C traceparent and tracestate,
// or whatever propagator cmd installs) travels with jobs and hand-overs and
// any OTel-instrumented consumer joins the same trace.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set replaces key's values with value.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the header names present.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectTrace writes ctx's trace context into h through the global text-map
// propagator (otel.GetTextMapPropagator; cmd installs W3C trace context when
// tracing is on, and the default propagator writes nothing).
func InjectTrace(ctx context.Context, h nats.Header) {
	otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier(h))
}

// ExtractTrace returns ctx carrying the remote span context found in h, if
// the global propagator finds one; a missing or malformed header leaves ctx
// as it is.
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, HeaderCarrier(h))
}
