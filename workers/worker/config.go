package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// ErrConfig reports a worker configuration that cannot run.
var ErrConfig = errors.New("worker: invalid config")

// Config configures a Worker. Zero values take the defaults noted; negative
// values are refused.
type Config struct {
	// Models maps catalog names to running engines (the caller runs them).
	Models map[string]*engine.Engine
	// Concurrency bounds the jobs in flight at once, all models together;
	// default 16.
	Concurrency int
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
}

func (c *Config) fill() error {
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
	if c.FetchWait == 0 {
		c.FetchWait = time.Second
	}
	ackWait := c.Consumer.AckWait
	if ackWait == 0 {
		ackWait = 30 * time.Second
	}
	switch {
	case len(c.Models) == 0:
		return fmt.Errorf("%w: Models is empty", ErrConfig)
	case c.Concurrency < 0:
		return fmt.Errorf("%w: Concurrency %d", ErrConfig, c.Concurrency)
	case c.HeartbeatEvery < 0 || c.HeartbeatEvery >= ackWait:
		return fmt.Errorf("%w: HeartbeatEvery %v must be positive and below Consumer.AckWait %v", ErrConfig, c.HeartbeatEvery, ackWait)
	case c.Grace < 0:
		return fmt.Errorf("%w: Grace %v", ErrConfig, c.Grace)
	case c.BusyDelay < 0:
		return fmt.Errorf("%w: BusyDelay %v", ErrConfig, c.BusyDelay)
	case c.FetchWait < 0:
		return fmt.Errorf("%w: FetchWait %v", ErrConfig, c.FetchWait)
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
