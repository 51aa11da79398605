// Package gosrc reads the project's own Go source, for tests that check it
// against its documentation and its rules: the string constants a package
// declares, with those built from other constants (Prefix + "phase").
//
// What it does not do: type-check; only string literals, identifiers,
// selectors of other scanned packages, + and parentheses are evaluated.
package gosrc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Const is one string constant.
type Const struct {
	// Pkg is the package's directory name under the root; Name the
	// constant's.
	Pkg, Name string
	Value     string
	// Typed: declared with a type (Kind = "label"), not a bare string.
	Typed bool
}

// StringConsts returns the string constants declared in the non-test
// files of the packages in root/pkg for each pkg, sorted by package and
// name.
func StringConsts(root string, pkgs ...string) ([]Const, error) {
	type spec struct {
		pkg, name string
		expr      ast.Expr
		typed     bool
	}
	var specs []spec
	fset := token.NewFileSet()
	for _, pkg := range pkgs {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil {
			return nil, err
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return nil, fmt.Errorf("parse %s: %w", path, err)
			}
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							specs = append(specs, spec{pkg, n.Name, vs.Values[i], vs.Type != nil})
						}
					}
				}
			}
		}
	}
	values := map[string]string{} // "pkg.Name" -> value
	var eval func(pkg string, e ast.Expr) (string, bool)
	eval = func(pkg string, e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			v, err := strconv.Unquote(e.Value)
			return v, err == nil
		case *ast.Ident:
			v, ok := values[pkg+"."+e.Name]
			return v, ok
		case *ast.SelectorExpr:
			x, ok := e.X.(*ast.Ident)
			if !ok {
				return "", false
			}
			v, ok := values[x.Name+"."+e.Sel.Name]
			return v, ok
		case *ast.BinaryExpr:
			x, okx := eval(pkg, e.X)
			y, oky := eval(pkg, e.Y)
			return x + y, okx && oky && e.Op == token.ADD
		case *ast.ParenExpr:
			return eval(pkg, e.X)
		}
		return "", false
	}
	for changed := true; changed; { // until every constant built from others is known
		changed = false
		for _, s := range specs {
			if _, done := values[s.pkg+"."+s.name]; done {
				continue
			}
			if v, ok := eval(s.pkg, s.expr); ok {
				values[s.pkg+"."+s.name] = v
				changed = true
			}
		}
	}
	var out []Const
	for _, s := range specs {
		if v, ok := values[s.pkg+"."+s.name]; ok {
			out = append(out, Const{Pkg: s.pkg, Name: s.name, Value: v, Typed: s.typed})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pkg != out[j].Pkg {
			return out[i].Pkg < out[j].Pkg
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
