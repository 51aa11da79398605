package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// writers is, for each field of the runtime's main struct in dir (the
// methods' receiver named recv), the files of dir that write it: an
// assignment to it (or to an element or field of it), ++ or --, delete
// from it, or Store, Swap or Add on it.
func writers(t *testing.T, dir, recv string) map[string]map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	field := func(e ast.Expr) (string, bool) {
		for {
			switch x := e.(type) {
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == recv {
					return x.Sel.Name, true
				}
				e = x.X
			case *ast.IndexExpr:
				e = x.X
			case *ast.StarExpr:
				e = x.X
			default:
				return "", false
			}
		}
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var written []ast.Expr
		ast.Inspect(f, func(n ast.Node) bool {
			switch s := n.(type) {
			case *ast.AssignStmt:
				written = append(written, s.Lhs...)
			case *ast.IncDecStmt:
				written = append(written, s.X)
			case *ast.CallExpr:
				if id, ok := s.Fun.(*ast.Ident); ok && id.Name == "delete" {
					written = append(written, s.Args[0])
				}
				if sel, ok := s.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Store" || sel.Sel.Name == "Swap" || sel.Sel.Name == "Add") {
					written = append(written, sel.X)
				}
			}
			return true
		})
		for _, e := range written {
			if name, ok := field(e); ok {
				if out[name] == nil {
					out[name] = map[string]bool{}
				}
				out[name][filepath.Base(path)] = true
			}
		}
	}
	return out
}

// TestStateOwnedByItsFiles: no field of the agent's or the aggregator's
// main struct is written by more than two files (the one that owns it,
// and New where it starts it), so that a reader can tell which file
// remembers what.
func TestStateOwnedByItsFiles(t *testing.T) {
	for _, pkg := range []struct{ dir, recv string }{{"../agent", "a"}, {"../aggregator", "a"}} {
		w := writers(t, pkg.dir, pkg.recv)
		if len(w) < 10 {
			t.Fatalf("%s: %d fields written, fewer than the struct has: the scan is broken", pkg.dir, len(w))
		}
		for name, files := range w {
			if len(files) <= 2 {
				continue
			}
			var list []string
			for f := range files {
				list = append(list, f)
			}
			sort.Strings(list)
			t.Errorf("%s: the field %s is written by %d files (%s); give it one owner", pkg.dir, name, len(list), strings.Join(list, ", "))
		}
	}
}
