// Package kvcache owns the paged key/value cache of the decode workers and is
// where Bulkhead's tenant isolation is enforced at the memory level.
//
// A Pool allocates a fixed number of pages once, at construction, and never
// grows. A page holds PageSize token slots for every layer; each slot stores one
// token's K and V rows (KVHeads*HeadDim IEEE half values each). Storage is one
// []uint16 for K and one for V per layer, page-major: the slot s of page p at
// layer l starts at ((p*PageSize)+s)*KVHeads*HeadDim in that layer's slice.
//
// A Sequence belongs to one Owner (tenant namespace and request). It reserves
// whole pages, writes its tokens append-only, one layer at a time, and reads them
// back through a View. Each page records its owner and, per layer, how many of
// its slots the owning sequence has written; View refuses any slot this
// sequence did not write itself, so a request can never attend to KV left in a
// reused page by someone else, whether or not freed pages are scrubbed.
//
// For the prefill/decode handoff a sequence's pages can be exported
// (ExportPage: one byte format, whose CRC-64 is PageChecksum) and imported into
// a sequence of another pool with the same Layout (ImportPage, ImportVerified).
// Import checks the bytes strictly against the layout and the sequence's state
// before storing anything; imported slots then count as written by the
// importing sequence, and by no one else.
//
// This package must never truncate a sequence, hand out a shorter placeholder or
// grow the pool when memory runs out: an allocation that cannot be satisfied is
// an *AllocError and allocates nothing. It must never store a page it has not
// fully validated, nor import into slots a sequence already wrote. It must
// never let a page be reachable by two sequences at once, and must never import
// anything above models/.
package kvcache
