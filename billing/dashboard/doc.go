// Package dashboard is the tenant usage dashboard the edge serves at
// /dashboard: a static page, its script and styles, and uPlot (the charting
// library, pinned in web/package-lock.json), all embedded in the binary from
// dist/. dist/ is built from web/ by `make dashboard` (npm ci, then
// web/build.mjs) and committed; a test checks it matches the sources.
//
// The page reads the tenant's token from a form or the URL fragment
// (#token=..., never sent to a server), keeps it in memory only, and calls
// the usage API (billing/usage) with it. The handler sets a strict content
// security policy: scripts and styles from this origin only, no framing, no
// referrer.
//
// It serves files; it never reads usage or tokens itself.
package dashboard
