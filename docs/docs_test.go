// Package docs_test checks that the README documents the Node protocol:
// every label, annotation and taint key the code declares.
package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// nodeKeys returns the Label*, Annotation* and Taint* string constants
// declared in the packages' non-test files, by name, with their values
// (constants built from other constants, as Prefix + "phase",
// included).
func nodeKeys(t *testing.T, pkgs ...string) map[string]string {
	t.Helper()
	values := map[string]string{} // "pkg.Name" -> value
	var specs []struct {
		pkg  string
		name string
		expr ast.Expr
	}
	fset := token.NewFileSet()
	for _, pkg := range pkgs {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
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
							specs = append(specs, struct {
								pkg  string
								name string
								expr ast.Expr
							}{pkg, n.Name, vs.Values[i]})
						}
					}
				}
			}
		}
	}
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
	keys := map[string]string{}
	for name, v := range values {
		short := name[strings.IndexByte(name, '.')+1:]
		if strings.HasPrefix(short, "Label") || strings.HasPrefix(short, "Annotation") || strings.HasPrefix(short, "Taint") {
			keys[name] = v
		}
	}
	return keys
}

func TestNodeProtocolDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "\n## Node protocol\n")
	if start < 0 {
		t.Fatal(`the README has no "## Node protocol" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	for _, k := range protocol.Keys {
		if !strings.Contains(section, "`"+k.Name+"`") {
			t.Errorf("%s (%s) is not in the README's Node protocol", k.Name, k.Kind)
		}
	}
	// Every key is declared in package protocol: no other package declares
	// one of its own.
	keys := nodeKeys(t, "protocol", "agent", "aggregator", "policy", "drain", "metrics")
	if keys["protocol.AnnotationPhase"] == "" || keys["protocol.TaintImpendingTermination"] == "" {
		t.Fatal("protocol.AnnotationPhase was not found among the declared keys: the scan is broken")
	}
	for name, key := range keys {
		if strings.Contains(key, "/") && !strings.HasPrefix(name, "protocol.") {
			t.Errorf("%s (%s) is declared outside package protocol", name, key)
		}
	}
}
