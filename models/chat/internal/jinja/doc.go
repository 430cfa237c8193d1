// Package jinja is github.com/ardanlabs/jinja v1.8.0 (Apache License 2.0,
// see LICENSE), a Jinja2 engine written for LLM chat templates, copied here
// with a few patches marked "Bulkhead patch" or "Bulkhead addition":
//
//   - tojson(indent=N) keeps the dict's key order (v1.8.0 sorted the keys by
//     going through Go maps, which changed every Llama 3.x and Granite tools
//     prompt), strings and floats are written as Python's json.dumps writes
//     them, and encoding failures are errors rather than empty strings;
//   - str(float) is Python's repr; trim, strip, lstrip and rstrip strip
//     Python's whitespace (U+3000 and U+001C..U+001F too), and a None
//     argument means whitespace;
//   - a render is bounded (RenderLimited: steps, output bytes, macro depth,
//     memory, context): every operation that makes a string or a list
//     charges its size to the render's Memory limit before allocating
//     (filters take the budget, budget.go); range() and string repetition
//     are capped (an error, not a truncation), a negative repetition gives
//     "" instead of panicking, printing and comparing a list that holds
//     itself end, and a panic inside the evaluator becomes an error;
//
// UPSTREAM names the module, its version and sum, and which files are
// upstream's; patches/bulkhead.diff holds every change to those files, and
// .ci/check-jinja-patch checks that upstream with the diff applied gives
// this directory's files byte for byte (-u rewrites the diff after a
// change). Upstream's tests are here as upstream_*_test.go, with their
// testdata; an expectation a patch changes is marked "Bulkhead patch".
//
// Later upstream versions (v1.9.0 on) need Go 1.27, newer than this
// module's toolchain. When the module moves to Go 1.27, compare upstream
// with these patches and drop the copy if upstream covers them.
//
// Only models/chat uses this package. It must never do I/O
// or hold state between renders; models/chat supplies strftime_now, so no
// render reads the clock.
package jinja
