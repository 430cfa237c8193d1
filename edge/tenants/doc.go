// Package tenants maps a verified tenant to its tenant class: how many of
// its jobs may be queued or running at once across all models, its
// scheduling weight on the workers' fair scheduler (docs/fairness.md), and
// whether its jobs may use the prefix cache.
//
// It owns the class table and its flag syntax. It must never take a
// tenant, or a tenant's class, from anything but the tenant id of a
// verified token; a request body never chooses its class.
package tenants
