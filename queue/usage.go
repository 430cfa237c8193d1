package queue

import "time"

// UsagePrefix starts the subjects usage events are published on.
const UsagePrefix = "bulkhead.usage."

// UsageSubject is the subject of a tenant's usage events: UsagePrefix plus the
// tenant as one subject token (see ModelToken), so "bulkhead.usage.>" sees all.
func UsageSubject(tenant string) string { return UsagePrefix + ModelToken(tenant) }

// UsageEvent is published (JSON, core NATS) by a worker after each job it
// completed, for billing. CachedTokens is how many of the PromptTokens were
// served from the tenant's prefix cache (Job.CachePrefix) instead of being
// computed.
type UsageEvent struct {
	Tenant           string    `json:"tenant"`
	Model            string    `json:"model"`
	RequestID        string    `json:"request_id"`
	PromptTokens     int       `json:"prompt_tokens"`
	CompletionTokens int       `json:"completion_tokens"`
	CachedTokens     int       `json:"cached_tokens,omitempty"`
	Finish           string    `json:"finish"`
	Time             time.Time `json:"time"`
}
