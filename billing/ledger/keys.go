package ledger

import (
	"time"
)

// KeyPrefix starts every key this package writes.
const KeyPrefix = "bulkhead:billing:"

const (
	hourLayout = "2006-01-02T15"
	dayLayout  = time.DateOnly
)

func tenantPrefix(tenant string) string { return KeyPrefix + "{" + tenant + "}:" }

// DayNeuronsKey is the key of tenant's micro-neurons on the UTC day of t: an
// integer the ledger and the quota add to, each under ChargedKey's claim.
func DayNeuronsKey(tenant string, t time.Time) string {
	return tenantPrefix(tenant) + "neurons:" + t.UTC().Format(dayLayout)
}

// ChargedKey is the claim that request id has been added to its tenant's
// day total (DayNeuronsKey): set with NX by whoever charges it first.
func ChargedKey(tenant, id string) string { return tenantPrefix(tenant) + "charged:" + id }

func seenKey(tenant, id string) string { return tenantPrefix(tenant) + "seen:" + id }
func hourKey(tenant string, t time.Time) string {
	return tenantPrefix(tenant) + "hour:" + t.UTC().Format(hourLayout)
}
func dayKey(tenant string, t time.Time) string {
	return tenantPrefix(tenant) + "day:" + t.UTC().Format(dayLayout)
}
func recentKey(tenant string) string { return tenantPrefix(tenant) + "recent" }

// ChargeTTL is how long a day total and its claims live: past the day's end,
// so a request that ends just after midnight still finds its claim.
const ChargeTTL = 48 * time.Hour
