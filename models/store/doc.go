// Package store owns the local model directory: downloads GGUF files into it,
// verifies and registers them, and lists them. It never loads weights for
// inference.
//
// A pull streams the body into NAME's ".partial" file next to its final name,
// resuming an interrupted transfer with an HTTP Range request (guarded by
// If-Range, so a changed remote file restarts cleanly). The first bytes must be
// a GGUF magic and version, so an HTML error page or any other body is refused
// before it is written out; the finished file must match its Content-Length,
// the sha256 given or published by the server, and gguf.Open's checks of every
// count and offset against the file size. Only then is it fsynced, renamed to
// its final name and registered in the directory's index.json, which is itself
// replaced atomically (temp file, fsync, rename) under a lock file. A failed
// pull never leaves a file under a model's final name.
//
// Plain http:// is refused except to loopback hosts, on the first request and
// on every redirect hop; redirects are followed up to a bound.
//
// This package must never import anything above models/.
package store
