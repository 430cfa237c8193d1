// Package export hands counted usage to meters outside Bulkhead. It encodes
// a usage event as a CloudEvent 1.0 in JSON (Encode), which billing's meter
// publishes on the export stream once the ledger counted the event
// (queue.PublishExport), and it reads that stream back for an operator
// (Reader): one event a line on a writer, or batches POSTed to an HTTP
// endpoint that takes CloudEvents, such as OpenMeter's ingest API.
//
// Delivery is at least once: a reader acknowledges events only after its
// sink took them, so a crash repeats some, never loses one. Every copy of
// an event has the same CloudEvent id (the request id) and source, which is
// what OpenMeter, Lago (transaction_id) and Stripe (identifier) de-duplicate
// on. docs/billing.md maps the fields to each.
//
// It reads and forwards; it never counts, prices or refuses anything.
package export
