package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
)

// TestFlagReference: docs/flags.md lists the plugin's flags, each
// command's own and those every command takes, as their help says;
// UPDATE_DOCS=1 (make docs) writes it.
func TestFlagReference(t *testing.T) {
	a := &app{flags: newKubeFlags()}
	root := a.command()
	var b strings.Builder
	b.WriteString("Every command takes kubectl's flags (`--kubeconfig`, `--context`, `--namespace`, `--as`, ...), `-v`, and:\n\n")
	b.WriteString(flagdoc.HelpTable(root.LocalNonPersistentFlags(), "help"))
	for _, c := range root.Commands() {
		for _, sub := range append(c.Commands(), c) {
			if !sub.Runnable() || sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" || sub.Parent().Name() == "completion" {
				continue
			}
			b.WriteString("\n`" + sub.CommandPath() + "`:\n\n")
			b.WriteString(flagdoc.HelpTable(sub.LocalNonPersistentFlags(), "help"))
		}
	}
	path := filepath.Join("..", "..", flagdoc.Page)
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := flagdoc.WithSection(string(page), "kubectl-maintenance", b.String())
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
		t.Errorf("%s is not the plugin's flags as they are: run make docs", flagdoc.Page)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "| `") && len(line) > 400 {
			t.Errorf("a help of more than a line: %s", line)
		}
	}
}
