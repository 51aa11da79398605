package manifests_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartExamples: each example values file of the chart renders with
// helm template (its schema checks the file) and gives the binaries what
// its comments say; an example without its check here fails, so that a
// new one comes with one.
func TestChartExamples(t *testing.T) {
	const (
		ds  = "DaemonSet maintenance-handler-agent/maintenance-handler-agent"
		dep = "Deployment maintenance-handler/maintenance-handler-aggregator"
	)
	has := func(o map[string]*unstructured.Unstructured, kind, arg string) bool {
		return slices.Contains(containerArgs(t, o[kind]), arg)
	}
	checks := map[string]func(o map[string]*unstructured.Unstructured) (got, want any){
		"gke-reservation-groups.yaml": func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{has(o, ds, "--reservation-groups=subblock"), has(o, dep, "--reservation-groups=subblock"),
					has(o, dep, "--reservations=projects/my-project/zones/us-central1-b/reservations/a4-training"),
					o["PodMonitoring maintenance-handler/maintenance-handler"] != nil, o["ConfigMap maintenance-handler/maintenance-handler"] != nil},
				[]any{true, true, true, true, true}
		},
		"self-managed.yaml": func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{has(o, ds, "--pool-label=example.com/node-pool"), has(o, dep, "--slice-label=example.com/tpu-slice"),
					has(o, dep, "--project=my-project"), has(o, dep, "--regions=us-central1"), has(o, dep, "--autoscaler-status="),
					has(o, ds, "--preemption-notice=auto"), o["PodMonitor maintenance-handler/maintenance-handler"] != nil},
				[]any{true, true, true, true, true, true, true}
		},
		"observe-only.yaml": func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{has(o, ds, "--observe-only"), has(o, dep, "--observe-only"), has(o, ds, "--log-level=debug"), has(o, dep, "--notify-format=slack")},
				[]any{true, true, true, true}
		},
	}
	files, err := filepath.Glob(chart + "/examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	var checked []string
	for name := range checks {
		checked = append(checked, name)
	}
	slices.Sort(checked)
	if d := cmp.Diff(names, checked); d != "" {
		t.Errorf("the chart's examples (-) and those this test checks (+) differ:\n%s", d)
	}
	for _, f := range files {
		check := checks[filepath.Base(f)]
		if check == nil {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			got, want := check(mustTemplate(t, "-f", f))
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("helm template -f %s (-want +got):\n%s", f, d)
			}
		})
	}
}
