package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/monitoring"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(vms.RunMain(m, &world)) }

// prom is a real Prometheus (Debian's) scraping the agents on loopback with
// the shipped rules.
type prom struct{ addr string }

// query evaluates q through the HTTP API and returns value by the given
// labels joined with "|".
func (p prom) query(t *testing.T, q string, by ...string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("query %s: %v %s", q, err, body.Error)
	}
	out := map[string]float64{}
	for _, r := range body.Data.Result {
		var key []string
		for _, l := range by {
			key = append(key, r.Metric[l])
		}
		v, _ := strconv.ParseFloat(r.Value[1].(string), 64)
		out[strings.Join(key, "|")] = v
	}
	return out
}

// evaluations is how many times Prometheus has evaluated each of its rule
// groups (the least of them), read from its own counter, which it scrapes;
// false before its first scrape of itself.
func (p prom) evaluations(t *testing.T) (float64, bool) {
	t.Helper()
	v, ok := p.query(t, `min(prometheus_rule_group_iterations_total)`)[""]
	return v, ok
}

// waitEvaluations waits until Prometheus has evaluated its rules n more
// times: the work after which a rule's effect (or its absence) shows.
func (p prom) waitEvaluations(t *testing.T, n float64) {
	t.Helper()
	target := -1.0
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		v, ok := p.evaluations(t)
		switch {
		case !ok:
			return false, nil
		case target < 0:
			target = v + n
		}
		return v >= target, nil
	})
	if err != nil {
		t.Fatalf("Prometheus did not evaluate its rules %v more times", n)
	}
}

// startPrometheus runs Prometheus with the shipped rules, their evaluation
// interval scaled from 1m to 5s (the offset that matches it too), scraping
// targets every second.
func startPrometheus(t *testing.T, targets []string) prom {
	t.Helper()
	dir := t.TempDir()
	rules := strings.NewReplacer("interval: 1m", "interval: 5s", "offset 1m", "offset 5s").Replace(string(monitoring.RulesFile))
	if rules == string(monitoring.RulesFile) {
		t.Fatal("rules.yaml no longer has the 1m interval this test scales")
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	addr := testworld.FreeAddrT(t)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 5s
rule_files: [%q]
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: [%q]
`, filepath.Join(dir, "rules.yaml"), addr)
	if len(targets) > 0 {
		cfg += fmt.Sprintf(`  - job_name: maintenance-handler
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(promtool(t)), "prometheus")
	p, err := world.StartProcess("prometheus", bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	pr := prom{addr: addr}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("Prometheus never ready; log %s", p.LogPath())
	}
	return pr
}

// TestGKEQueriesOnARealPrometheus: agents in the test world, scraped by
// Prometheus with the shipped rules; one host maintenance, one preemption,
// one unannounced reboot and one upgrade; GKE's three queries, unchanged
// but for Grafana's ${__interval}, count them by type, reason and pool.
func TestGKEQueriesOnARealPrometheus(t *testing.T) {
	testworld.Need(t)
	f := vms.ForTest(t, world)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var targets []string
	names := []string{"prom-maint", "prom-spot", "prom-crash", "prom-upgrade"}
	for _, name := range names {
		v, err := f.Add(ctx, testworld.NodeSpec{Name: name, Pool: "a3-pool", Spot: name == "prom-spot"}, gceemu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		targets = append(targets, v.MetricsAddr)
	}
	aggAddr := testworld.FreeAddrT(t)
	agg, err := world.StartProcess("aggregator-prometheus", filepath.Join(filepath.Dir(f.AgentBin), "aggregator"), "--kubeconfig", world.AggregatorKubeconfigT(t, "default"),
		"--namespace", "default", "--identity", "aggregator-0", "--config-map", "", "--listen-address", aggAddr, "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agg.Kill() })
	targets = append(targets, aggAddr)
	p := startPrometheus(t, targets)
	// Every agent scraped, with its zero-initialised series, and the
	// leading aggregator's pool series (the pool's count is the
	// aggregator's), before anything happens.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		up := p.query(t, `count(maintenance_handler_agent_interruptions_total{interruption_reason="HostError"} == 0)`)
		pool := p.query(t, `count(maintenance_handler_aggregator_pool_interruptions_total{node_pool_name="a3-pool", interruption_reason="HostError"} == 0)`)
		return up[""] == float64(len(names)) && pool[""] == 1, nil
	})
	if err != nil {
		t.Fatal("Prometheus never saw every agent and the aggregator's pool series")
	}
	// A rule evaluation over the baseline: two more than Prometheus last
	// reported of itself (a scrape ago), so one began after every agent was
	// scraped.
	p.waitEvaluations(t, 2)

	waitActive := func(v *vms.VM) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := world.Client.CoreV1().Nodes().Get(ctx, v.Name, metav1.GetOptions{})
			return err == nil && n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating, nil
		})
		if err != nil {
			t.Fatalf("%s never terminating", v.Name)
		}
	}
	maint, spot, crash, upgrade := f.VMs[0], f.VMs[1], f.VMs[2], f.VMs[3]
	maint.Emu.SetMaintenanceEvent(gceemu.EventTerminate)
	spot.Emu.SetPreempted(true)
	waitActive(maint)
	waitActive(spot)
	for _, v := range []*vms.VM{maint, spot, crash} {
		if err := f.Reboot(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.RebootInto(ctx, upgrade, "v1.37.0"); err != nil {
		t.Fatal(err)
	}
	for _, v := range f.VMs {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := world.Client.CoreV1().Nodes().Get(ctx, v.Name, metav1.GetOptions{})
			return err == nil && n.Annotations[protocol.AnnotationInterruptions] != "" && inService(n), nil
		})
		if err != nil {
			t.Fatalf("%s: interruption never recorded", v.Name)
		}
	}

	// GKE's queries; ${__interval} is what Grafana puts there: here, the
	// whole test.
	const interval = "10m"
	q1 := `sum by (interruption_type,interruption_reason)(sum_over_time(kubernetes_io:node_interruption_count{monitored_resource="k8s_node"}[` + interval + `]))`
	q2 := `sum by (interruption_type,interruption_reason)(sum_over_time(kubernetes_io:node_interruption_count{monitored_resource="k8s_node", interruption_reason="HW/SW Maintenance"}[` + interval + `]))`
	q3 := `sum by (interruption_type,interruption_reason)(sum_over_time(kubernetes_io:node_pool_interruption_count{monitored_resource="k8s_node_pool", interruption_reason="HW/SW Maintenance", node_pool_name="a3-pool"}[` + interval + `]))`
	want1 := map[string]float64{
		"MaintenanceEvent|HW/SW Maintenance": 1, "PreemptionEvent|Eviction": 1,
		"TerminationEvent|HostError": 1, "MaintenanceEvent|NodeUpgrade": 1,
	}
	want2 := map[string]float64{"MaintenanceEvent|HW/SW Maintenance": 1}
	var got1, got2, got3 map[string]float64
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		got1 = p.query(t, q1, "interruption_type", "interruption_reason")
		got2 = p.query(t, q2, "interruption_type", "interruption_reason")
		got3 = p.query(t, q3, "interruption_type", "interruption_reason")
		return equal(got1, want1) && equal(got2, want2) && equal(got3, want2), nil
	})
	if err != nil {
		t.Errorf("GKE's queries:\n %s\n  = %v, want %v\n %s\n  = %v, want %v\n %s\n  = %v, want %v", q1, got1, want1, q2, got2, want2, q3, got3, want2)
	}
	// The aggregator is scraped too, and leads.
	if got := p.query(t, `sum(maintenance_handler_aggregator_leader)`); got[""] != 1 {
		t.Errorf("sum(maintenance_handler_aggregator_leader) = %v, want 1", got)
	}
	if got := p.query(t, `maintenance_handler_aggregator_pool_nodes_in_maintenance{node_pool_name="a3-pool"}`); len(got) != 1 {
		t.Errorf("no pool gauge for a3-pool from the aggregator: %v", got)
	}
	// Nothing is counted twice as time goes on: two more evaluations.
	p.waitEvaluations(t, 2)
	if got := p.query(t, q1, "interruption_type", "interruption_reason"); !equal(got, want1) {
		t.Errorf("later, %s = %v, want still %v", q1, got, want1)
	}
}

func equal(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

func inService(n *corev1.Node) bool {
	_, active := n.Labels[protocol.LabelActiveMaintenance]
	return !active && !protocol.HasTaint(n)
}

// TestDashboardQueriesParse: every query of the shipped dashboard, with
// Grafana's variables as Grafana fills them, is accepted by Prometheus's
// query API; and the dashboard has the panels it promises.
func TestDashboardQueriesParse(t *testing.T) {
	testworld.Need(t)
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(monitoring.Dashboard, &dash); err != nil {
		t.Fatal(err)
	}
	p := startPrometheus(t, nil)
	fill := strings.NewReplacer("${__interval}", "1m", "$__interval", "1m", "$__rate_interval", "5m", "$__range", "7d", "$node_pool", ".*")
	var titles []string
	for _, panel := range dash.Panels {
		titles = append(titles, panel.Title)
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, target := range panel.Targets {
			q := fill.Replace(target.Expr)
			if strings.Contains(q, "$") {
				t.Errorf("panel %q: a variable the test does not know in %s", panel.Title, target.Expr)
				continue
			}
			if err := p.check(q); err != nil {
				t.Errorf("panel %q: %s: %v", panel.Title, target.Expr, err)
			}
		}
	}
	for _, want := range []string{"Upcoming maintenance per pool", "Nodes by phase", "Interruptions by type and reason", "Drain duration", "escalated"} {
		found := false
		for _, title := range titles {
			found = found || strings.Contains(title, want)
		}
		if !found {
			t.Errorf("no panel about %q in %v", want, titles)
		}
	}
}

// check asks Prometheus to evaluate q and returns its error, if any.
func (p prom) check(q string) error {
	resp, err := http.Get("http://" + p.addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s", body.Error)
	}
	return nil
}
