package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Stream, bucket and subject names.
const (
	JobsStream    = "BULKHEAD_JOBS" // work-queue stream holding jobs.>
	JobsPrefix    = "jobs."
	ReplyPrefix   = "bulkhead.reply."  // + request id: reply frames (core NATS)
	CancelPrefix  = "bulkhead.cancel." // + request id: cancel signal (core NATS)
	ResultsBucket = "bulkhead_results" // JetStream KV: async request status and results
)

// ModelToken turns a catalog model name (which may hold '@', '/', '.') into one
// NATS subject token: the name with every character outside [a-z0-9_-]
// replaced by '_', plus 8 hex digits of its hash so distinct names never share
// a token.
func ModelToken(model string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(model) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(model))
	return strings.Trim(b.String(), "_") + "-" + hex.EncodeToString(sum[:4])
}

// JobSubject is the subject jobs for model are published on.
func JobSubject(model string) string { return JobsPrefix + ModelToken(model) }

// ReplySubject is where a request's frames go.
func ReplySubject(requestID string) string { return ReplyPrefix + requestID }

// CancelSubject is where the edge announces that a request's client has gone.
func CancelSubject(requestID string) string { return CancelPrefix + requestID }
