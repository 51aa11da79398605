// Package docs_test checks that the README documents the Node protocol:
// every label, annotation and taint key the code declares.
package docs_test

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gosrc"
	"github.com/maintenance-handler/maintenance-handler/window"
)

// nodeKeys returns the Label*, Annotation* and Taint* string constants
// declared in the packages' non-test files, by "pkg.Name", with their
// values (constants built from other constants included).
func nodeKeys(t *testing.T, pkgs ...string) map[string]string {
	t.Helper()
	consts, err := gosrc.StringConsts("..", pkgs...)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, c := range consts {
		if strings.HasPrefix(c.Name, "Label") || strings.HasPrefix(c.Name, "Annotation") || strings.HasPrefix(c.Name, "Taint") {
			keys[c.Pkg+"."+c.Name] = c.Value
		}
	}
	return keys
}

// readme is the user documentation's text: the README, then every page of
// docs/.
func readme(t *testing.T) string {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, f := range append([]string{"../README.md"}, pages...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text.Write(b)
		text.WriteString("\n")
	}
	return text.String()
}

// readmeBlock is the text of the README's first fenced block in lang
// whose text starts with prefix.
func readmeBlock(t *testing.T, lang, prefix string) string {
	t.Helper()
	text, fence := readme(t), "```"+lang+"\n"
	start := strings.Index(text, fence+prefix)
	if start < 0 {
		t.Fatalf("the README has no %s block starting with %q", lang, prefix)
	}
	block := text[start+len(fence):]
	return block[:strings.Index(block, "```")]
}

func TestNodeProtocolDocumented(t *testing.T) {
	b, err := os.ReadFile("protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range protocol.Keys {
		if !strings.Contains(string(b), "`"+k.Name+"`") {
			t.Errorf("%s (%s) is not in docs/protocol.md", k.Name, k.Kind)
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

// TestREADMEPolicyExampleParses: the README's policy.yaml example is
// valid, within GKE's limits, and means what its comments say.
func TestREADMEPolicyExampleParses(t *testing.T) {
	example := readmeBlock(t, "yaml", "cluster:")
	cfg, err := policy.ParseConfig(example)
	if err != nil {
		t.Fatalf("the README's example is invalid: %v", err)
	}
	if len(cfg.PoolErrors) > 0 {
		t.Fatalf("the README's example has invalid pools: %v", cfg.PoolErrors)
	}
	christmas := time.Date(2026, 12, 26, 3, 0, 0, 0, time.UTC) // a Saturday, in the year-end freeze
	if r, _ := cfg.Policy("any").Blocks(christmas); r != window.ReasonExcluded {
		t.Errorf("Blocks(%s) = %q, want %s (year-end)", christmas, r, window.ReasonExcluded)
	}
	saturday := time.Date(2027, 1, 9, 3, 0, 0, 0, time.UTC) // in the window, in the no_minor_upgrades exclusion
	if r, _ := cfg.Policy("any").Blocks(saturday); r != "" {
		t.Errorf("Blocks(%s) = %q, want nothing (no_minor_upgrades does not block node maintenance)", saturday, r)
	}
}

// TestREADMENoticeExampleIsTheFile: the Python example the README shows
// for the notice endpoint is examples/notice/notice.py, which
// TestNoticeExamplesRunAsWritten runs.
func TestREADMENoticeExampleIsTheFile(t *testing.T) {
	shown := readmeBlock(t, "python", "")
	file, err := os.ReadFile("../examples/notice/notice.py")
	if err != nil {
		t.Fatal(err)
	}
	if shown != string(file) {
		t.Error("the README's Python example is not examples/notice/notice.py: copy the file into it")
	}
}

// TestDevelopmentMapIsReal: every file or folder DEVELOPMENT.md names
// exists, and so does every package of the module it should name.
func TestDevelopmentMapIsReal(t *testing.T) {
	b, err := os.ReadFile("../DEVELOPMENT.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	named := 0
	for _, quoted := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(text, -1) {
		p := strings.TrimSuffix(strings.TrimPrefix(quoted[1], "./"), "/")
		if !regexp.MustCompile(`^[a-z][a-z0-9_./-]*$`).MatchString(p) || !strings.Contains(p, "/") {
			continue // not a path: a command, a key, a pattern, a file of every package
		}
		if strings.HasPrefix(p, "golang.org/") || strings.HasPrefix(p, "k8s.io/") {
			continue
		}
		named++
		if _, err := os.Stat(filepath.Join("..", p)); err != nil {
			t.Errorf("DEVELOPMENT.md names %s, which does not exist", p)
		}
	}
	if named < 30 {
		t.Fatalf("found %d paths in DEVELOPMENT.md: the scan is broken", named)
	}
	// Every package directory with Go code is on the map.
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" {
			return filepath.SkipDir
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		rel, _ := filepath.Rel("..", path)
		if len(files) > 0 && rel != "docs" && !strings.Contains(text, "`"+filepath.ToSlash(rel)) {
			t.Errorf("DEVELOPMENT.md does not name the package %s", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorldTierNamedSo: a test file that starts the test world
// (testworld.Need) is named *_world_test.go, so the tier shows in the file
// list; the world's own package and its benchmarks included.
func TestWorldTierNamedSo(t *testing.T) {
	world := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		needs := strings.Contains(string(b), "testworld."+"Need(") // split, so that this file does not match
		named := strings.HasSuffix(path, "_world_test.go")
		if named {
			world++
		}
		if needs && !named {
			t.Errorf("%s starts the test world but is not named *_world_test.go", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if world < 10 {
		t.Fatalf("found %d world-tier files: the scan is broken", world)
	}
}

// TestREADMERoleCoversEveryComputeMethod: every role the README tells
// users to create grants exactly the permissions of the Compute Engine
// methods the agent calls.
func TestREADMERoleCoversEveryComputeMethod(t *testing.T) {
	var want []string
	for _, m := range compute.Methods {
		want = append(want, m.Permission)
	}
	sort.Strings(want)
	roles := regexp.MustCompile(`--permissions=(\S+)`).FindAllStringSubmatch(readme(t), -1)
	if len(roles) == 0 {
		t.Fatal("the README creates no IAM role")
	}
	// A role with the optional methods' permissions too is the one for
	// agents whose flags call them.
	withOptional := append([]string(nil), want...)
	for _, m := range compute.OptionalMethods {
		withOptional = append(withOptional, m.Permission)
	}
	sort.Strings(withOptional)
	for _, r := range roles {
		got := strings.Split(r[1], ",")
		sort.Strings(got)
		if g := strings.Join(got, ","); g != strings.Join(want, ",") && g != strings.Join(withOptional, ",") {
			t.Errorf("the README's role grants %v; the agent calls %v, which need %v (and %v where its flags ask for it)", got, compute.Methods, want, compute.OptionalMethods)
		}
	}
}

// TestEveryPermissionNamedIsOneTheProductNames: every Compute Engine IAM
// permission the README, the CHANGELOG and docs/ name is one that the
// product's 403 handling names (a method's permission, or the
// aggregator's reservation reads). A permission Google does not have
// (such as one named after reportHostAsFaulty, whose permission is
// compute.instances.update) makes a custom role fail whole.
func TestEveryPermissionNamedIsOneTheProductNames(t *testing.T) {
	known := map[string]bool{compute.BlockListPermission: true, compute.SubBlockListPermission: true}
	for _, m := range append(append([]compute.Method(nil), compute.Methods...), compute.OptionalMethods...) {
		known[m.Permission] = true
	}
	files := []string{"../README.md", "../CHANGELOG.md"}
	more, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, more...)
	permission := regexp.MustCompile(`\bcompute\.(instances|zoneOperations|reservations|reservationBlocks|reservationSubBlocks)\.[a-zA-Z]+\b`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range permission.FindAllString(string(b), -1) {
			if !known[p] {
				t.Errorf("%s names the permission %s, which the product never names (it names %v)", f, p, slices.Sorted(maps.Keys(known)))
			}
		}
	}
}

// TestDocLinksResolve: every relative link in the README and docs/ names a
// file that exists and, where it names a heading, a heading of that file
// (as GitHub writes a heading's anchor).
func TestDocLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading := regexp.MustCompile("(?m)^#+ (.*)$")
	fence := regexp.MustCompile("(?s)```.*?```")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil
		}
		a := map[string]bool{}
		for _, h := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			a[anchor(h[1])] = true
		}
		anchors[file] = a
		return a
	}
	checked := 0
	for _, page := range append([]string{"../README.md", "../CONTRIBUTING.md", "../SECURITY.md", "../CODE_OF_CONDUCT.md"}, pages...) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, target)
				continue
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[frag] {
				t.Errorf("%s links to %s: %s has no such heading", page, target, path)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("%d links checked: the scan is broken", checked)
	}
}

// anchor is the anchor GitHub gives a heading: lower case, punctuation
// but hyphens dropped, spaces as hyphens.
func anchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestREADMEIsAFrontDoor: the README stays a front door (what it is, why,
// the demo, install, where to read next); the rest is in docs/, by reader.
func TestREADMEIsAFrontDoor(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 200 {
		t.Errorf("the README has %d lines, more than 200: move the detail into docs/", n)
	}
}

// TestCommunityFiles: a clean clone says its licence (Apache-2.0), how to
// contribute, how to report a vulnerability, and its code of conduct.
func TestCommunityFiles(t *testing.T) {
	for file, says := range map[string]string{
		"../LICENSE":            "Apache License\n                           Version 2.0",
		"../CONTRIBUTING.md":    "## Build and test",
		"../SECURITY.md":        "## Reporting a vulnerability",
		"../CODE_OF_CONDUCT.md": "Contributor Covenant",
	} {
		b, err := os.ReadFile(file)
		if err != nil || !strings.Contains(string(b), says) {
			t.Errorf("%s: %v; want it to say %q", file, err, says)
		}
	}
}

// TestPackageDocsNameRealFiles: every Go file a package's doc.go names
// (its own, or another package's by path) exists, so that a package's
// description does not drift from its files.
func TestPackageDocsNameRealFiles(t *testing.T) {
	docs, err := filepath.Glob("../*/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../*/*/doc.go")
	docs = append(docs, more...)
	named := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(doc)
		for _, m := range regexp.MustCompile(`\b([a-z][a-z0-9_]*/)*[a-z][a-z0-9_]*\.go\b`).FindAllString(string(b), -1) {
			named++
			own := filepath.Join(dir, filepath.Base(m))
			if !strings.Contains(m, "/") {
				if _, err := os.Stat(own); err != nil {
					t.Errorf("%s names %s, which is not in its package", doc, m)
				}
				continue
			}
			if _, err := os.Stat(filepath.Join("..", m)); err != nil {
				if _, err := os.Stat(own); err != nil {
					t.Errorf("%s names %s, which does not exist", doc, m)
				}
			}
		}
	}
	if len(docs) < 10 || named < 20 {
		t.Fatalf("found %d doc.go files naming %d files: the scan is broken", len(docs), named)
	}
}
