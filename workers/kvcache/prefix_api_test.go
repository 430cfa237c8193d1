package kvcache

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestPrefixAPITakesNoKeys is the structural half of the tenant isolation
// proof for the prefix cache: no exported function or method of this package
// takes a cache key, a hash or a namespace as an argument, and every exported
// entry point to the cache's entries is a method of *Sequence, whose Owner
// supplies the namespace. A lookup for another tenant's key cannot even be
// written.
func TestPrefixAPITakesNoKeys(t *testing.T) {
	fset := token.NewFileSet()
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var prefixFuncs []string
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !fn.Name.IsExported() {
				continue
			}
			recv := ""
			if fn.Recv != nil {
				recv = types(fn.Recv.List[0].Type)
			}
			where := fset.Position(fn.Pos()).String() + " " + recv + "." + fn.Name.Name
			for _, field := range fn.Type.Params.List {
				typ := types(field.Type)
				for _, bad := range []string{"prefixKey", "[32]byte", "[sha256.Size]byte", "*prefixEntry"} {
					if typ == bad {
						t.Errorf("%s takes a %s", where, typ)
					}
				}
				for _, n := range field.Names {
					if l := strings.ToLower(n.Name); strings.Contains(l, "namespace") || strings.Contains(l, "key") || l == "ns" || l == "owner" && strings.Contains(fn.Name.Name, "Prefix") {
						t.Errorf("%s has a parameter %s", where, n.Name)
					}
				}
			}
			if strings.Contains(fn.Name.Name, "Prefix") {
				prefixFuncs = append(prefixFuncs, recv+"."+fn.Name.Name)
				if recv != "*Sequence" && fn.Type.Params.NumFields() != 0 {
					t.Errorf("%s reaches the prefix cache with arguments but not through a Sequence", where)
				}
			}
		}
	}
	want := []string{"*Sequence.AttachPrefix", "*Sequence.PublishPrefix", "*Pool.PrefixStats", "*Pool.FlushPrefixes"}
	for _, w := range want {
		found := false
		for _, f := range prefixFuncs {
			found = found || f == w
		}
		if !found {
			t.Errorf("%s not found among %v: the test no longer sees the API it guards", w, prefixFuncs)
		}
	}
}

// types renders a parameter's type expression.
func types(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return "*" + types(x.X)
	case *ast.SelectorExpr:
		return types(x.X) + "." + x.Sel.Name
	case *ast.ArrayType:
		n := ""
		if x.Len != nil {
			switch l := x.Len.(type) {
			case *ast.BasicLit:
				n = l.Value
			default:
				n = types(l)
			}
		}
		return "[" + n + "]" + types(x.Elt)
	case *ast.Ellipsis:
		return "..." + types(x.Elt)
	}
	return "?"
}
