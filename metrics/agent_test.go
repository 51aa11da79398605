package metrics

import (
	"strings"
	"testing"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func TestAgentMetrics(t *testing.T) {
	reg := NewRegistry()
	m := NewAgent(reg)
	m.AddInterruptions(protocol.HostMaintenance, 1)
	m.Eviction("evicted")
	m.Eviction("deleted")
	m.Escalation()
	m.MetadataRequest("instance/preempted", "ok")
	m.SetPhase("Draining")
	if got := m.Escalations.Value(); got != 1 {
		t.Errorf("escalations = %v, want 1 (one deleted outcome)", got)
	}
	want := `# HELP maintenance_handler_agent_phase 1 for the node's current maintenance phase (Idle, Draining, Terminating), 0 for the others.
# TYPE maintenance_handler_agent_phase gauge
maintenance_handler_agent_phase{phase="Draining"} 1
maintenance_handler_agent_phase{phase="Idle"} 0
maintenance_handler_agent_phase{phase="Terminating"} 0
`
	if got := exported(t, reg, "maintenance_handler_agent_phase"); got != want {
		t.Errorf("phase exported as\n%s\nwant\n%s", got, want)
	}
}

// exported is what reg writes for the family name: its HELP and TYPE lines
// and its samples.
func exported(t *testing.T, reg *Registry, name string) string {
	t.Helper()
	var b strings.Builder
	if err := reg.Write(&b); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for line := range strings.Lines(b.String()) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "#" && f[2] == name,
			len(f) > 0 && (f[0] == name || strings.HasPrefix(f[0], name+"{") || strings.HasPrefix(f[0], name+"_")):
			out.WriteString(line)
		}
	}
	return out.String()
}
