package monitoring_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/prometheus/client_golang/prometheus"
)

// promtool is Debian's promtool, from MH_PROMETHEUS_DIR (make test sets it)
// or installed by the project's script.
func promtool(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MH_PROMETHEUS_DIR")
	if dir == "" {
		out, err := exec.Command("bash", "../scripts/install-prometheus.sh").Output()
		if err != nil {
			t.Fatalf("install Prometheus from Debian's package (scripts/install-prometheus.sh): %v", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	return filepath.Join(dir, "usr", "bin", "promtool")
}

func run(t *testing.T, stdin []byte, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRulesPassPromtool(t *testing.T) {
	tool := promtool(t)
	out := run(t, nil, tool, "check", "rules", "rules.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	// The Kubernetes objects' groups, as rules files.
	for _, obj := range ruleObjects {
		var o struct {
			Spec map[string]any `json:"spec"`
		}
		if err := yaml.Unmarshal(mustRead(t, obj.path), &o); err != nil {
			t.Fatal(err)
		}
		spec, err := yaml.Marshal(o.Spec)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), obj.kind+"-spec.yaml")
		if err := os.WriteFile(path, spec, 0o644); err != nil {
			t.Fatal(err)
		}
		if out := run(t, nil, tool, "check", "rules", path); !strings.Contains(out, "SUCCESS") {
			t.Errorf("promtool check rules on the %s:\n%s", obj.kind, out)
		}
	}
}

// ruleObjects are rules.yaml's groups as Kubernetes objects.
var ruleObjects = []struct{ path, kind string }{
	{"../manifests/components/prometheus-operator/prometheusrule.yaml", "PrometheusRule"},
	{"../manifests/components/gke-managed-prometheus/rules.yaml", "Rules"},
}

// TestRecordingRulesCountOnce runs promtool's rule unit tests
// (rules_test.yaml): restarts, reboot gaps, and vanished nodes seen by two
// replicas are each counted once.
func TestRecordingRulesCountOnce(t *testing.T) {
	out := run(t, nil, promtool(t), "test", "rules", "rules_test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
}

// TestMetricsPassPromtool: what the agent and the aggregator export follows
// Prometheus's conventions (promtool check metrics), with values in it.
func TestMetricsPassPromtool(t *testing.T) {
	reg := metrics.NewRegistry()
	node := prometheus.WrapRegistererWith(prometheus.Labels{"node_name": "gpu-0", "node_pool_name": "a3"}, reg)
	a := metrics.NewAgent(node)
	c := metrics.NewClient(node, "agent")
	c.Requests.WithLabelValues("GET", "200").Inc()
	c.RequestDuration.WithLabelValues("GET").Observe(0.01)
	c.WatchHealth("pods", true)
	a.AddInterruptions(protocol.HostMaintenance, 1)
	a.Eviction("evicted")
	a.DrainDuration(90 * time.Second)
	a.TaintLatency(5 * time.Millisecond)
	a.MetadataRequest("instance/maintenance-event", "ok")
	a.ManualTrigger("accepted")
	a.SetNode(time.Now().Add(time.Hour), time.Now().Add(24*time.Hour), true)
	g := metrics.NewAggregator(reg)
	g.Leader.Set(1)
	g.Decisions.WithLabelValues("triggered", "triggered").Inc()
	g.Pools.Set([]metrics.PoolStats{{Pool: "a3", Pending: 3, Configured: true, ConfigValid: true, NextMaintenance: time.Now()}})
	g.PassDuration(20 * time.Millisecond)
	g.Triggers.WithLabelValues("ok").Inc()
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(testworld.Exposition(t, reg))
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestEveryAlertHasARunbook: each alert links, in its runbook_url
// annotation, to its own section of docs/runbooks.md.
func TestEveryAlertHasARunbook(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(mustRead(t, "rules.yaml"), &rules); err != nil {
		t.Fatal(err)
	}
	book := string(mustRead(t, "../docs/runbooks.md"))
	const base = "https://github.com/maintenance-handler/maintenance-handler/blob/main/docs/runbooks.md#"
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if want := base + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !strings.Contains(book, "\n## "+r.Alert+"\n") {
				t.Errorf("docs/runbooks.md has no section ## %s", r.Alert)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alert read from rules.yaml")
	}
}
