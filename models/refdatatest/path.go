package refdatatest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// module is the module path whose go.mod marks the repository root.
const module = "github.com/bulkhead-ai/bulkhead"

// Path returns the absolute path of rel (slash-separated) under the reference
// data folder, the repository's sibling ../shared; an empty rel names the
// folder itself. It fails the test when the repository root cannot be found or
// the path does not exist.
func Path(t testing.TB, rel string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("refdatatest: working directory: %v", err)
	}
	root, err := repoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "..", "shared", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("reference data missing: %s (the shared/ folder must sit beside the repository): %v", p, err)
	}
	return p
}

// repoRoot walks up from dir to the directory whose go.mod declares module.
func repoRoot(dir string) (string, error) {
	for d := dir; ; {
		if isRoot(filepath.Join(d, "go.mod")) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("refdatatest: no go.mod for module %s in %s or above", module, dir)
		}
		d = parent
	}
}

// isRoot reports whether the go.mod at path declares module.
func isRoot(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == module
		}
	}
	return false
}
