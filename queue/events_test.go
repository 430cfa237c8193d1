package queue

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidEventSubject(t *testing.T) {
	for s, want := range map[string]bool{
		"batches.done": true, "a": true, "a-b_c.d9": true, strings.Repeat("a.", 7) + "a": true,
		"": false, "a.>": false, "a.*": false, "a..b": false, ".a": false, "a b": false,
		strings.Repeat("a.", 8) + "a": false, strings.Repeat("x", MaxEventSubject+1): false,
	} {
		if got := ValidEventSubject(s); got != want {
			t.Errorf("ValidEventSubject(%q) = %v, want %v", s, got, want)
		}
	}
	if got := EventSubject("acme", "batches.done"); got != "bulkhead.events.acme.batches.done" {
		t.Errorf("EventSubject = %q", got)
	}
}

// TestNoticeDestinations: a notice needs a webhook or an event subject, and
// each it names must be valid; an alert or anomaly notice is named by it.
func TestNoticeDestinations(t *testing.T) {
	hook := Webhook{URL: "https://hooks.example.com/x", Secret: "0123456789abcdef"}
	now := time.Now()
	alert := &BudgetAlert{Key: "app", Period: PeriodDay, Start: "2026-12-03", Threshold: 80, Used: 8, Budget: 10, RequestID: "r"}
	anomaly := &CostAnomaly{Key: "app", RequestID: "r", Neurons: 3}
	for name, tc := range map[string]struct {
		n  Notice
		ok bool
	}{
		"webhook":               {Notice{JobID: "j-0", Tenant: "acme", Status: StatusDone, Ended: now, Webhook: hook}, true},
		"subject":               {Notice{JobID: "j-0", Tenant: "acme", Status: StatusDone, Ended: now, Subject: "jobs.done"}, true},
		"both":                  {Notice{JobID: "j-0", Tenant: "acme", Status: StatusFailed, Ended: now, Webhook: hook, Subject: "jobs"}, true},
		"neither":               {Notice{JobID: "j-0", Tenant: "acme", Status: StatusDone, Ended: now}, false},
		"wildcard subject":      {Notice{JobID: "j-0", Tenant: "acme", Status: StatusDone, Ended: now, Subject: "jobs.*"}, false},
		"alert":                 {Notice{JobID: alert.ID(), Tenant: "acme", Alert: alert, Ended: now, Subject: "alerts"}, true},
		"alert, another id":     {Notice{JobID: "j-0", Tenant: "acme", Alert: alert, Ended: now, Subject: "alerts"}, false},
		"alert with a status":   {Notice{JobID: alert.ID(), Tenant: "acme", Status: StatusDone, Alert: alert, Ended: now, Webhook: hook}, false},
		"anomaly":               {Notice{JobID: anomaly.ID(), Tenant: "acme", Anomaly: anomaly, Ended: now, Webhook: hook}, true},
		"alert and anomaly":     {Notice{JobID: alert.ID(), Tenant: "acme", Alert: alert, Anomaly: anomaly, Ended: now, Webhook: hook}, false},
		"alert of a bad period": {Notice{JobID: "alert-app-2026-12-03-80", Tenant: "acme", Alert: &BudgetAlert{Key: "app", Period: "week", Start: "2026-12-03", Threshold: 80, Budget: 1}, Ended: now, Webhook: hook}, false},
	} {
		err := tc.n.Validate()
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: Validate() = %v, want ok %v", name, err, tc.ok)
		}
	}
}

// TestTenantPermissions: a tenant subscribes to its own events and inbox
// only, publishes nothing, and may answer what it receives.
func TestTenantPermissions(t *testing.T) {
	p := TenantPermissions("acme", "UPUB")
	if len(p.Publish.Allow) != 0 || len(p.Publish.Deny) != 1 || p.Publish.Deny[0] != ">" {
		t.Errorf("publish %+v", p.Publish)
	}
	if want := []string{"bulkhead.events.acme.>", "_INBOX_UPUB.>"}; strings.Join(p.Subscribe.Allow, " ") != strings.Join(want, " ") {
		t.Errorf("subscribe %v, want %v", p.Subscribe.Allow, want)
	}
	if p.Response == nil || p.Response.MaxMsgs != 1 {
		t.Errorf("response %+v", p.Response)
	}
}
