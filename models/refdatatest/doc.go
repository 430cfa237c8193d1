// Package refdatatest locates Bulkhead's reference data, the ../shared folder
// beside the repository, for tests and benchmarks; the product never imports
// it.
//
// Tests find a reference file with Path, which fails the test (naming the
// absolute path) when the file is missing: reference data is never skipped
// silently and never copied into the repository.
package refdatatest
