package testkit

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// testName matches a test, benchmark or fuzz function named in prose; a
// trailing * names every function with that prefix.
var testName = regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)(\*?)`)

// TestDocsNameRealTests: every test, benchmark and fuzz function the README
// and docs/ name exists in the repository's Go test files, so the docs never
// point at a test that was renamed or removed.
func TestDocsNameRealTests(t *testing.T) {
	root := filepath.Join("..", "..")
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "tmp" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	missing := map[string][]string{}
	for _, doc := range append(docs, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testName.FindAllStringSubmatch(string(b), -1) {
			name, prefix := m[1], m[2] == "*"
			if name == "TestX" || name == "BenchmarkX" || name == "FuzzX" {
				continue // the conventions' placeholder
			}
			found := defined[name]
			for d := range defined {
				found = found || (prefix && strings.HasPrefix(d, name))
			}
			if !found {
				missing[name] = append(missing[name], filepath.Base(doc))
			}
		}
	}
	names := make([]string, 0, len(missing))
	for n := range missing {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Errorf("%s is named in %v but no test file defines it", n, missing[n])
	}
	if len(defined) < 100 {
		t.Fatalf("found %d test functions; the walk missed the tree", len(defined))
	}
}
