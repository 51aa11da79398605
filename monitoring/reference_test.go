package monitoring_test

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/maintenance-handler/maintenance-handler/agent"
	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/metrics"
)

// TestReferenceIsComplete: docs/reference.md names every metric family the
// agent and the aggregator register, every Event reason and every alert.
func TestReferenceIsComplete(t *testing.T) {
	doc, err := os.ReadFile("../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	reg := prometheus.NewRegistry()
	metrics.NewAgent(reg)
	metrics.NewAggregator(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"maintenance_handler_agent_healthy"} // registered by cmd/agent
	for _, f := range families {
		names = append(names, f.GetName())
	}
	// Histograms are gathered only once observed; name them too.
	names = append(names, "maintenance_handler_agent_drain_duration_seconds", "maintenance_handler_agent_taint_latency_seconds",
		"maintenance_handler_aggregator_pass_duration_seconds")
	for _, reason := range []string{
		agent.EventMaintenanceScheduled, agent.EventMaintenanceRescheduled, agent.EventMaintenanceCancelled,
		agent.EventMaintenanceStarted, agent.EventTerminateOnHost, agent.EventPreempted, agent.EventMigrateOnHost,
		agent.EventEvictionComplete, agent.EventMaintenanceCleared, agent.EventMaintenanceAborted, agent.EventManualStarted,
		agent.EventManualAccepted, agent.EventManualRejected, agent.EventManualFailed, agent.EventUnexpectedReboot,
		agent.EventNodeUpgraded, agent.EventUnrecognizedValue, drain.EventBlocked, drain.EventEscalated,
		aggregator.EventTriggered, aggregator.EventSkipped, aggregator.EventInvalidConfig, aggregator.EventRecreated,
	} {
		names = append(names, reason)
	}
	for _, line := range strings.Split(string(mustRead(t, "rules.yaml")), "\n") {
		if alert, ok := strings.CutPrefix(strings.TrimSpace(line), "- alert: "); ok {
			names = append(names, alert)
		}
		if rec, ok := strings.CutPrefix(strings.TrimSpace(line), "- record: "); ok {
			names = append(names, rec)
		}
	}
	for _, n := range names {
		if !strings.Contains(text, "`"+n+"`") {
			t.Errorf("docs/reference.md does not describe %s", n)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
