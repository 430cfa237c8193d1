package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Tenant events. A tenant may take its async notices and its API keys'
// budget alerts on the bus instead of (or besides) a webhook: an edge takes
// each notice from the notify stream and sends it as a NATS request to
// EventSubject(tenant, subject); the tenant's subscriber acknowledges it by
// replying. No reply (nobody listening, or a subscriber that failed) is a
// failed delivery, retried like a webhook's, so delivery is at least once.
// Tenants connect with their own nkey (TenantCredsDir), which may only
// subscribe below their own prefix and answer the requests it receives.
const (
	EventsPrefix = "bulkhead.events." // + tenant + "." + the tenant's subject
	// MaxEventSubject bounds the tenant's part of an event subject.
	MaxEventSubject = 128
	// TenantCredsDir is the directory, inside a NATS server's auth
	// directory, of tenants' seeds: <tenant>.nk.
	TenantCredsDir = "tenants"
)

// ValidEventSubject reports whether s may name a tenant's event subject:
// 1 to MaxEventSubject bytes, at most 8 dot-separated tokens of letters,
// digits, '-' and '_' (no wildcards).
func ValidEventSubject(s string) bool {
	if s == "" || len(s) > MaxEventSubject {
		return false
	}
	tokens := strings.Split(s, ".")
	if len(tokens) > 8 {
		return false
	}
	for _, tok := range tokens {
		if !ValidTenant(tok) {
			return false
		}
	}
	return true
}

// EventSubject is where tenant's events on subject are sent.
func EventSubject(tenant, subject string) string {
	return EventsPrefix + tenant + "." + subject
}

// TenantPermissions let a tenant's connection subscribe to its own events
// and its private inbox, and answer the requests it receives; it may
// publish nothing else.
func TenantPermissions(tenant, pub string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Deny: []string{">"}},
		Subscribe: &server.SubjectPermission{Allow: []string{EventsPrefix + tenant + ".>", InboxPrefix(pub) + ".>"}},
		Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
	}
}

// LoadOrCreateTenantCreds reads tenant's seed from dir/TenantCredsDir,
// writing a new one (0600) when it is missing: hand it to the tenant.
func LoadOrCreateTenantCreds(dir, tenant string) (*Credentials, error) {
	if !ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: tenant %q", ErrCredentials, tenant)
	}
	tdir := filepath.Join(dir, TenantCredsDir)
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCredentials, err)
	}
	path := filepath.Join(tdir, tenant+".nk")
	c, err := LoadCredentials(path)
	if errors.Is(err, os.ErrNotExist) {
		if c, err = NewCredentials(""); err == nil {
			err = c.WriteFile(path)
		}
	}
	return c, err
}

// loadTenants reads every tenant seed in dir/TenantCredsDir.
func loadTenants(dir string) (map[string]*Credentials, error) {
	files, err := filepath.Glob(filepath.Join(dir, TenantCredsDir, "*.nk"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCredentials, err)
	}
	out := map[string]*Credentials{}
	for _, f := range files {
		tenant := strings.TrimSuffix(filepath.Base(f), ".nk")
		if !ValidTenant(tenant) {
			return nil, fmt.Errorf("%w: %s does not name a tenant", ErrCredentials, f)
		}
		c, err := LoadCredentials(f)
		if err != nil {
			return nil, err
		}
		out[tenant] = c
	}
	return out, nil
}

// SendEvent sends one tenant event as a request and waits for the tenant's
// reply, within ctx: an error when nobody answered. id names the event
// (the Bulkhead-Event-Id header), so a subscriber can drop a redelivery.
func (c *Client) SendEvent(ctx context.Context, tenant, subject, id string, body []byte) error {
	if !ValidTenant(tenant) || !ValidEventSubject(subject) {
		return fmt.Errorf("%w: event subject %q of tenant %q", ErrBadMessage, subject, tenant)
	}
	msg := nats.NewMsg(EventSubject(tenant, subject))
	msg.Header.Set(EventIDHeader, id)
	msg.Data = body
	if _, err := c.nc.RequestMsgWithContext(ctx, msg); err != nil {
		return fmt.Errorf("queue: event %s to %s: %w", id, msg.Subject, err)
	}
	return nil
}

// EventIDHeader carries a tenant event's id.
const EventIDHeader = "Bulkhead-Event-Id"
