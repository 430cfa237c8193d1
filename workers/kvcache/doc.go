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
// Rewind takes back a sequence's last positions (speculative decoding's
// rejected drafts): they are cleaned like freed slots and count as unwritten
// until written again in order; shared prefix pages are never rewound.
//
// For the prefill/decode handoff a sequence's pages can be exported
// (ExportPage: one byte format, whose CRC-64 is PageChecksum) and imported into
// a sequence of another pool with the same Layout (ImportPage, ImportVerified).
// Import checks the bytes strictly against the layout and the sequence's state
// before storing anything; imported slots then count as written by the
// importing sequence, and by no one else.
//
// The pool also keeps a per-tenant prefix cache of full pages. A sequence
// whose request opted in may publish its leading full pages (PublishPrefix);
// they keep their contents, become read-only and pass to the cache, owned by
// the sequence's namespace. A later sequence of the same namespace, for the
// same model and the same leading tokens, starts from them (AttachPrefix).
// Entries are keyed by a SHA-256 chain whose root hashes the namespace and the
// model, so equal prompts of two tenants never share a key; the namespace
// always comes from the sequence's Owner, never from an argument, and is
// checked again on the entry and in View. Cached pages are reference counted;
// only idle ones are evicted (least recently used first, when a reservation
// finds the free list short, or by FlushPrefixes), and eviction cleans them
// like any freed page before reuse.
//
// This package must never truncate a sequence, hand out a shorter placeholder or
// grow the pool when memory runs out: an allocation that cannot be satisfied is
// an *AllocError and allocates nothing. It must never store a page it has not
// fully validated, nor import into slots a sequence already wrote, and must
// never import anything above models/. A page is writable by one sequence at
// most, and readable only by the sequence that owns it or, once cached, by
// sequences of the namespace that published it: no lookup, attach or view may
// ever cross namespaces.
package kvcache
