// Package docs_test checks that the README documents the Node protocol:
// every label, annotation and taint key the code declares.
package docs_test

import (
	"os"
	"strings"
	"testing"
	"time"

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

// readme is the README's text.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNodeProtocolDocumented(t *testing.T) {
	text := readme(t)
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

// TestREADMEPolicyExampleParses: the README's policy.yaml example is
// valid, within GKE's limits, and means what its comments say.
func TestREADMEPolicyExampleParses(t *testing.T) {
	text := readme(t)
	start := strings.Index(text, "```yaml\ncluster:")
	if start < 0 {
		t.Fatal("the README has no policy.yaml example (a yaml block starting with cluster:)")
	}
	example := text[start+len("```yaml\n"):]
	example = example[:strings.Index(example, "```")]
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
