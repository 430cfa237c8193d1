package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeNamesEveryPackage: the README's Layout section names every
// package of the module by its path, and every package path it names
// exists, so the list can neither miss a package nor keep one that moved.
func TestReadmeNamesEveryPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	layout := readmeLayout(t, filepath.Join("..", "..", "README.md"))
	missing, stale := layoutMismatch(strings.Fields(string(out)), layout, filepath.Join("..", ".."))
	for _, p := range missing {
		t.Errorf("README's Layout does not name package %s", p)
	}
	for _, p := range stale {
		t.Errorf("README's Layout names %s, which is no directory of the repository", p)
	}
}

// readmeLayout returns the README's "## Layout" section.
func readmeLayout(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatalf("%s has no ## Layout section", path)
	}
	if next := strings.Index(layout, "\n## "); next >= 0 {
		layout = layout[:next]
	}
	return layout
}

// layerPath matches a code span that names a path in one of the module's
// top-level folders.
var layerPath = regexp.MustCompile("`((?:models|workers|edge|queue|billing|cmd|deploy)(?:/[a-z0-9_]+)*)/?`")

// layoutMismatch returns the packages (import paths) that layout does not
// name in a code span, and the paths it names that are no directory under
// root.
func layoutMismatch(packages []string, layout, root string) (missing, stale []string) {
	named := map[string]bool{}
	for _, m := range layerPath.FindAllStringSubmatch(layout, -1) {
		named[m[1]] = true
	}
	for _, p := range packages {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if !named[rel] {
			missing = append(missing, rel)
		}
	}
	for p := range named {
		if fi, err := os.Stat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
			stale = append(stale, p)
		}
	}
	return missing, stale
}

// TestLayoutMismatch: the README check finds a package left out and a path
// that is gone.
func TestLayoutMismatch(t *testing.T) {
	root := filepath.Join("..", "..")
	layout := "- `models/gguf`: files.\n- `models/gone`: moved away.\n- `edge/`: the edge."
	missing, stale := layoutMismatch([]string{module + "/models/gguf", module + "/edge", module + "/queue"}, layout, root)
	if strings.Join(missing, ",") != "queue" || strings.Join(stale, ",") != "models/gone" {
		t.Fatalf("missing %v, stale %v; want [queue] and [models/gone]", missing, stale)
	}
}
