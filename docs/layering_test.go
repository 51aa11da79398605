package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/maintenance-handler/maintenance-handler/"

// importGraph is `go list -deps` of pkgs: each package's imports, by
// import path.
func importGraph(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
	}
	return imports
}

// chain is the longest chain of the project's packages that pkg's imports
// make, pkg first.
func chain(graph map[string][]string, pkg string) []string {
	memo := map[string][]string{}
	var longest func(string) []string
	longest = func(p string) []string {
		if c, ok := memo[p]; ok {
			return c
		}
		best := []string{p}
		for _, q := range graph[p] {
			if c := longest(q); strings.HasPrefix(q, module) && len(c)+1 > len(best) {
				best = append([]string{p}, c...)
			}
		}
		memo[p] = best
		return best
	}
	return longest(pkg)
}

// TestLayering: the shelves hold.
//   - No shipped package (outside test/) depends on anything under test/.
//   - The rules are pure: lifecycle, fleet and the wire packages they read
//     (protocol, maintenance, policy, window) link no client-go, no clock,
//     and no package of the project that speaks HTTP or runs anything
//     (agent, aggregator, compute, drain, kube, metadata, metrics,
//     backoff, internal/...).
//   - The kubectl plugin links neither runtime (agent, aggregator) nor a
//     Compute Engine client (golang.org/x/oauth2/google); its chain of the
//     project's packages is at most 7 deep, the agent's at most 6.
//   - kube, the API client, imports no package of the project.
//   - The agent depends on nothing under internal/, links no client-go and
//     no codec factory (its binary was 16.1 MB with them, 11.9 MB without);
//     no binary links client-go's typed clientset, whose scheme registers
//     every API group (the aggregator was 29 MB and the plugin 47 MB with
//     it), or cli-runtime.
func TestLayering(t *testing.T) {
	shipped := 0
	for pkg, imports := range importGraph(t, "./...") {
		if !strings.HasPrefix(pkg, module) || strings.HasPrefix(pkg, module+"test/") {
			continue
		}
		shipped++
		for _, imp := range imports {
			if strings.HasPrefix(imp, module+"test/") {
				t.Errorf("%s imports %s: shipped code must not depend on the test world", pkg, imp)
			}
		}
	}
	if shipped < 15 {
		t.Fatalf("found %d shipped packages: the listing is broken", shipped)
	}

	pure := []string{"lifecycle", "fleet", "protocol", "maintenance", "policy", "window"}
	wire := map[string]bool{}
	for _, p := range pure {
		wire[module+p] = true
	}
	graph := importGraph(t, "./lifecycle", "./fleet")
	for _, p := range []string{"lifecycle", "fleet"} {
		if _, ok := graph[module+p]; !ok {
			t.Fatalf("go list -deps does not list %s: the listing is broken", p)
		}
	}
	for pkg, imports := range importGraph(t, "./lifecycle", "./fleet", "./protocol", "./maintenance", "./policy", "./window") {
		switch {
		case strings.HasPrefix(pkg, "k8s.io/client-go/") || pkg == "k8s.io/utils/clock":
			t.Errorf("a pure package links %s", pkg)
		case strings.HasPrefix(pkg, module) && !wire[pkg]:
			t.Errorf("a pure package links %s, which is not one of the pure packages %v", pkg, pure)
		case wire[pkg] && slices.Contains(imports, "net/http"):
			t.Errorf("%s imports net/http", pkg)
		}
	}

	plugin := importGraph(t, "./cmd/kubectl-gce_maintenance")
	for pkg := range plugin {
		if pkg == module+"agent" || pkg == module+"aggregator" || strings.HasPrefix(pkg, "golang.org/x/oauth2/google") {
			t.Errorf("kubectl-gce_maintenance links %s", pkg)
		}
	}
	for bin, most := range map[string]int{"cmd/kubectl-gce_maintenance": 7, "cmd/agent": 6} {
		if c := chain(importGraph(t, "./"+bin), module+bin); len(c) > most {
			t.Errorf("%s's imports are %d packages deep, more than %d: %s", bin, len(c), most, strings.ReplaceAll(strings.Join(c, " -> "), module, ""))
		}
	}
	for _, imp := range importGraph(t, "./kube")[module+"kube"] {
		if strings.HasPrefix(imp, module) {
			t.Errorf("kube imports %s", imp)
		}
	}

	for pkg := range importGraph(t, "./agent") {
		if strings.HasPrefix(pkg, module+"internal/") {
			t.Errorf("agent depends on %s", pkg)
		}
	}
	// One stack in every binary: client-go for the API server, Prometheus's
	// Go client for the metrics; the agent and the plugin without the
	// scheme of every API group (the aggregator links it: client-go's
	// leader election takes the typed clientset).
	for bin, want := range map[string][]string{
		"cmd/agent":                   {"k8s.io/client-go/rest", "k8s.io/client-go/tools/cache", "k8s.io/client-go/tools/record", "k8s.io/client-go/tools/clientcmd", promClient},
		"cmd/aggregator":              {"k8s.io/client-go/rest", "k8s.io/client-go/tools/cache", "k8s.io/client-go/tools/leaderelection", "k8s.io/client-go/tools/clientcmd", promClient},
		"cmd/kubectl-gce_maintenance": {"k8s.io/client-go/rest", "k8s.io/client-go/tools/clientcmd"},
	} {
		deps := importGraph(t, "./"+bin)
		for _, w := range want {
			if _, ok := deps[w]; !ok {
				t.Errorf("%s does not link %s", bin, w)
			}
		}
		for _, heavy := range []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/kubernetes/scheme", "k8s.io/cli-runtime/pkg/genericclioptions"} {
			if _, ok := deps[heavy]; ok && bin != "cmd/aggregator" {
				t.Errorf("%s links %s", bin, heavy)
			}
		}
	}
}

// promClient is Prometheus's Go client.
const promClient = "github.com/prometheus/client_golang/prometheus"

// The ceilings on product code (every Go file outside test/ and build/,
// tests excepted): a file of at most maxFileLines lines, a function of at
// most maxFuncLines lines and a cyclomatic complexity of at most
// maxComplexity (1, plus one for each if, for, case and && or ||).
const (
	maxFileLines  = 400
	maxFuncLines  = 80
	maxComplexity = 25
)

// ceilingExceptions are the functions over a ceiling, each with its size
// when it was named here and why it stands. An exception may shrink, never
// grow; one that comes under the ceiling must leave this list.
var ceilingExceptions = map[string]struct {
	lines, complexity int
	why               string
}{
	"aggregator/aggregator.go Aggregator.pass": {97, 20, "one pass's steps in order (read, decide, claim, write, announce)"},
	"cmd/agent/main.go runOnNode":              {95, 9, "the agent binary's wiring of every piece, in order"},
}

// complexity is fn's cyclomatic complexity.
func complexity(fn *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// funcName is fn's name, with its receiver's type for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// TestCeilings: no product file over maxFileLines lines, and no function
// over maxFuncLines lines or maxComplexity but the named exceptions, none
// of which has grown.
func TestCeilings(t *testing.T) {
	fset := token.NewFileSet()
	seen, files := map[string]bool{}, 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || rel == "test" || rel == "build" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			t.Errorf("%s has %d lines, more than %d: split it by what its parts do", rel, n, maxFileLines)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := rel + " " + funcName(fn)
			lines, cc := fset.Position(fn.End()).Line-fset.Position(fn.Pos()).Line+1, complexity(fn)
			ex, excepted := ceilingExceptions[name]
			seen[name] = excepted
			switch {
			case excepted && (lines > ex.lines || cc > ex.complexity):
				t.Errorf("%s grew to %d lines, complexity %d (its exception allows %d, %d): shrink it", name, lines, cc, ex.lines, ex.complexity)
			case excepted && lines <= maxFuncLines && cc <= maxComplexity:
				t.Errorf("%s is under the ceilings now (%d lines, complexity %d): remove its exception", name, lines, cc)
			case !excepted && (lines > maxFuncLines || cc > maxComplexity):
				t.Errorf("%s has %d lines and a complexity of %d, over the ceilings (%d, %d): split it", name, lines, cc, maxFuncLines, maxComplexity)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("found %d product files: the scan is broken", files)
	}
	for name := range ceilingExceptions {
		if !seen[name] {
			t.Errorf("the exception %s names no function: remove it", name)
		}
	}
}

// maxTestFileLines is the ceiling on a test file: a test file mirrors the
// file it tests, and one that outgrows it is split the same way.
const maxTestFileLines = 800

// TestTestFileCeiling: no test file over maxTestFileLines lines.
func TestTestFileCeiling(t *testing.T) {
	files := walkTestFiles(t, func(rel, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > maxTestFileLines {
			t.Errorf("%s has %d lines, more than %d: split it by the files it tests", rel, n, maxTestFileLines)
		}
	})
	if files == 0 {
		t.Fatal("walked no test files")
	}
}

// walkTestFiles calls visit with each test file of the repository, its
// path from the root and from here, and says how many it visited.
func walkTestFiles(t *testing.T, visit func(rel, path string)) int {
	t.Helper()
	files := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && rel != "." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			files++
			visit(rel, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// crossCutting are the names a pure test file may have without a product
// file of the same name beside it: each is about the package as a whole.
var crossCutting = map[string]string{
	"export_test.go":      "the package's internals exported to its external tests",
	"fuzz_test.go":        "the fuzz targets over the package's parsers",
	"bench_test.go":       "the package's benchmarks",
	"model_test.go":       "the model test over random histories",
	"flags_test.go":       "a binary's flags against the flag reference",
	"contract_test.go":    "every call against Google's API description",
	"conventions_test.go": "kubectl's plugin conventions",
}

// TestTestsMirrorTheirFiles: in a package of product code, a pure test
// file (not of the world tier) is named after the file it tests
// (plan_test.go tests plan.go; mirror_fuzz_test.go fuzzes mirror.go), after
// its package, or is one of crossCutting. A package with no product code
// of its own (docs, manifests, monitoring) tests files that are not Go,
// and is left out.
func TestTestsMirrorTheirFiles(t *testing.T) {
	checked := 0
	walkTestFiles(t, func(rel, path string) {
		name, dir := filepath.Base(path), filepath.Dir(path)
		if strings.HasSuffix(name, "_world_test.go") {
			return
		}
		product, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		product = slices.DeleteFunc(product, func(f string) bool {
			return strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "doc.go"
		})
		if len(product) == 0 {
			return
		}
		checked++
		tested := strings.TrimSuffix(strings.TrimSuffix(name, "_test.go"), "_fuzz")
		if _, ok := crossCutting[name]; ok || tested == filepath.Base(dir) {
			return
		}
		if _, err := os.Stat(filepath.Join(dir, tested+".go")); err != nil {
			t.Errorf("%s tests no file of its own name: name it after the file it tests, or move its tests beside that file's", rel)
		}
	})
	if checked < 50 {
		t.Fatalf("checked %d test files: the walk is broken", checked)
	}
}
