// Package price is Bulkhead's price table and neuron arithmetic: what a
// model's prompt, cached-prompt and completion tokens cost, in neurons per
// million tokens (Workers AI's unit), taken from the catalog, and the cost of
// one request in millionths of a neuron, the integer unit every counter of
// the ledger and the quota adds up, so sums never drift.
//
// It computes; it never stores, reads Redis or decides a quota.
package price
