// Package usage is the usage API: a tenant's usage over time per model as
// JSON or CSV (GET .../ai/usage), its neurons today against the daily
// budget, its recent requests, paged (GET .../ai/usage/requests), and its
// API keys' policies, spend against their budgets and alerts (GET, PUT and
// DELETE .../ai/usage/keys[/{key}]), all kept in billing/ledger.
//
// It answers only for the tenant its Authorize function returns, which the
// edge takes from the verified token (scope billing:read, own account only);
// nothing in a query can name another tenant. Errors go to the caller's
// WriteError, so they render through the edge's one error table.
//
// It reads, and stores the key policies a tenant writes (scope
// billing:write); it never records usage or decides a quota.
package usage
