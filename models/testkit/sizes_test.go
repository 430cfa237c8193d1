package testkit

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The house style's sizes (../shared/STYLE.md and docs/conventions.md).
const (
	maxFileLines = 800 // every Go file, tests included
	maxFuncLines = 80  // every function of the product
	maxParams    = 6   // every function of the product but the kernels'
)

// sizeExempt names the folders the size rules skip, and why.
var sizeExempt = map[string]string{
	// The Jinja fork stays line for line with its upstream, so that
	// make vet's patch check can show what we changed.
	"models/chat/internal/jinja": "fork kept close to upstream",
}

// TestSizes: no Go file of the repository is over maxFileLines, and no
// function of the product is over maxFuncLines or takes more than
// maxParams parameters, so that the code cannot grow past the house style
// unnoticed. The kernels (workers/kernels) may take more parameters: their
// signatures are the assembly's calling convention and BLAS-style strided
// operands.
func TestSizes(t *testing.T) {
	root := filepath.Join("..", "..")
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if _, ok := sizeExempt[rel]; ok || d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, f := range sizeFindings(rel, src) {
			t.Error(f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s; is this the repository?", files, root)
	}
}

// sizeFindings returns what breaks the size rules in the Go file at path
// (relative to the repository, with slashes) whose text is src.
func sizeFindings(path string, src []byte) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	var out []string
	if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
		out = append(out, fmt.Sprintf("%s has %d lines, over %d: split it by concept", path, n, maxFileLines))
	}
	if strings.HasSuffix(path, "_test.go") {
		return out
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = recvName(fd.Recv.List[0].Type) + "." + name
		}
		if fd.Body != nil {
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				out = append(out, fmt.Sprintf("%s: %s has %d lines, over %d", path, name, n, maxFuncLines))
			}
		}
		if n := fd.Type.Params.NumFields(); n > maxParams && !strings.HasPrefix(path, "workers/kernels/") {
			out = append(out, fmt.Sprintf("%s: %s takes %d parameters, over %d", path, name, n, maxParams))
		}
	}
	return out
}

// recvName is the type a method's receiver names.
func recvName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.IndexListExpr:
		return recvName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}

// TestSizeFindings: each size rule reports what breaks it, and only that.
func TestSizeFindings(t *testing.T) {
	fn := func(name string, params string, lines int) string {
		return "func " + name + "(" + params + ") {\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	for _, tc := range []struct {
		name, path, src string
		want            []string // substrings of the findings, in order
	}{
		{"within", "edge/x.go", "package x\n" + fn("f", "a, b, c, d, e, f int", 80), nil},
		{"long func", "edge/x.go", "package x\n" + fn("f", "", 81), []string{"edge/x.go: f has 81 lines, over 80"}},
		{"long method", "edge/x.go", "package x\ntype T struct{}\n" + strings.Replace(fn("f", "", 90), "func f", "func (t *T) f", 1),
			[]string{"T.f has 90 lines"}},
		{"many params", "queue/x.go", "package x\nfunc f(a, b, c, d int, e string, f, g bool) {}\n", []string{"f takes 7 parameters, over 6"}},
		{"kernel params", "workers/kernels/x.go", "package x\nfunc f(a, b, c, d, e, f, g, h int)\n", nil},
		{"long file", "edge/x.go", "package x\n" + strings.Repeat("\n", 800), []string{"edge/x.go has 801 lines, over 800"}},
		{"long test", "edge/x_test.go", "package x\n" + fn("TestF", "", 200), nil},
		{"long test file", "edge/x_test.go", "package x\n" + strings.Repeat("\n", 801), []string{"has 802 lines"}},
		{"unparsable", "edge/x.go", "package x\nfunc {", []string{"edge/x.go:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sizeFindings(tc.path, []byte(tc.src))
			if len(got) != len(tc.want) {
				t.Fatalf("findings %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %q, want it to say %q", got[i], w)
				}
			}
		})
	}
}
