package generate

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreCurrent: every generated file on disk is what its
// source makes.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := Files("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("%d generated files: the list is broken", len(files))
	}
	for _, f := range files {
		have, err := os.ReadFile(filepath.Join("../..", f.Path))
		if err != nil {
			t.Errorf("%s: %v (run make generate)", f.Path, err)
			continue
		}
		if !bytes.Equal(have, f.Data) {
			t.Errorf("%s is not what %s makes: edit %s, not the copy, and run make generate", f.Path, f.Source, f.Source)
		}
	}
}

// TestRuleObjectsCarryEveryRule: the objects hold the rules file's groups
// under their spec, comments and all, whatever its header says.
func TestRuleObjectsCarryEveryRule(t *testing.T) {
	groups, err := groupsOf([]byte("# a header\n# groups: in a comment\ngroups:\n  - name: g\n\n    rules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "  groups:\n    - name: g\n\n      rules: []\n"; indent(groups, "  ") != want {
		t.Errorf("the groups indented under spec: %q, want %q", indent(groups, "  "), want)
	}
	if _, err := groupsOf([]byte("rules: []\n")); err == nil {
		t.Error("a rules file without groups: no error")
	}
}
