package monitoring_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// TestReferenceIsComplete: docs/reference.md names every metric family the
// agent and the aggregator register, every Event reason and every alert.
func TestReferenceIsComplete(t *testing.T) {
	doc, err := os.ReadFile("../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	reg := &namesOf{}
	metrics.NewAgent(reg)
	metrics.NewClient(reg, "agent")
	metrics.NewAggregator(reg)
	metrics.NewEvictionCheck(reg)
	metrics.NewNoticeEndpoint(reg)
	reg.MustRegister(metrics.NewConnectionsRefused("agent"), metrics.NewConnectionsRefused("aggregator"))
	metrics.NewClient(reg, "aggregator")
	names := append([]string{"maintenance_handler_agent_healthy"}, reg.names...) // the first registered by cmd/agent
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

// namesOf is a registerer that keeps the names of the families registered.
type namesOf struct{ names []string }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *namesOf) Register(c prometheus.Collector) error {
	descs := make(chan *prometheus.Desc)
	go func() { c.Describe(descs); close(descs) }()
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names = append(r.names, m[1])
		}
	}
	return nil
}

func (r *namesOf) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *namesOf) Unregister(prometheus.Collector) bool { return false }

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReferenceListsEventReasons: docs/reference.md lists every Event
// reason of protocol.EventReasons in the table of each component that
// records it, with its type.
func TestReferenceListsEventReasons(t *testing.T) {
	doc, err := os.ReadFile("../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	agentAt := strings.Index(text, "Agent (source `"+protocol.EventSourceAgent+"`)")
	aggregatorAt := strings.Index(text, "Aggregator (source `"+protocol.EventSourceAggregator+"`)")
	end := strings.Index(text, "\n## Alerts")
	if agentAt < 0 || aggregatorAt < agentAt || end < aggregatorAt {
		t.Fatal("docs/reference.md has no agent's and aggregator's Event tables, in that order, before ## Alerts")
	}
	tables := map[string]string{
		protocol.EventSourceAgent:      text[agentAt:aggregatorAt],
		protocol.EventSourceAggregator: text[aggregatorAt:end],
	}
	for _, r := range protocol.EventReasons {
		typ := "Normal"
		if r.Warning {
			typ = "Warning"
		}
		for _, src := range r.Sources {
			if row := "| `" + r.Reason + "` | " + typ + " |"; !strings.Contains(tables[src], row) {
				t.Errorf("docs/reference.md's table of %s has no row %q", src, row)
			}
		}
	}
}
