// Package meter is the billing consumer: it reads usage events from the
// usage stream with the durable "billing" consumer and counts each in the
// ledger before acknowledging it; once counted, each is also published on
// the export stream as a CloudEvent (billing/export) for external meters.
//
// An event is acknowledged only after the ledger counted it (or found it
// counted already), and the ledger's count is idempotent on the request id,
// so a meter killed at any point loses nothing and counts nothing twice: an
// event whose ack was lost is delivered again and adds nothing. An event that
// does not decode is terminated (and logged) rather than retried forever; a
// ledger that cannot be reached gets the event back for a later try.
//
// It counts; it never prices a request (the worker did, at the edge's
// rates) and never refuses one.
package meter
