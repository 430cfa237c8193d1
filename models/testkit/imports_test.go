package testkit

import (
	"os/exec"
	"strings"
	"testing"
)

// module is the path of the repository's module.
const module = "github.com/bulkhead-ai/bulkhead"

// TestProductImportsNoTestSupport: no package of the product imports test
// support (this package, or a package named like httptest: queuetest,
// redistest, refdatatest), and this package imports only the standard
// library, so that every layer may use it.
func TestProductImportsNoTestSupport(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list named %d packages:\n%s", len(lines), out)
	}
	for _, line := range lines {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		if pkg == module+"/models/testkit" {
			for _, imp := range imports {
				if strings.Contains(strings.Split(imp, "/")[0], ".") {
					t.Errorf("testkit imports %s; it must import only the standard library", imp)
				}
			}
			continue
		}
		if testSupport(pkg) {
			continue
		}
		for _, imp := range imports {
			if testSupport(imp) {
				t.Errorf("product package %s imports test support %s", pkg, imp)
			}
		}
	}
}

// testSupport reports whether pkg is one of the module's test-support
// packages.
func testSupport(pkg string) bool {
	rest, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return false
	}
	name := rest[strings.LastIndex(rest, "/")+1:]
	return name == "testkit" || strings.HasSuffix(name, "test")
}

// TestLayering: the design card's layers, on the product's imports:
// models/ imports none of edge/, queue, workers/ or billing/; queue imports
// no other package of ours; workers/ never imports edge/, nor edge/
// workers/ (what both need, such as the grammar of structured output, lives
// in models/). cmd/ wires everything and may import anything.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := layer(fields[0])
		for _, imp := range fields[1:] {
			if why := breaks(pkg, layer(imp)); why != "" && !testSupport(fields[0]) {
				t.Errorf("%s imports %s: %s", fields[0], imp, why)
			}
		}
	}
}

// layer is the top folder of one of the module's packages ("" for others).
func layer(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return ""
	}
	top, _, _ := strings.Cut(rest, "/")
	return top
}

// breaks says which rule an import from layer from into layer to breaks, or "".
func breaks(from, to string) string {
	switch {
	case to == "" || to == from:
		return ""
	case from == "models" && to != "models":
		return "models/ imports no other layer"
	case from == "queue":
		return "queue imports no other package of ours"
	case from == "workers" && to == "edge":
		return "workers/ never imports edge/"
	case from == "edge" && to == "workers":
		return "edge/ never imports workers/"
	}
	return ""
}
