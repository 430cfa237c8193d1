// Package dashboard is the tenant usage dashboard the edge serves at
// /dashboard: a static page, its script and styles (site/, embedded as they
// are: there is no build step), and uPlot, the charting library, vendored as
// published in site/vendor/uplot (its VERSION says which and how to update
// it; a test checks the files against their SHA256SUMS).
//
// The page reads the tenant's token from a form or the URL fragment
// (#token=..., never sent to a server), keeps it in memory only, and calls
// the usage API (billing/usage) with it. The handler sets a strict content
// security policy: scripts and styles from this origin only, no framing, no
// referrer.
//
// It serves files; it never reads usage or tokens itself.
package dashboard
