// Package handoff owns the hand-over of a request's KV cache from a prefill
// worker to a decode worker: the manifest that describes it, the transfer of
// its pages over NATS, and the verification of every byte on arrival.
//
// A prefill worker builds a Manifest with NewManifest from the request and its
// serialized pages, offers the pages with NewSender (or Serve) on the subject
// Subject(TransferID), and ships the manifest with the job. A decode worker
// first checks the manifest against what it knows independently of the sender
// (Manifest.Verify with an Expect built from the job and its own model), then
// pulls the pages with Fetch. Fetch is receiver-driven: the decode side asks
// for one chunk at a time with a bounded window, so it sets the pace and the
// memory used, and every page reaches the caller's sink only after its size
// and CRC-64 match the manifest.
//
// This package moves and verifies bytes; it never imports kvcache internals,
// never interprets page contents, never retries past its timeouts, and never
// reports a transfer as complete unless every page named by the manifest was
// received whole and verified. Either side giving up or disappearing makes
// the other side return an error within its timeout, so both can free their
// pages. See docs/handoff.md.
package handoff
