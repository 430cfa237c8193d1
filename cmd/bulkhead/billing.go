package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/billing/export"
	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/billing/meter"
	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// billingFlags are `bulkhead billing`'s flags.
type billingFlags struct {
	natsURL  string
	redisURL string
	ackWait  time.Duration
	grace    time.Duration // --drain-grace
	source   string        // --export-source
	obs      obsFlags
	nats     natsFlags
	faults   faultFlags // empty unless built with -tags faults
}

// runBilling runs the billing consumer: usage events from NATS into the
// ledger in Redis, until a signal.
func runBilling(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f billingFlags
	fs := newFlags("billing", stderr)
	fs.StringVar(&f.natsURL, "nats", "nats://127.0.0.1:4222", "NATS server URL")
	fs.StringVar(&f.redisURL, "redis", "", "Redis URL of the ledger, e.g. redis://127.0.0.1:6379/0 (the edge's --redis)")
	fs.DurationVar(&f.grace, "drain-grace", defaultDrainGrace, "on SIGTERM, how long the batch in hand may take before what is left of it is handed back")
	fs.DurationVar(&f.ackWait, "ack-wait", 30*time.Second, "redeliver a usage event this long after a billing process took it without acknowledging (it died)")
	fs.StringVar(&f.source, "export-source", export.DefaultSource, "the CloudEvents source of the usage events billing exports once counted (`bulkhead usage-export`): with the request id it names an event, so give each region its own")
	f.obs.register(fs, true, false)
	f.nats.register(fs)
	f.faults.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "redis"); err != nil {
		return err
	}
	rdb, err := dialRedis(f.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	return f.run(ctx, stdout, stderr, rdb)
}

// run starts the billing node on rdb and counts until ctx ends.
func (f *billingFlags) run(ctx context.Context, stdout, stderr io.Writer, rdb *redis.Client) error {
	log, tel, err := f.obs.startNode(ctx, stderr, "bulkhead-billing", "billing")
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	h := edge.NewHealth()
	stopHealth, err := f.obs.serveHealth(ctx, log, h, tel)
	if err != nil {
		return err
	}
	defer stopHealth()
	h.Add("redis", redisCheck(rdb))
	nc, js, err := f.nats.connect(ctx, log, f.natsURL, "bulkhead-billing")
	if err != nil {
		return err
	}
	defer nc.Close()
	h.Add("nats", natsCheck(nc))
	_, m, err := newMeter(log, js, rdb, f.meterConfig(stderr, tel))
	if err != nil {
		return err
	}
	if err := m.RegisterMetrics(tel.reg); err != nil {
		return err
	}
	svc, err := queue.RegisterNode(nc, queue.NodeConfig{Service: queue.FleetBilling, Version: version,
		Status: func() queue.NodeStatus { return queue.NodeStatus{JobsDone: uint64(m.Stats().Counted)} }})
	defer stopService(log, svc, err)()
	defer func() {
		s := m.Stats()
		log.Info("billing stopped", "counted", s.Counted, "duplicates", s.Duplicates, "rejected", s.Rejected, "retried", s.Retried,
			"handed_back", s.HandedBack, "exported", s.Exported)
	}()
	fmt.Fprintf(stdout, "billing: counting usage events from %s into %s\n", f.natsURL, rdb.Options().Addr)
	return m.Run(ctx)
}

// meterConfig is the meter's configuration from the flags (with the fault
// hooks of a -tags faults build).
func (f *billingFlags) meterConfig(stderr io.Writer, tel *telemetry) meter.Config {
	cfg := meter.Config{Consumer: queue.UsageConsumerConfig{AckWait: f.ackWait}, TracerProvider: tel.tp, Grace: f.grace, ExportSource: f.source}
	f.faults.hook(&cfg, stderr)
	return cfg
}

// startBilling runs the billing consumer in this process (dev) until the
// returned stop is called, and returns the ledger it counts into.
func startBilling(log *slog.Logger, tp trace.TracerProvider, js jetstream.JetStream, rdb redis.UniversalClient) (*ledger.Ledger, func(), error) {
	l, m, err := newMeter(log, js, rdb, meter.Config{TracerProvider: tp})
	if err != nil {
		return nil, nil, err
	}
	stop := background(m.Run)
	return l, func() {
		if err := stop(); err != nil {
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
