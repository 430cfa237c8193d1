package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Stream, bucket and subject names.
const (
	JobsStream    = "BULKHEAD_JOBS" // work-queue stream holding jobs.<model>.<tenant>
	JobsPrefix    = "jobs."
	ReplyPrefix   = "bulkhead.reply."  // + request id: reply frames (core NATS)
	CancelPrefix  = "bulkhead.cancel." // + request id: cancel signal (core NATS)
	ResultsBucket = "bulkhead_results" // JetStream KV: async request status and results
)

// ModelToken turns a catalog model name (which may hold '@', '/', '.') into one
// NATS subject token: the name with every character outside [a-z0-9_-]
// replaced by '_', plus 8 hex digits of its hash so distinct names never share
// a token.
func ModelToken(model string) string { return subjectToken(model) }

// TenantToken is the subject token of a tenant id, built as ModelToken's:
// distinct tenants never share a token, whatever their ids hold.
func TenantToken(tenant string) string { return subjectToken(tenant) }

func subjectToken(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(name))
	return strings.Trim(b.String(), "_") + "-" + hex.EncodeToString(sum[:4])
}

// JobSubject is model's own subject in the jobs stream. Jobs are published
// below it, one subject per tenant (TenantJobSubject), so the stream's
// per-subject limit bounds each tenant's share (StreamConfig.MaxJobsPerTenant).
// Jobs published on JobSubject itself (by edges older than per-tenant
// subjects) are still consumed: JobFilters covers both.
func JobSubject(model string) string { return JobsPrefix + ModelToken(model) }

// TenantJobSubject is the subject tenant's jobs for model are published on.
func TenantJobSubject(model, tenant string) string {
	return JobSubject(model) + "." + TenantToken(tenant)
}

// JobFilters are the subjects a consumer of model's jobs reads: every
// tenant's subject, and model's own subject.
func JobFilters(model string) []string { return []string{JobSubject(model), JobSubject(model) + ".>"} }

// ReplySubject is where a request's frames go.
func ReplySubject(requestID string) string { return ReplyPrefix + requestID }

// CancelSubject is where the edge announces that a request's client has gone.
func CancelSubject(requestID string) string { return CancelPrefix + requestID }
