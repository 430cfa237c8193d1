package edge

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// Webhooks: an async batch may name {"webhook": {"url", "secret"}}; each of
// its jobs, once it ends, is announced there by one POST signed as Standard
// Webhooks signs (webhook-id, webhook-timestamp, webhook-signature), from
// the edges' durable consumer of the notify stream (queue/notify.go), with
// retries for a day. Only hosts the operator allows may be named, and
// (unless the operator allows it) none that is or resolves to a loopback,
// private, link-local or otherwise non-public address, checked again at
// every connection, so a name that later resolves elsewhere reaches nothing
// it should not.

// WebhookConfig lets async batches name webhooks; without one (Config.Webhooks
// nil) a batch that names one is refused.
type WebhookConfig struct {
	// Hosts are the hosts a webhook may name: a name ("hooks.example.com"),
	// any subdomain ("*.example.com"), or any host ("*"). Empty: none.
	Hosts []string
	// AllowPrivate lets webhooks reach non-public addresses (loopback,
	// private, link-local, shared, unique-local): a receiver inside the
	// operator's network, or a test.
	AllowPrivate bool
	// RootCAs are the CAs receivers' certificates are checked against
	// (default: the system's).
	RootCAs *x509.CertPool
	// Timeout bounds one delivery; default 10 s.
	Timeout time.Duration
	// Retry is the pause after a first failed delivery, doubling with each
	// failure up to an hour; default 5 s.
	Retry time.Duration
}

func (c *WebhookConfig) timeout() time.Duration {
	if c != nil && c.Timeout > 0 {
		return c.Timeout
	}
	return 10 * time.Second
}

// hostAllowed reports whether host matches one of the operator's patterns.
func (c *WebhookConfig) hostAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, p := range c.Hosts {
		p = strings.ToLower(p)
		switch {
		case p == "*" || p == host:
			return true
		case strings.HasPrefix(p, "*.") && strings.HasSuffix(host, p[1:]):
			return true
		}
	}
	return false
}

// publicAddr reports whether a is an address a webhook may reach without
// AllowPrivate: a global unicast address outside the private, shared
// (100.64/10) and benchmarking ranges, and not IPv4 behind an IPv6 mapping
// of one of those.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// errPrivateTarget: a webhook connection to a non-public address.
var errPrivateTarget = errors.New("edge: webhook target is not a public address")

// checkEventSubject admits the event subject a batch or key policy names:
// the tenant's part of it, below the tenant's own prefix.
func checkEventSubject(subject string) error {
	if !queue.ValidEventSubject(subject) {
		return &InputError{Field: "event_subject", Msg: fmt.Sprintf(
			"%.140q: want 1 to %d bytes, at most 8 dot-separated tokens of letters, digits, '-' or '_'",
			subject, queue.MaxEventSubject)}
	}
	return nil
}

// checkWebhook admits a batch's webhook: its shape, its host in the
// allowlist, and every address the host resolves to public (unless the
// operator allows private ones).
func (s *Server) checkWebhook(ctx context.Context, w *queue.Webhook) error {
	c := s.cfg.Webhooks
	if c == nil {
		return &InputError{Field: "webhook", Msg: "webhooks are not enabled on this platform (the operator's --webhook-hosts)"}
	}
	if err := w.Validate(); err != nil {
		field := "webhook.url"
		if len(w.Secret) < queue.MinWebhookSecret || len(w.Secret) > queue.MaxWebhookSecret {
			field = "webhook.secret"
		}
		return &InputError{Field: field, Msg: strings.TrimPrefix(err.Error(), queue.ErrBadMessage.Error()+": ")}
	}
	u, _ := url.Parse(w.URL)
	host := u.Hostname()
	if !c.hostAllowed(host) {
		return &InputError{Field: "webhook.url", Msg: fmt.Sprintf("host %q is not one this platform may call (its webhook allowlist)", host)}
	}
	if c.AllowPrivate {
		return nil
	}
	addrs, err := lookupHost(ctx, host)
	if err != nil {
		return &InputError{Field: "webhook.url", Msg: fmt.Sprintf("host %q does not resolve: %v", host, err)}
	}
	for _, a := range addrs {
		if !publicAddr(a) {
			return &InputError{Field: "webhook.url", Msg: fmt.Sprintf("host %q is or resolves to %s, not a public address", host, a)}
		}
	}
	return nil
}

func lookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// webhookClient posts notices: no proxy, no redirect, and every connection
// refused unless its address is public (or the operator allows private
// ones), whatever the name resolved to when the batch was admitted.
func webhookClient(c *WebhookConfig) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		if !c.AllowPrivate && !publicAddr(ap.Addr()) {
			return fmt.Errorf("%w: %s", errPrivateTarget, ap.Addr())
		}
		return nil
	}}
	return &http.Client{
		Timeout: c.timeout(),
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         dialer.DialContext,
			TLSClientConfig:     &tls.Config{RootCAs: c.RootCAs, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 4,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// webhookBody is what a receiver gets: the job's response as a poll of its
// batch shows it, with the batch's request id.
type webhookBody struct {
	Type      string        `json:"type"` // "ai.async.done" or "ai.async.failed"
	RequestID string        `json:"request_id"`
	Model     string        `json:"model"`
	Response  asyncResponse `json:"response"`
}

// alertBody is the body of an API key's budget alert: type
// "ai.budget.alert" and the alert's fields.
type alertBody struct {
	Type string `json:"type"`
	*queue.BudgetAlert
}

// anomalyBody is the body of an API key's cost anomaly: type
// "ai.cost.anomaly" and the anomaly's fields.
type anomalyBody struct {
	Type string `json:"type"`
	*queue.CostAnomaly
}

// webhookPayload is notice n's body.
func webhookPayload(n *queue.Notice) ([]byte, error) {
	if n.Alert != nil {
		return json.Marshal(alertBody{Type: "ai.budget.alert", BudgetAlert: n.Alert})
	}
	if n.Anomaly != nil {
		return json.Marshal(anomalyBody{Type: "ai.cost.anomaly", CostAnomaly: n.Anomaly})
	}
	requestID, index := n.JobID, 0
	if i := strings.LastIndexByte(n.JobID, '-'); i > 0 {
		if k, err := strconv.Atoi(n.JobID[i+1:]); err == nil {
			requestID, index = n.JobID[:i], k
		}
	}
	rec := &queue.AsyncResult{ID: n.JobID, Status: n.Status, Text: n.Text, Finish: n.Finish, Usage: n.Usage, Error: n.Error}
	return json.Marshal(webhookBody{Type: "ai.async." + n.Status, RequestID: requestID, Model: n.Model, Response: responseOf(index, rec)})
}

// signWebhook signs body as Standard Webhooks does: HMAC-SHA256 over
// "<id>.<timestamp>.<body>" with the secret (a "whsec_" secret is its
// base64 part, decoded), as "v1,<base64>".
func signWebhook(secret, id string, ts int64, body []byte) string {
	key := []byte(secret)
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(b64); err == nil {
			key = k
		}
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts)
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// noticeSource is a queue that holds async notices (queue.Client).
type noticeSource interface {
	Notices(ctx context.Context, ackWait time.Duration) (jetstream.Consumer, error)
}

var _ noticeSource = (*queue.Client)(nil)

// eventSender sends tenant events on the bus (queue.Client).
type eventSender interface {
	SendEvent(ctx context.Context, tenant, subject, id string, body []byte) error
}

var _ eventSender = (*queue.Client)(nil)

// RunWebhooks delivers async notices, to their webhooks and to tenants'
// event subjects, until ctx ends; run it once per edge beside the HTTP
// server (the edges share the consumer, so each notice goes to one of them
// at a time). It returns at once with a queue that holds no notices. When
// ctx ends it fetches no more and returns once the deliveries under way
// ended (each within WebhookConfig.Timeout).
// Without Config.Webhooks, notices for webhooks are given back for an edge
// that has it.
func (s *Server) RunWebhooks(ctx context.Context) {
	c := s.cfg.Webhooks
	src, ok := s.cfg.Queue.(noticeSource)
	if !ok {
		return
	}
	if c == nil {
		c = &WebhookConfig{}
	}
	client := webhookClient(c)
	var cons jetstream.Consumer
	for cons == nil {
		var err error
		if cons, err = src.Notices(ctx, c.timeout()+30*time.Second); err != nil {
			s.log.Warn("edge: webhooks: the notify consumer", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(watchRetry):
			}
		}
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		batch, err := cons.Fetch(cap(sem), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("edge: webhooks: fetching notices", "error", err)
				time.Sleep(time.Second)
			}
			continue
		}
		for msg := range batch.Messages() {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				s.deliverNotice(ctx, client, msg)
			})
		}
	}
}

// deliverNotice posts one notice and acknowledges it once the receiver
// answered 2xx; otherwise it gives it back for a later try, until the
// notice is NoticeRetention old.
func (s *Server) deliverNotice(ctx context.Context, client *http.Client, msg jetstream.Msg) {
	c := s.cfg.Webhooks
	if c == nil {
		c = &WebhookConfig{} // tenant events only
	}
	n, err := queue.DecodeNotice(msg.Data())
	if err != nil {
		s.log.Error("edge: webhooks: dropping an undecodable notice", "error", err)
		_ = msg.TermWithReason("undecodable notice")
		return
	}
	if n.Webhook.URL != "" && s.cfg.Webhooks == nil {
		_ = msg.NakWithDelay(5 * time.Second) // for an edge that calls webhooks
		return
	}
	if n.Webhook.URL != "" {
		u, _ := url.Parse(n.Webhook.URL)
		if !c.hostAllowed(u.Hostname()) {
			s.log.Warn("edge: webhooks: dropping a notice whose host is no longer allowed", "job", n.JobID, "host", u.Hostname())
			_ = msg.TermWithReason("host not allowed")
			return
		}
	}
	// A delivery under way when the edge stops runs to its end (within the
	// webhook timeout): cut off, it could reach the receiver unacknowledged,
	// and another edge would deliver it again.
	err = s.sendNotice(context.WithoutCancel(ctx), client, n)
	if err == nil {
		s.log.Debug("edge: webhook delivered", "job", n.JobID, "tenant", n.Tenant)
		// Acknowledged even when the edge is stopping: the receiver has it.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := msg.DoubleAck(actx); err != nil {
			s.log.Warn("edge: webhooks: acknowledging a delivered notice (it may be delivered again)", "job", n.JobID, "error", err)
		}
		return
	}
	if time.Since(n.Ended) > queue.NoticeRetention {
		s.log.Error("edge: webhooks: giving up a notice a day old", "job", n.JobID, "tenant", n.Tenant, "error", err)
		_ = msg.TermWithReason("undelivered for a day")
		return
	}
	tries := uint64(1)
	if md, err := msg.Metadata(); err == nil {
		tries = md.NumDelivered
	}
	retry := c.Retry
	if retry <= 0 {
		retry = 5 * time.Second
	}
	delay := min(retry<<min(tries-1, 20), time.Hour)
	s.log.Info("edge: webhook not delivered; trying again", "job", n.JobID, "tenant", n.Tenant, "try", tries, "in", delay, "error", err)
	_ = msg.NakWithDelay(delay)
}

// sendNotice makes one delivery to each of the notice's destinations: its
// webhook and its tenant's event subject.
func (s *Server) sendNotice(ctx context.Context, client *http.Client, n *queue.Notice) error {
	var errs []error
	if n.Webhook.URL != "" {
		errs = append(errs, s.postNotice(ctx, client, n))
	}
	if n.Subject != "" {
		errs = append(errs, s.sendEvent(ctx, n))
	}
	return errors.Join(errs...)
}

// sendEvent sends the notice's body as a request to the tenant's event
// subject and waits for a subscriber's reply.
func (s *Server) sendEvent(ctx context.Context, n *queue.Notice) error {
	q, ok := s.cfg.Queue.(eventSender)
	if !ok {
		return errors.New("this queue sends no tenant events")
	}
	body, err := webhookPayload(n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Webhooks.timeout())
	defer cancel()
	return q.SendEvent(ctx, n.Tenant, n.Subject, n.JobID, body)
}

// postNotice makes one delivery.
func (s *Server) postNotice(ctx context.Context, client *http.Client, n *queue.Notice) error {
	body, err := webhookPayload(n)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.Webhook.URL, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Bulkhead-Webhooks/1")
	req.Header.Set("webhook-id", n.JobID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", signWebhook(n.Webhook.Secret, n.JobID, ts, body))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}
