// Package quota enforces per-tenant limits in Redis: requests per minute (a
// sliding one-minute window), concurrent jobs (leases that expire, so a
// crashed edge cannot hold slots forever), a tenant class's bound on its
// jobs queued or running (Jobs.MaxQueued), and a daily neuron budget that
// resets at 00:00 UTC. A request takes one lease per job it queues (an
// async batch one per job, all or none), and each counts against every
// limit until it is given back or expires (docs/fairness.md).
//
// It owns the keys under "bulkhead:quota:{<tenant>}:" and the two Lua scripts
// that read and write them: one checks every limit and takes the slots
// atomically, the other gives slots back and adds the neurons used.
//
// Time comes from the caller's clock (Config.Now), not Redis's: edges with
// skewed clocks see the one-minute window and the UTC day boundary shifted by
// their skew. The daily budget is checked at admission and charged at release
// (to the day of admission), so a tenant can overshoot it by the cost of the
// requests already in flight when it runs out.
//
// It must never admit a request past a limit because of a race between edges
// (every check-and-take is one script), never let a Redis outage pass silently
// (fail closed with ErrUnavailable unless FailOpen is configured, and then it
// logs), and never take the tenant from anything but its caller, which got it
// from a verified token.
package quota
