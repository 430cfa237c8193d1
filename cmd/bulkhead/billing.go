package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/billing/meter"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// runBilling runs the billing consumer: usage events from NATS into the
// ledger in Redis, until a signal.
func runBilling(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("billing", stderr)
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS server URL")
	redisURL := fs.String("redis", "", "Redis URL of the ledger, e.g. redis://127.0.0.1:6379/0 (the edge's --redis)")
	ackWait := fs.Duration("ack-wait", 30*time.Second, "redeliver a usage event this long after a billing process took it without acknowledging (it died)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "redis"); err != nil {
		return err
	}
	opt, err := redis.ParseURL(*redisURL)
	if err != nil {
		return fmt.Errorf("%w: --redis: %v", errUsage, err)
	}
	log := newLogger(stderr)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	l, err := ledger.New(rdb, ledger.Config{})
	if err != nil {
		return err
	}
	nc, js, err := connect(ctx, log, *natsURL, "bulkhead-billing")
	if err != nil {
		return err
	}
	defer nc.Close()
	m, err := meter.New(log.With("node", "billing"), js, l, meter.Config{Consumer: queue.UsageConsumerConfig{AckWait: *ackWait}})
	if err != nil {
		return err
	}
	defer func() {
		s := m.Stats()
		log.Info("billing stopped", "counted", s.Counted, "duplicates", s.Duplicates, "rejected", s.Rejected, "retried", s.Retried)
	}()
	fmt.Fprintf(stdout, "billing: counting usage events from %s into %s\n", *natsURL, opt.Addr)
	return m.Run(ctx)
}

// startBilling runs the billing consumer in this process (dev) until the
// returned stop is called, and returns the ledger it counts into.
func startBilling(log *slog.Logger, js jetstream.JetStream, rdb redis.UniversalClient) (*ledger.Ledger, func(), error) {
	l, err := ledger.New(rdb, ledger.Config{})
	if err != nil {
		return nil, nil, err
	}
	m, err := meter.New(log.With("node", "billing"), js, l, meter.Config{})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	return l, func() {
		cancel()
		if err := <-done; err != nil {
			log.Error("billing stopped", "err", err)
		}
	}, nil
}

// edgeLedger is the ledger an edge serves the usage API from: nil without
// Redis, where there is no usage to show.
func edgeLedger(rdb redis.UniversalClient) (*ledger.Ledger, error) {
	if rdb == nil {
		return nil, nil
	}
	return ledger.New(rdb, ledger.Config{})
}
