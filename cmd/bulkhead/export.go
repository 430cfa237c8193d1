package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/billing/export"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// headerFlags collects repeated --post-header "Name: value" flags.
type headerFlags http.Header

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want \"Name: value\", got %q", s)
	}
	http.Header(h).Add(strings.TrimSpace(k), strings.TrimSpace(v))
	return nil
}

// runUsageExport reads the export stream (counted usage events as
// CloudEvents) with a durable consumer and writes them out: JSON Lines on
// stdout, or batches POSTed to --post. It acknowledges only what was
// written or accepted, so it may be stopped and started again at will.
func runUsageExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("usage-export", stderr)
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS server URL")
	consumer := fs.String("consumer", "usage-export", "the durable consumer's name: each reader (each meter you feed) keeps its own position under its own name")
	tenant := fs.String("tenant", "", "only this tenant's events (default: every tenant's)")
	fromNow := fs.Bool("from-now", false, "a new consumer starts at the next event instead of the oldest the stream holds")
	post := fs.String("post", "", "POST batches of events (application/cloudevents-batch+json) to this URL, e.g. OpenMeter's https://HOST/api/v1/events; default: JSON Lines on stdout")
	headers := headerFlags{}
	fs.Var(headers, "post-header", "a header for --post, \"Name: value\" (repeatable), e.g. \"Authorization: Bearer KEY\"")
	batch := fs.Int("batch", 100, "events a batch at most")
	ackWait := fs.Duration("ack-wait", time.Minute, "hand an event to another reader of the consumer this long after it was fetched and not acknowledged")
	var nf natsFlags // on an authenticated bus, the export role's credentials (export.nk)
	nf.registerConn(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *batch < 1 || *ackWait <= 0 {
		return fmt.Errorf("%w: --batch %d and --ack-wait %v must be positive", errUsage, *batch, *ackWait)
	}
	var sink export.Sink = export.Lines{W: stdout}
	if *post != "" {
		u, err := url.Parse(*post)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("%w: --post %q: want an http(s) URL", errUsage, *post)
		}
		sink = export.Post{URL: *post, Header: http.Header(headers)}
	}
	opts, err := nf.options()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(*natsURL, append(opts, nats.Name("bulkhead-usage-export"), nats.Timeout(5*time.Second))...)
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w", *natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := queue.ExportConsumer(ctx, js, *consumer, *tenant, *fromNow, *ackWait)
	if err != nil {
		return err
	}
	log := newLogger(stderr)
	log.Info("usage export: reading", "stream", queue.ExportStream, "consumer", *consumer, "to", cmp.Or(*post, "stdout"))
	return (&export.Reader{Consumer: cons, Sink: sink, Log: log, Batch: *batch}).Run(ctx)
}
