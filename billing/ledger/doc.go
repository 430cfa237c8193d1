// Package ledger is Bulkhead's record of what tenants used, in Redis: usage
// events rolled up per tenant, model, hour and UTC day, each tenant's
// neurons per UTC day (the number the daily budget is enforced on), and its
// most recent requests.
//
// Record counts one usage event in one Lua script that first claims the
// event's request id: the claim and every increment are one atomic step, so
// an event delivered twice, or replayed after a crash between counting and
// acknowledging, is counted once. The day's neuron total has its own claim
// per request (ChargedKey), shared with the edge's quota, which charges a
// completed request the moment it ends: whichever comes first charges it,
// the other adds nothing, so the dashboard and the budget read one number.
//
// Every key of a tenant carries the {tenant} hash tag (as edge/quota's do),
// so one script may touch them all on a Redis cluster. Neurons are counted
// in micro-neurons (billing/price), integers, so sums are exact.
//
// It stores and reads; it never decides whether a request may run.
package ledger
