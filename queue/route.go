package queue

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// Routing a job to the worker most likely to hold its prefix
// (docs/routing.md).
//
// Workers announce themselves per model on StatusSubject every StatusEvery
// (WorkerStatus: load, KV pool, draining) and, for each job they take with
// the prefix cache on, the prompt's prefix keys on PrefixSubject
// (PrefixNotice). Edges keep both in a routing table and may publish a job
// on a worker's own queue of its tenant (RouteSubject) instead of the
// tenant's shared one; Job.Route names that worker. The worker reads its
// routed queues alongside the shared ones, by the same fair order; a worker
// that stops announcing itself for PeerTimeout, or says it is draining, has
// its routed queues read by the others, so no job waits on a dead worker.

// Subject prefixes of the routing announcements (core NATS, no stream).
const (
	StatusPrefix = "bulkhead.workers." // + model token: WorkerStatus
	PrefixPrefix = "bulkhead.prefix."  // + model token: PrefixNotice
)

// StatusEvery is how often a worker announces its status for each model it
// serves; PeerTimeout is how long after its last announcement a worker
// counts as gone, for edges (which stop routing to it) and for the other
// workers (which read its routed queues). A dead worker's sessions move on
// within PeerTimeout plus one announcement.
const (
	StatusEvery = 500 * time.Millisecond
	PeerTimeout = 2 * time.Second
)

// StatusSubject is where workers announce their status for model.
func StatusSubject(model string) string { return StatusPrefix + ModelToken(model) }

// PrefixSubject is where workers announce the prefixes of the jobs they take
// for model.
func PrefixSubject(model string) string { return PrefixPrefix + ModelToken(model) }

// WorkerToken is the subject token of a worker id.
func WorkerToken(worker string) string { return subjectToken(worker) }

// RouteSubject is the queue of tenant's jobs for model routed to worker: the
// tenant's subject (TenantJobSubject) and one more token for the worker.
func RouteSubject(model, tenant, worker string) string {
	return TenantJobSubject(model, tenant) + "." + WorkerToken(worker)
}

// RouteToken is the TenantQueues key of a routed queue: the tenant's token,
// a dot, and the worker's token (the subject's last two tokens).
func RouteToken(tenantToken, workerToken string) string { return tenantToken + "." + workerToken }

// SplitRoute splits a TenantQueues key into its tenant token and, for a
// routed queue, the worker token ("" for the tenant's shared queue).
func SplitRoute(key string) (tenantToken, workerToken string) {
	t, w, _ := strings.Cut(key, ".")
	return t, w
}

// WorkerStatus is one worker's announcement for one model: what an edge
// needs to route to it, or away from it.
type WorkerStatus struct {
	Worker   string `json:"worker"` // the worker's id (worker.Config.ID)
	Draining bool   `json:"draining,omitempty"`
	Running  int    `json:"running"`   // sequences in the engine's batch
	Waiting  int    `json:"waiting"`   // sequences waiting for a batch slot
	MaxBatch int    `json:"max_batch"` // the engine's batch size
	// FreePages and Pages are the KV pool's pages free (cached prefixes
	// that may be evicted included) and in all; PageSize its tokens a page.
	FreePages int `json:"free_pages"`
	Pages     int `json:"pages"`
	PageSize  int `json:"page_size"`
}

// Validate reports a status an edge cannot use.
func (s *WorkerStatus) Validate() error {
	if s.Worker == "" || len(s.Worker) > 256 || s.Running < 0 || s.Waiting < 0 || s.MaxBatch < 0 ||
		s.FreePages < 0 || s.Pages < 0 || s.FreePages > s.Pages || s.PageSize < 0 {
		return fmt.Errorf("%w: worker status %+v", ErrBadMessage, *s)
	}
	return nil
}

// DecodeStatus decodes and validates a WorkerStatus.
func DecodeStatus(b []byte) (*WorkerStatus, error) {
	var s WorkerStatus
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: worker status: %v", ErrBadMessage, err)
	}
	return &s, s.Validate()
}

// PrefixNotice says that Worker took a job of the tenant whose subject token
// is Tenant, with these prefix keys (PrefixKeys): its prefix cache now holds
// (or soon will) the KV of those leading blocks.
type PrefixNotice struct {
	Worker string   `json:"worker"`
	Tenant string   `json:"tenant"` // TenantToken of the job's tenant
	Keys   []uint64 `json:"keys"`
}

// DecodePrefixNotice decodes and validates a PrefixNotice.
func DecodePrefixNotice(b []byte) (*PrefixNotice, error) {
	var n PrefixNotice
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("%w: prefix notice: %v", ErrBadMessage, err)
	}
	if n.Worker == "" || len(n.Worker) > 256 || !validToken(n.Tenant) || len(n.Keys) > MaxPrefixKeys {
		return nil, fmt.Errorf("%w: prefix notice from %q for %q with %d keys", ErrBadMessage, n.Worker, n.Tenant, len(n.Keys))
	}
	return &n, nil
}

// PrefixBlock is the bytes of prompt text each prefix key covers, and
// MaxPrefixKeys how many leading blocks are keyed (32 KiB of text: enough
// to tell conversations apart and to find the longest shared one).
const (
	PrefixBlock   = 64
	MaxPrefixKeys = 512
)

// PrefixKeys are the keys of the prompt's leading whole blocks of
// PrefixBlock bytes, each a hash of the tenant and all the text up to the
// end of its block: two prompts of one tenant share their first n keys
// exactly when they share their first n blocks (up to hash collisions), and
// two tenants never share a key. Edge and worker compute them from the same
// text (Job.Prompt, the rendered prompt), so neither needs the other's
// tokenizer.
func PrefixKeys(tenant, prompt string) []uint64 {
	n := min(len(prompt)/PrefixBlock, MaxPrefixKeys)
	if n == 0 {
		return nil
	}
	keys := make([]uint64, n)
	h := fnv.New64a()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	var prev [8]byte
	for i := range n {
		binary.LittleEndian.PutUint64(prev[:], h.Sum64())
		h.Reset()
		h.Write(prev[:])
		h.Write([]byte(prompt[i*PrefixBlock : (i+1)*PrefixBlock]))
		keys[i] = h.Sum64()
	}
	return keys
}
