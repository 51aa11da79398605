package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func TestAgentMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewAgent(reg)
	m.AddInterruptions(protocol.HostMaintenance, 1)
	m.Eviction("evicted")
	m.Eviction("deleted")
	m.Escalation()
	m.MetadataRequest("instance/preempted", "ok")
	m.SetPhase("Draining")
	if got := testutil.ToFloat64(m.Escalations); got != 1 {
		t.Errorf("escalations = %v, want 1 (one deleted outcome)", got)
	}
	want := `
# HELP maintenance_handler_agent_phase 1 for the node's current maintenance phase (Idle, Draining, Terminating), 0 for the others.
# TYPE maintenance_handler_agent_phase gauge
maintenance_handler_agent_phase{phase="Draining"} 1
maintenance_handler_agent_phase{phase="Idle"} 0
maintenance_handler_agent_phase{phase="Terminating"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "maintenance_handler_agent_phase"); err != nil {
		t.Error(err)
	}
	// Names follow the conventions promtool checks.
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
