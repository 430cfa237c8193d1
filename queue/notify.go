package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Async notifications. An async job may name a webhook (Job.Webhook); when
// its record ends (done or failed) the worker that wrote that record
// publishes a Notice on the notify stream, and the edges deliver it from the
// durable consumer NotifyConsumer: an edge that stops leaves its notices to
// the others or to the next edge, and one that fails to deliver gives the
// notice back for a later try, until NoticeRetention after the job ended.
const (
	NotifyStream   = "BULKHEAD_NOTIFY"
	NotifyPrefix   = "bulkhead.notify." // + tenant token (NotifySubject)
	NotifyConsumer = "webhooks"
)

// NoticeRetention is how long after its job ended a notice is still
// delivered; the notify stream keeps notices an hour longer.
const NoticeRetention = 24 * time.Hour

// Bounds of a webhook.
const (
	MaxWebhookURL    = 2048
	MinWebhookSecret = 16
	MaxWebhookSecret = 256
)

// Webhook is where an async job's end is announced: an HTTPS URL, and the
// secret its notifications are signed with (HMAC-SHA256).
type Webhook struct {
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

// Validate checks the shape the edge admitted (an https URL, a secret of
// MinWebhookSecret to MaxWebhookSecret bytes); which hosts may be called is
// the edge's decision.
func (w *Webhook) Validate() error {
	u, err := url.Parse(w.URL)
	switch {
	case len(w.URL) > MaxWebhookURL || err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil:
		return fmt.Errorf("%w: webhook url %.100q: want an https URL of at most %d bytes, without credentials", ErrBadMessage, w.URL, MaxWebhookURL)
	case len(w.Secret) < MinWebhookSecret || len(w.Secret) > MaxWebhookSecret:
		return fmt.Errorf("%w: webhook secret of %d bytes: want %d to %d", ErrBadMessage, len(w.Secret), MinWebhookSecret, MaxWebhookSecret)
	}
	return nil
}

// NotifySubject is the subject of a tenant's notices.
func NotifySubject(tenant string) string { return NotifyPrefix + ModelToken(tenant) }

// Notice says that an async job ended (its record's end state), or, with
// an Alert, that an API key's spend crossed a threshold of its budget; and
// where to announce it.
type Notice struct {
	JobID   string       `json:"job_id"` // the job, or the alert's id (BudgetAlert.ID): the notice's id
	Tenant  string       `json:"tenant"`
	Model   string       `json:"model,omitempty"`
	Status  string       `json:"status,omitempty"` // StatusDone or StatusFailed; "" for an alert
	Text    string       `json:"text,omitempty"`
	Finish  string       `json:"finish,omitempty"`
	Usage   *Usage       `json:"usage,omitempty"`
	Error   *FrameError  `json:"error,omitempty"`
	Alert   *BudgetAlert `json:"alert,omitempty"`
	Anomaly *CostAnomaly `json:"anomaly,omitempty"`
	Ended   time.Time    `json:"ended"` // when the job ended or the alert fired
	// Where to announce it: a webhook, the tenant's event subject
	// (events.go), or both.
	Webhook Webhook `json:"webhook"`
	Subject string  `json:"subject,omitempty"`
}

// Validate checks what a deliverer relies on.
func (n *Notice) Validate() error {
	switch {
	case n.JobID == "":
		return fmt.Errorf("%w: notice without job id", ErrBadMessage)
	case !ValidTenant(n.Tenant):
		return fmt.Errorf("%w: notice %s tenant %q", ErrBadMessage, n.JobID, n.Tenant)
	case n.Alert != nil && n.Anomaly != nil:
		return fmt.Errorf("%w: notice %s is both an alert and an anomaly", ErrBadMessage, n.JobID)
	case n.Alert == nil && n.Anomaly == nil && n.Status != StatusDone && n.Status != StatusFailed:
		return fmt.Errorf("%w: notice %s status %q", ErrBadMessage, n.JobID, n.Status)
	case n.Alert != nil && (n.Status != "" || n.JobID != n.Alert.ID()):
		return fmt.Errorf("%w: alert notice %s with status %q or another id", ErrBadMessage, n.JobID, n.Status)
	case n.Anomaly != nil && (n.Status != "" || n.JobID != n.Anomaly.ID()):
		return fmt.Errorf("%w: anomaly notice %s with status %q or another id", ErrBadMessage, n.JobID, n.Status)
	case n.Ended.IsZero():
		return fmt.Errorf("%w: notice %s without end time", ErrBadMessage, n.JobID)
	}
	if n.Alert != nil {
		if err := n.Alert.Validate(); err != nil {
			return err
		}
	}
	if n.Anomaly != nil {
		if err := n.Anomaly.Validate(); err != nil {
			return err
		}
	}
	switch {
	case n.Webhook.URL == "" && n.Subject == "":
		return fmt.Errorf("%w: notice %s has no webhook and no event subject", ErrBadMessage, n.JobID)
	case n.Subject != "" && !ValidEventSubject(n.Subject):
		return fmt.Errorf("%w: notice %s event subject %.140q", ErrBadMessage, n.JobID, n.Subject)
	case n.Webhook.URL != "":
		return n.Webhook.Validate()
	}
	return nil
}

// Budget periods of an API key (BudgetAlert.Period).
const (
	PeriodDay   = "day"   // the UTC day
	PeriodMonth = "month" // the UTC month
)

// AlertThresholds are the shares of a budget, in percent, at which an API
// key's spend raises an alert, once each per key and period.
var AlertThresholds = []int{50, 80, 100}

// BudgetAlert says an API key's spend crossed a threshold of one of its
// budgets (billing/ledger.KeyPolicy).
type BudgetAlert struct {
	Key       string  `json:"key"`
	Period    string  `json:"period"`    // PeriodDay or PeriodMonth
	Start     string  `json:"start"`     // the period, UTC: "2006-01-02" or "2006-01"
	Threshold int     `json:"threshold"` // percent, one of AlertThresholds
	Used      float64 `json:"used_neurons"`
	Budget    float64 `json:"budget_neurons"`
	// Soft: the budget only alerts; otherwise the key is refused (3036)
	// once its spend reaches the budget.
	Soft      bool   `json:"soft,omitempty"`
	RequestID string `json:"request_id"` // the request whose usage crossed it
}

// CostAnomaly flags a request of an API key that cost more than
// AnomalyFactor times the key's own 95th percentile and more than the
// tenant's 99th percentile (AI Gateway's rule, per request).
type CostAnomaly struct {
	Key       string  `json:"key"`
	RequestID string  `json:"request_id"`
	Model     string  `json:"model"`
	Neurons   float64 `json:"neurons"`
	KeyP95    float64 `json:"key_p95_neurons"`
	TenantP99 float64 `json:"tenant_p99_neurons"`
}

// AnomalyFactor is how many times its key's p95 a request must cost to be
// flagged.
const AnomalyFactor = 2

// ID names the anomaly: one per request.
func (a *CostAnomaly) ID() string { return "anomaly-" + a.RequestID }

// Validate checks an anomaly's fields.
func (a *CostAnomaly) Validate() error {
	if !ValidKey(a.Key) || a.RequestID == "" || !(a.Neurons > 0) {
		return fmt.Errorf("%w: anomaly of key %q request %q, %v neurons", ErrBadMessage, a.Key, a.RequestID, a.Neurons)
	}
	return nil
}

// ID names the alert: one per key, period and threshold.
func (a *BudgetAlert) ID() string {
	return "alert-" + a.Key + "-" + a.Start + "-" + strconv.Itoa(a.Threshold)
}

// Validate checks an alert's fields.
func (a *BudgetAlert) Validate() error {
	switch {
	case !ValidKey(a.Key):
		return fmt.Errorf("%w: alert for key %q", ErrBadMessage, a.Key)
	case a.Period != PeriodDay && a.Period != PeriodMonth:
		return fmt.Errorf("%w: alert period %q", ErrBadMessage, a.Period)
	case !slices.Contains(AlertThresholds, a.Threshold):
		return fmt.Errorf("%w: alert threshold %d", ErrBadMessage, a.Threshold)
	case a.Start == "" || len(a.Start) > 10:
		return fmt.Errorf("%w: alert period start %q", ErrBadMessage, a.Start)
	case !(a.Budget > 0) || a.Used < 0:
		return fmt.Errorf("%w: alert budget %v used %v", ErrBadMessage, a.Budget, a.Used)
	}
	return nil
}

// DecodeNotice decodes and validates a notice.
func DecodeNotice(b []byte) (*Notice, error) {
	var n Notice
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("%w: notice: %v", ErrBadMessage, err)
	}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return &n, nil
}

// noticeOf is the notice of job's ended record rec.
func noticeOf(job *Job, rec *AsyncResult) *Notice {
	n := &Notice{JobID: job.ID, Tenant: job.Tenant, Model: job.Model, Status: rec.Status, Text: rec.Text,
		Finish: rec.Finish, Usage: rec.Usage, Error: rec.Error, Ended: time.Now().UTC(), Subject: job.EventSubject}
	if job.Webhook != nil {
		n.Webhook = *job.Webhook
	}
	return n
}

// PublishNotice puts a notice on the notify stream with Nats-Msg-Id = the
// job id, retrying for up to PublishRetryTimeout (a retry of a publish that
// landed is a no-op), so a job's end is announced once however often it is
// recorded within the de-duplication window.
func PublishNotice(ctx context.Context, js jetstream.JetStream, n *Notice) error {
	if err := n.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	err = PublishRetrying(ctx, func(ctx context.Context) error {
		msg := nats.NewMsg(NotifySubject(n.Tenant))
		msg.Header.Set(nats.MsgIdHdr, n.JobID)
		msg.Data = b
		_, err := js.PublishMsg(ctx, msg)
		return err
	})
	if err != nil {
		return fmt.Errorf("queue: notice of %s: %w", n.JobID, err)
	}
	return nil
}

// Bounds of PublishRetrying: the whole, longer than a JetStream cluster
// takes to elect a new stream leader after losing a server; and one try, as
// a publish sent to a server that then died is never answered.
const (
	PublishRetryTimeout = 20 * time.Second
	PublishTryTimeout   = 2 * time.Second
)

// PublishRetrying runs publish (a JetStream publish with a message id, so
// that a retry of one that landed is a no-op) until it succeeds or
// PublishRetryTimeout passes, each try bounded by PublishTryTimeout, with a
// short backoff between tries. It outlives ctx's cancellation: what it
// publishes records an end that must not be lost to a client going away.
func PublishRetrying(ctx context.Context, publish func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PublishRetryTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		tctx, tcancel := context.WithTimeout(ctx, PublishTryTimeout)
		err := publish(tctx)
		tcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(min(time.Duration(50<<min(attempt, 5))*time.Millisecond, time.Second)):
		}
	}
}

// EnsureNotifyConsumer creates or finds the edges' durable consumer of the
// notify stream: explicit acks, no limit on deliveries (a deliverer gives a
// notice back with a delay until it is delivered or too old), ackWait long
// enough for one delivery.
func EnsureNotifyConsumer(ctx context.Context, js jetstream.JetStream, ackWait time.Duration) (jetstream.Consumer, error) {
	if ackWait <= 0 {
		return nil, fmt.Errorf("%w: notify consumer ack wait %v", ErrConfig, ackWait)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, NotifyStream, jetstream.ConsumerConfig{
		Durable:       NotifyConsumer,
		Description:   "edges: async job notifications to webhooks",
		FilterSubject: NotifyPrefix + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 1024,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("queue: notify consumer: %w", err)
	}
	return c, nil
}

// Notices is the edges' durable consumer of the notify stream
// (EnsureNotifyConsumer), for delivering async notices.
func (c *Client) Notices(ctx context.Context, ackWait time.Duration) (jetstream.Consumer, error) {
	return EnsureNotifyConsumer(ctx, c.js, ackWait)
}
