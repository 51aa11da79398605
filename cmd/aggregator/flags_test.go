package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
)

// TestFlagReference: docs/flags.md lists every flag of the aggregator, each once,
// with its entry in package flagdoc; UPDATE_DOCS=1 (make docs) writes it.
func TestFlagReference(t *testing.T) {
	for _, env := range []string{"POD_NAMESPACE", "POD_NAME", "NODE_NAME", "MEMORY_LIMIT", "KUBECONFIG"} {
		t.Setenv(env, "")
	}
	fs := pflag.NewFlagSet("aggregator", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	table, err := flagdoc.Reference(fs, flagdoc.Aggregator)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", flagdoc.Page)
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := flagdoc.WithSection(string(page), "aggregator", table)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE_DOCS") != "" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(page) != want {
		t.Errorf("%s is not the aggregator's flags as they are: run make docs", flagdoc.Page)
	}
}
