// Package canary checks a running Bulkhead edge for cross-tenant leaks, the
// way an operator would against production: through the public API only, with
// its own canary tenants, a bounded number of small greedy requests and a
// bounded concurrency.
//
// Each tenant's prompts carry unique markers. Every prompt that fits is first
// run alone (the quiet reference), then again under concurrent load; greedy
// output must be identical, because stale or foreign KV would change it. Every
// response is searched for other tenants' markers. A fraction of prompts are
// longer than the model's context window and must be refused with the
// prompt-too-long error, never served. With an adapter (Config.Adapter),
// each tenant uploads it as a finetune and a third of the prompts that fit
// run under it as well as without it: KV computed under the adapter and
// taken without it, or the reverse, changes an answer; the finetunes are
// deleted at the end.
//
// LoadTenants reads the canary tenants of a production edge from a token
// file (`tenant token` lines).
//
// It must never send anything but inference requests for its own tenants
// (and, with an adapter, its own tenants' canary finetunes), and never more
// than the configured number.
package canary
