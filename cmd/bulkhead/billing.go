package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

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
	var of obsFlags
	of.register(fs, true, false)
	var nf natsFlags
	nf.register(fs)
	exitAfter := fs.Int64("fault-exit-after", 0, "testing: exit (status 3) right after counting this many events, before acknowledging the last (0: never)")
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
	log, err := of.logger(stderr)
	if err != nil {
		return err
	}
	tel, err := newTelemetry(ctx, log, "bulkhead-billing", "billing")
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	h := newHealth()
	stopOps, err := serveOps(log, of.metricsListen, h, tel.reg)
	if err != nil {
		return err
	}
	defer stopOps()
	defer context.AfterFunc(ctx, h.drain)()
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	h.add("redis", redisCheck(rdb))
	l, err := ledger.New(rdb, ledger.Config{})
	if err != nil {
		return err
	}
	natsOpts, err := nf.options()
	if err != nil {
		return err
	}
	nc, js, err := connect(ctx, log, *natsURL, "bulkhead-billing", natsOpts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	h.add("nats", natsCheck(nc))
	mcfg := meter.Config{Consumer: queue.UsageConsumerConfig{AckWait: *ackWait}, TracerProvider: tel.tp}
	if *exitAfter > 0 {
		mcfg.AfterCount = func(n int64) {
			if n == *exitAfter {
				fmt.Fprintf(stderr, "billing: --fault-exit-after %d: exiting with event %d counted and not acknowledged\n", n, n)
				os.Exit(3)
			}
		}
	}
	m, err := meter.New(log.With("node", "billing"), js, l, mcfg)
	if err != nil {
		return err
	}
	if err := billingMetrics(tel.reg, m); err != nil {
		return err
	}
	svc, err := queue.RegisterNode(nc, queue.NodeConfig{Service: queue.FleetBilling, Version: version,
		Status: func() queue.NodeStatus { return queue.NodeStatus{JobsDone: uint64(m.Stats().Counted)} }})
	defer stopService(log, svc, err)()
	defer func() {
		s := m.Stats()
		log.Info("billing stopped", "counted", s.Counted, "duplicates", s.Duplicates, "rejected", s.Rejected, "retried", s.Retried)
	}()
	fmt.Fprintf(stdout, "billing: counting usage events from %s into %s\n", *natsURL, opt.Addr)
	return m.Run(ctx)
}

// billingMetrics exports m's counts as bulkhead_billing_events_total by
// result (counted, duplicate, rejected, retried).
func billingMetrics(reg prometheus.Registerer, m *meter.Meter) error {
	for _, r := range []struct {
		result string
		count  func(meter.Stats) int64
	}{
		{"counted", func(s meter.Stats) int64 { return s.Counted }},
		{"duplicate", func(s meter.Stats) int64 { return s.Duplicates }},
		{"rejected", func(s meter.Stats) int64 { return s.Rejected }},
		{"retried", func(s meter.Stats) int64 { return s.Retried }},
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bulkhead_billing_events_total",
			Help:        "Usage events the billing consumer handled, by result.",
			ConstLabels: prometheus.Labels{"result": r.result}},
			func() float64 { return float64(r.count(m.Stats())) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// startBilling runs the billing consumer in this process (dev) until the
// returned stop is called, and returns the ledger it counts into.
func startBilling(log *slog.Logger, tp trace.TracerProvider, js jetstream.JetStream, rdb redis.UniversalClient) (*ledger.Ledger, func(), error) {
	l, err := ledger.New(rdb, ledger.Config{})
	if err != nil {
		return nil, nil, err
	}
	m, err := meter.New(log.With("node", "billing"), js, l, meter.Config{TracerProvider: tp})
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
