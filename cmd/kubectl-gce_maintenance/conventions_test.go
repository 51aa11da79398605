package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// run runs the plugin with args against no cluster.
func runPlugin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	a := &app{flags: newKubeFlags(), now: time.Now, loc: time.UTC, out: &out, errOut: &out, in: strings.NewReader("")}
	return a.run(context.Background(), args), out.String()
}

// TestKubectlConventions: the plugin reads as a kubectl command: its help
// names it `kubectl gce-maintenance`, -v is kubectl's verbosity (not the
// version), --version prints the version, and shell completion completes
// its commands.
func TestKubectlConventions(t *testing.T) {
	if code, out := runPlugin(t, "--help"); code != exitOK || !strings.Contains(out, "kubectl gce-maintenance [command]") || strings.Contains(out, "kubectl-gce_maintenance") {
		t.Errorf("--help: %d\n%s", code, out)
	}
	if code, out := runPlugin(t, "status", "--help"); code != exitOK || !strings.Contains(out, "kubectl gce-maintenance status") || !strings.Contains(out, "-v, --v Level") {
		t.Errorf("status --help: %d\n%s", code, out)
	}
	if code, out := runPlugin(t, "--version"); code != exitOK || strings.TrimSpace(out) != "maintenance-handler kubectl-gce_maintenance "+version {
		t.Errorf("--version: %d %q", code, out)
	}
	if code, out := runPlugin(t, "-v", "6", "--help"); code != exitOK || strings.Contains(out, "maintenance-handler kubectl-gce_maintenance") {
		t.Errorf("-v 6 --help: %d %q; want the help, -v being the verbosity", code, out)
	}
	code, out := runPlugin(t, "__complete", "tr")
	if code != exitOK || !strings.Contains(out, "trigger") || strings.Contains(out, "status") {
		t.Errorf("completing tr: %d %q", code, out)
	}
}
