package ledger

import (
	"strconv"
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

const monthLayout = "2006-01"

// KeyDayNeuronsKey is the micro-neurons of tenant's API key on the UTC day
// of t, and KeyMonthNeuronsKey on its UTC month: added to, like
// DayNeuronsKey, under the request's ChargedKey claim, so each request
// counts once whoever charges it. Their budgets are the key's KeyPolicy.
func KeyDayNeuronsKey(tenant, key string, t time.Time) string {
	return tenantPrefix(tenant) + "keyneurons:" + t.UTC().Format(dayLayout) + ":" + key
}

// KeyMonthNeuronsKey: see KeyDayNeuronsKey.
func KeyMonthNeuronsKey(tenant, key string, t time.Time) string {
	return tenantPrefix(tenant) + "keyneurons:" + t.UTC().Format(monthLayout) + ":" + key
}

// KeyMonthTTL is how long a key's month total lives: past the month's end.
const KeyMonthTTL = 33 * 24 * time.Hour

// KeyPolicyKey is the hash of tenant's API key's limits (KeyPolicy):
// fields rpm, concurrency, daily and monthly (micro-neurons), soft ("1":
// budgets only alert) and webhook (JSON). edge/quota's scripts read it.
func KeyPolicyKey(tenant, key string) string { return tenantPrefix(tenant) + "keypolicy:" + key }

// keyPoliciesKey is the set of tenant's keys that have a policy.
func keyPoliciesKey(tenant string) string { return tenantPrefix(tenant) + "keypolicies" }

// alertMarkKey is set (to the request id that crossed it) once key's
// threshold th of its budget over period start is crossed.
func alertMarkKey(tenant, key, start string, th int) string {
	return tenantPrefix(tenant) + "alerted:" + start + ":" + strconv.Itoa(th) + ":" + key
}

// alertsKey lists tenant's most recent budget alerts (JSON), newest first.
func alertsKey(tenant string) string { return tenantPrefix(tenant) + "alerts" }
