package main

import (
	"os"
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
	if err := flagdoc.CheckSection("../..", "kubectl-gce_maintenance", b.String(), os.Getenv("UPDATE_DOCS") != ""); err != nil {
		t.Error(err)
	}
}
