package meter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bulkhead-ai/bulkhead/billing/export"
	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Recorder counts a usage event once; billing/ledger.Ledger implements it.
type Recorder interface {
	Record(ctx context.Context, ev *queue.UsageEvent) (counted bool, err error)
}

var _ Recorder = (*ledger.Ledger)(nil)

// ErrConfig reports a Config that cannot run.
var ErrConfig = errors.New("meter: invalid config")

// Config configures a Meter. Zero values take the defaults noted.
type Config struct {
	Batch      int           // events pulled per fetch; default 64
	FetchWait  time.Duration // bounds one pull; default 1s
	RetryDelay time.Duration // redelivery delay after a ledger failure; default 1s
	// Grace bounds how long Run goes on with the batch in hand once its
	// context ends; the events it has not counted by then are given back
	// (NAK) for the next billing process. Default 10s.
	Grace    time.Duration
	Consumer queue.UsageConsumerConfig
	// TracerProvider makes a billing.consume span per event, in the trace
	// of the request it bills; nil (or a no-op provider) makes none.
	TracerProvider trace.TracerProvider
	// AfterCount, if set, is called after the ledger counted the n-th event
	// (from 1) and before it is acknowledged: fault tests stop the process
	// there, the one moment where a crash leaves an event counted and not
	// acknowledged.
	AfterCount func(n int64)
	// ExportSource is the CloudEvents source of the events the meter
	// publishes on the export stream once counted (billing/export);
	// default export.DefaultSource.
	ExportSource string
}

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (c *Config) Validate() error {
	if c.Batch == 0 {
		c.Batch = 64
	}
	if c.FetchWait == 0 {
		c.FetchWait = time.Second
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = time.Second
	}
	if c.Grace == 0 {
		c.Grace = 10 * time.Second
	}
	if c.ExportSource == "" {
		c.ExportSource = export.DefaultSource
	}
	if c.Batch < 0 || c.FetchWait < 0 || c.RetryDelay < 0 || c.Grace < 0 {
		return fmt.Errorf("%w: Batch %d, FetchWait %v, RetryDelay %v, Grace %v", ErrConfig, c.Batch, c.FetchWait, c.RetryDelay, c.Grace)
	}
	return nil
}

// Stats counts what a Meter did since it started.
type Stats struct {
	Counted    int64 // events the ledger counted
	Duplicates int64 // events the ledger had counted already
	Rejected   int64 // undecodable events, terminated
	Retried    int64 // events given back after a ledger or export failure
	Exported   int64 // events published on the export stream (duplicates again)
	Alerts     int64 // budget alert and cost anomaly notices published (again for a redelivered event)
	HandedBack int64 // events given back uncounted at shutdown, past the grace
}

// Meter consumes usage events into a Recorder.
type Meter struct {
	log *slog.Logger
	js  jetstream.JetStream
	rec Recorder
	cfg Config

	mu    sync.Mutex // guards stats
	stats Stats

	tracer trace.Tracer // nil when tracing is off
}

// New validates cfg and returns a Meter; it touches NATS only in Run.
func New(log *slog.Logger, js jetstream.JetStream, rec Recorder, cfg Config) (*Meter, error) {
	if js == nil || rec == nil {
		return nil, fmt.Errorf("%w: a JetStream context and a Recorder are required", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Meter{log: log, js: js, rec: rec, cfg: cfg}
	if tp := cfg.TracerProvider; tp != nil {
		if _, off := tp.(noop.TracerProvider); !off {
			m.tracer = tp.Tracer("github.com/bulkhead-ai/bulkhead/billing/meter")
		}
	}
	return m, nil
}

// Stats returns the counts so far.
func (m *Meter) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

func (m *Meter) count(f func(*Stats)) {
	m.mu.Lock()
	f(&m.stats)
	m.mu.Unlock()
}

// Run consumes until ctx ends: each fetched batch is counted and acked in
// full before Run looks at ctx again, so a shutdown leaves no event counted
// and unacked for longer than it takes to finish the batch (and even such
// an event is only counted once when redelivered). A batch that is not done
// within Config.Grace of ctx's end is cut short: the events left are handed
// back (NAK), never acknowledged uncounted.
func (m *Meter) Run(ctx context.Context) error {
	cons, err := queue.EnsureUsageConsumer(ctx, m.js, m.cfg.Consumer)
	if err != nil {
		return err
	}
	m.log.Info("billing: consuming usage events", "stream", queue.UsageStream, "consumer", queue.UsageConsumer)
	// Ledger writes outlive a cancelled ctx by the grace: a batch in hand
	// is finished, or what is left of it handed back.
	kctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	defer context.AfterFunc(ctx, func() {
		t := time.AfterFunc(m.cfg.Grace, stop)
		context.AfterFunc(kctx, func() { t.Stop() })
	})()
	for ctx.Err() == nil {
		batch, err := cons.Fetch(m.cfg.Batch, jetstream.FetchMaxWait(m.cfg.FetchWait))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			m.log.Warn("billing: fetching usage events", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(m.cfg.RetryDelay):
			}
			continue
		}
		for msg := range batch.Messages() {
			if kctx.Err() != nil {
				m.handBack(msg)
				continue
			}
			m.handle(kctx, msg)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) &&
			!errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			m.log.Warn("billing: usage batch", "err", err)
		}
	}
	return nil
}

// handBack gives an event back uncounted, for the next billing process.
func (m *Meter) handBack(msg jetstream.Msg) {
	m.count(func(s *Stats) { s.HandedBack++ })
	if err := msg.Nak(); err != nil {
		m.log.Warn("billing: handing usage event back", "err", err)
	}
}

func (m *Meter) handle(ctx context.Context, msg jetstream.Msg) {
	if m.tracer != nil {
		var span trace.Span
		ctx, span = m.tracer.Start(queue.ExtractTrace(ctx, msg.Headers()), "billing.consume",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("messaging.system", "nats"),
				attribute.String("messaging.destination.name", msg.Subject())))
		defer span.End()
	}
	ev, err := queue.DecodeUsage(msg.Data())
	if err != nil {
		m.log.Error("billing: terminating an undecodable usage event", "err", err, "subject", msg.Subject())
		m.count(func(s *Stats) { s.Rejected++ })
		if err := msg.TermWithReason("undecodable usage event"); err != nil {
			m.log.Warn("billing: terminating usage event", "err", err)
		}
		return
	}
	counted, err := m.rec.Record(ctx, ev)
	switch {
	case errors.Is(err, ledger.ErrInvalidTenant):
		m.log.Error("billing: terminating a usage event with an invalid tenant", "err", err, "request_id", ev.RequestID)
		m.count(func(s *Stats) { s.Rejected++ })
		_ = msg.TermWithReason("invalid tenant")
		return
	case err != nil:
		m.log.Warn("billing: counting usage event; will retry", "err", err, "request_id", ev.RequestID)
		m.count(func(s *Stats) { s.Retried++ })
		if err := msg.NakWithDelay(m.cfg.RetryDelay); err != nil {
			m.log.Warn("billing: giving usage event back", "err", err)
		}
		return
	}
	if counted {
		var n int64
		m.count(func(s *Stats) { s.Counted++; n = s.Counted })
		if m.cfg.AfterCount != nil {
			m.cfg.AfterCount(n)
		}
	} else {
		// A redelivery (the last meter died between counting and acking)
		// or a duplicate the stream could not drop: rare, so logged.
		m.log.Info("billing: usage event already counted; acknowledging it again", "request_id", ev.RequestID)
		m.count(func(s *Stats) { s.Duplicates++ })
	}
	// Counted (now or before): the key's budget alerts this event raised,
	// announced before the ack, so an alert is never acknowledged
	// unannounced (a redelivery reports the same alerts; their notices
	// share ids, so each is delivered once).
	if err := m.alert(ctx, ev); err != nil {
		m.log.Warn("billing: raising budget alerts; will retry", "err", err, "request_id", ev.RequestID)
		m.count(func(s *Stats) { s.Retried++ })
		if err := msg.NakWithDelay(m.cfg.RetryDelay); err != nil {
			m.log.Warn("billing: giving usage event back", "err", err)
		}
		return
	}
	// Counted (now or before): on the export stream, before the ack, so an
	// event is never acknowledged unexported. A redelivered event is
	// exported again; the stream drops the copy within its de-duplication
	// window, readers by its id after that.
	if err := m.export(ctx, ev); err != nil {
		m.log.Warn("billing: exporting usage event; will retry", "err", err, "request_id", ev.RequestID)
		m.count(func(s *Stats) { s.Retried++ })
		if err := msg.NakWithDelay(m.cfg.RetryDelay); err != nil {
			m.log.Warn("billing: giving usage event back", "err", err)
		}
		return
	}
	// Wait for the server's confirmation: an ack lost on the way means a
	// redelivery, which the ledger finds counted.
	if err := msg.DoubleAck(ctx); err != nil {
		m.log.Warn("billing: acknowledging usage event", "err", err, "request_id", ev.RequestID)
	}
}

// Alerter raises the budget alerts and cost anomalies of an event's API
// key; billing/ledger.Ledger implements it.
type Alerter interface {
	KeyAlerts(ctx context.Context, ev *queue.UsageEvent) ([]queue.BudgetAlert, ledger.Delivery, error)
	KeyAnomaly(ctx context.Context, ev *queue.UsageEvent) (*queue.CostAnomaly, ledger.Delivery, error)
}

var _ Alerter = (*ledger.Ledger)(nil)

// alert raises ev's key's budget alerts and flags its cost anomaly, when
// the Recorder keeps them, and puts a notice of each on the notify stream
// when the key has an alert webhook (delivered by the edges, as async
// notices are).
func (m *Meter) alert(ctx context.Context, ev *queue.UsageEvent) error {
	a, ok := m.rec.(Alerter)
	if !ok || ev.Key == "" {
		return nil
	}
	alerts, to, err := a.KeyAlerts(ctx, ev)
	if err != nil {
		return err
	}
	var notices []*queue.Notice
	for i := range alerts {
		al := &alerts[i]
		m.log.Info("billing: API key budget alert", "tenant", ev.Tenant, "key", al.Key, "period", al.Period, "threshold", al.Threshold)
		if to.Any() {
			notices = append(notices, noticeTo(to, &queue.Notice{JobID: al.ID(), Tenant: ev.Tenant, Alert: al}))
		}
	}
	anomaly, to, err := a.KeyAnomaly(ctx, ev)
	if err != nil {
		return err
	}
	if anomaly != nil {
		m.log.Info("billing: API key cost anomaly", "tenant", ev.Tenant, "key", anomaly.Key, "request_id", ev.RequestID,
			"neurons", anomaly.Neurons, "key_p95", anomaly.KeyP95, "tenant_p99", anomaly.TenantP99)
		if to.Any() {
			notices = append(notices, noticeTo(to, &queue.Notice{JobID: anomaly.ID(), Tenant: ev.Tenant, Anomaly: anomaly}))
		}
	}
	for _, n := range notices {
		if err := queue.PublishNotice(ctx, m.js, n); err != nil {
			return err
		}
		m.count(func(s *Stats) { s.Alerts++ })
	}
	return nil
}

// noticeTo addresses n to the delivery and stamps it now.
func noticeTo(to ledger.Delivery, n *queue.Notice) *queue.Notice {
	n.Ended, n.Subject = time.Now().UTC(), to.Subject
	if to.Webhook != nil {
		n.Webhook = *to.Webhook
	}
	return n
}

// export publishes a counted event on the export stream as a CloudEvent.
func (m *Meter) export(ctx context.Context, ev *queue.UsageEvent) error {
	b, err := export.Encode(ev, m.cfg.ExportSource)
	if err == nil {
		err = queue.PublishExport(ctx, m.js, ev.Tenant, ev.RequestID, b)
	}
	if err == nil {
		m.count(func(s *Stats) { s.Exported++ })
	}
	return err
}
