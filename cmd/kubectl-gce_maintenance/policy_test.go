package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyValidate: `policy validate` reads a policy.yaml or a
// ConfigMap's manifest holding one, as the aggregator reads it: a valid
// one is named with its pools (exit 0); every problem of an invalid one is
// named with its field, a pool's own included (exit 1); no file or two
// sources is bad usage (exit 2). It needs no cluster.
func TestPolicyValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `cluster:
  maintenanceWindow: {startTime: "2026-11-21T00:00:00Z", duration: 48h, recurrence: "FREQ=WEEKLY;BYDAY=SA"}
pools:
  a3: {opportunistic: "node-idle-time=600s,min-nodes=3,window=2419200s", maxVoluntaryMaintenance: 2}
  tpu: {maxVoluntaryMaintenance: "10%"}
`)
	configMap := write("cm.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: maintenance-handler, namespace: maintenance-handler}
data:
  policy.yaml: |
    pools:
      a3: {opportunistic: "min-nodes=3", maxVoluntaryMaintenence: 2}
`)
	bad := write("bad.yaml", `cluster:
  maintenanceWindow: {startTime: "tomorrow", duration: 4h, recurrence: "FREQ=WEEKLY;BYDAY=XX"}
`)
	badPool := write("badpool.yaml", `pools:
  a3: {opportunistic: "min-nodes=3"}
  b: {maxVoluntaryMaintenance: 1}
`)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says []string
	}{
		{"valid", []string{"-f", good}, exitOK, []string{"is valid", "2 pools (a3, tpu)"}},
		{"a ConfigMap's manifest with a misspelt key", []string{"-f", configMap}, exitError, []string{"(ConfigMap maintenance-handler) is not valid", "maxVoluntaryMaintenence"}},
		{"every problem at once", []string{"-f", bad}, exitError, []string{`startTime "tomorrow"`, "BYDAY"}},
		{"a pool's own problem", []string{"-f", badPool}, exitError, []string{"pool a3: ", "node-idle-time is required"}},
		{"no source", nil, exitUsage, []string{"give -f FILE or --config-map"}},
		{"two sources", []string{"-f", good, "--config-map", "a/b"}, exitUsage, []string{"give -f FILE or --config-map"}},
	} {
		code, out := runPlugin(t, append([]string{"policy", "validate"}, tc.args...)...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d:\n%s", tc.name, code, tc.code, out)
		}
		for _, s := range tc.says {
			if !strings.Contains(out, s) {
				t.Errorf("%s: the output does not say %q:\n%s", tc.name, s, out)
			}
		}
	}
}
