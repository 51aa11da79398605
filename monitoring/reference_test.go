package monitoring_test

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/maintenance-handler/maintenance-handler/internal/gosrc"
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
	reasons := eventReasons(t, "agent", "aggregator", "drain")
	if len(reasons) < 20 {
		t.Fatalf("found %d Event reasons in the source: the scan is broken", len(reasons))
	}
	names = append(names, reasons...)
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

// eventReasons are the Event reasons declared in the packages' non-test
// files: the string constants named Event* (but EventSource, the
// component's name).
func eventReasons(t *testing.T, pkgs ...string) []string {
	t.Helper()
	consts, err := gosrc.StringConsts("..", pkgs...)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range consts {
		if strings.HasPrefix(c.Name, "Event") && c.Name != "EventSource" {
			out = append(out, c.Value)
		}
	}
	return out
}
