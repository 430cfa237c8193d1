package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/handoff"
)

// Role is what part of a request a worker runs.
type Role string

// Worker roles.
const (
	// RoleUnified runs whole requests: it takes jobs.<model>, prefills and
	// decodes on one engine. The zero Role means RoleUnified.
	RoleUnified Role = "unified"
	// RolePrefill takes jobs.<model>, runs the prompt, and hands the request
	// and its KV pages to a decode worker (decode.<model> and a transfer).
	RolePrefill Role = "prefill"
	// RoleDecode takes decode.<model>, verifies and pulls the KV pages, and
	// generates the answer.
	RoleDecode Role = "decode"
)

// ParseRole reads a role name; the empty string is RoleUnified.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case "":
		return RoleUnified, nil
	case RoleUnified, RolePrefill, RoleDecode:
		return r, nil
	}
	return "", fmt.Errorf("%w: role %q is not unified, prefill or decode", ErrConfig, s)
}

// HandoffConfig configures the KV transfers of the prefill and decode roles.
type HandoffConfig struct {
	// Sender is the prefill side: its StartTimeout bounds how long a prefilled
	// request waits for a decode worker to start pulling it.
	Sender handoff.SenderConfig
	// Receiver is the decode side. A zero MaxPageBytes means the size of one
	// full page of the engine's own pool: nothing larger is ever buffered.
	Receiver handoff.ReceiverConfig
}

// ErrConfig reports a worker configuration that cannot run.
var ErrConfig = errors.New("worker: invalid config")

// Config configures a Worker. Zero values take the defaults noted; negative
// values are refused.
type Config struct {
	// Role is the part of each request this worker runs; default RoleUnified.
	Role Role
	// Handoff configures KV transfers (prefill and decode roles only).
	Handoff HandoffConfig
	// Models maps catalog names to running engines (the caller runs them).
	Models map[string]*engine.Engine
	// Encoders maps the catalog names of encoder models (text-embeddings,
	// text-classification) to running encoder servers (the caller runs
	// them); unified role only.
	Encoders map[string]*encoder.Server
	// Name is the worker's name among its process's workers: the worker
	// label of its job counts (as AddEngines's of its gauges); default
	// "worker".
	Name string
	// Concurrency bounds the jobs in flight at once, all models together;
	// default 16.
	Concurrency int
	// Lookahead bounds, per model, the jobs pulled that have not started in
	// its engine's batch: those not yet in the engine's queue (being
	// claimed, or on the decode role pulling their KV) and those waiting in
	// it for a batch slot or KV pages. The worker pulls no more than the
	// engine can start within about two batch turnovers, and the engine
	// chooses among those fairly (docs/fairness.md). Default twice each
	// engine's MaxBatch.
	Lookahead int
	// HeartbeatEvery is how often a running job's message is marked in
	// progress; default 10s, and it must be shorter than Consumer.AckWait.
	HeartbeatEvery time.Duration
	// Grace bounds how long Run waits for in-flight jobs after its context
	// ends; jobs still running then are cancelled (and requeued if nothing
	// was streamed). Default 30s.
	Grace time.Duration
	// BusyDelay is the redelivery delay of a job refused because the engine's
	// queue is full (without reject_if_busy); default 1s.
	BusyDelay time.Duration
	// FetchWait bounds one pull request; default 1s.
	FetchWait time.Duration
	// Consumer configures the per-model durable consumers.
	Consumer queue.ConsumerConfig
	// TracerProvider makes the worker's spans; nil (or a no-op provider)
	// turns tracing off, and then the job path does no tracing work.
	TracerProvider trace.TracerProvider
	// Metrics records the worker's Prometheus series; nil records none.
	Metrics *Metrics
	// ID names this worker in usage events; default host-pid-random.
	ID string
	// LoRAMemory bounds the memory of the LoRA adapters the worker keeps
	// loaded (least recently used evicted first); default
	// DefaultLoRAMemory.
	LoRAMemory int64
	// LoRADir is where adapter files are written while they load; default
	// the system's temporary directory. It must exist.
	LoRADir string

	// AfterToken, if set, runs after the n-th token frame (from 1) of a job
	// went out, with the job's context. Fault tests hold a stream there
	// until the job ends (bulkhead worker --fault-hold-at, built with -tags
	// faults): a stream that is cancelled, timed out or killed while held
	// sends nothing more, as one still generating would.
	AfterToken func(ctx context.Context, job *queue.Job, n int)

	// beforeWatch, if set, runs after a job was claimed and admitted and
	// before the worker subscribes to its cancel signal (a test hook).
	beforeWatch func(job *queue.Job)
}

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (c *Config) Validate() error {
	if c.Role == "" {
		c.Role = RoleUnified
	}
	if _, err := ParseRole(string(c.Role)); err != nil {
		return err
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.HeartbeatEvery == 0 {
		c.HeartbeatEvery = 10 * time.Second
	}
	if c.Grace == 0 {
		c.Grace = 30 * time.Second
	}
	if c.BusyDelay == 0 {
		c.BusyDelay = time.Second
	}
	if c.Name == "" {
		c.Name = "worker"
	}
	if c.FetchWait == 0 {
		c.FetchWait = time.Second
	}
	if c.ID == "" {
		c.ID = defaultID()
	}
	if c.LoRAMemory == 0 {
		c.LoRAMemory = DefaultLoRAMemory
	}
	ackWait := c.Consumer.AckWait
	if ackWait == 0 {
		ackWait = 30 * time.Second
	}
	switch {
	case len(c.Models) == 0 && len(c.Encoders) == 0:
		return fmt.Errorf("%w: Models and Encoders are empty", ErrConfig)
	case len(c.Encoders) > 0 && c.Role != RoleUnified:
		return fmt.Errorf("%w: encoder models run on unified workers only, not %s", ErrConfig, c.Role)
	case c.Concurrency < 0:
		return fmt.Errorf("%w: Concurrency %d", ErrConfig, c.Concurrency)
	case c.Lookahead < 0:
		return fmt.Errorf("%w: Lookahead %d", ErrConfig, c.Lookahead)
	case c.HeartbeatEvery < 0 || c.HeartbeatEvery >= ackWait:
		return fmt.Errorf("%w: HeartbeatEvery %v must be positive and below Consumer.AckWait %v", ErrConfig, c.HeartbeatEvery, ackWait)
	case c.Grace < 0:
		return fmt.Errorf("%w: Grace %v", ErrConfig, c.Grace)
	case c.BusyDelay < 0:
		return fmt.Errorf("%w: BusyDelay %v", ErrConfig, c.BusyDelay)
	case c.FetchWait < 0:
		return fmt.Errorf("%w: FetchWait %v", ErrConfig, c.FetchWait)
	case c.LoRAMemory < 0:
		return fmt.Errorf("%w: LoRAMemory %d", ErrConfig, c.LoRAMemory)
	}
	if c.LoRADir != "" {
		if st, err := os.Stat(c.LoRADir); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: LoRADir %q is not a directory", ErrConfig, c.LoRADir)
		}
	}
	for name, e := range c.Models {
		if name == "" {
			return fmt.Errorf("%w: Models has an empty name", ErrConfig)
		}
		if e == nil {
			return fmt.Errorf("%w: Models[%q] is nil", ErrConfig, name)
		}
	}
	return nil
}
