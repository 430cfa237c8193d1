// Package usage is the usage API: a tenant's usage over time per model as
// JSON or CSV (GET .../ai/usage), its neurons today against the daily
// budget, and its recent requests, paged (GET .../ai/usage/requests), all
// read from billing/ledger.
//
// It answers only for the tenant its Authorize function returns, which the
// edge takes from the verified token (scope billing:read, own account only);
// nothing in a query can name another tenant. Errors go to the caller's
// WriteError, so they render through the edge's one error table.
//
// It reads; it never records usage or decides a quota.
package usage
