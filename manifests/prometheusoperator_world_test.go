package manifests_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// prometheusOperator is the prometheus-operator release whose CRDs check
// our ServiceMonitor and PrometheusRule (fetched through the Go module
// proxy, which serves the repository's files).
const prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// TestPrometheusOperatorObjectsApply installs prometheus-operator's own
// CRDs, with their schemas, and applies the component's objects with
// server-side apply: the API server validates them against the schemas.
// A rule without an expression is refused, so the check is real. The
// chart's ServiceMonitor and PodMonitor apply too, and keep their scrape
// limits (a field the CRD's schema did not have would be pruned).
func TestPrometheusOperatorObjectsApply(t *testing.T) {
	testworld.Need(t)
	dir, err := testworld.ModuleDir(testworld.Ctx(t, 5*time.Minute), prometheusOperator)
	if err != nil {
		t.Fatal(err)
	}
	var crds []*unstructured.Unstructured
	for _, file := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_podmonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		raw, err := os.ReadFile(filepath.Join(dir, "example", "prometheus-operator-crd", file))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		crds = append(crds, &unstructured.Unstructured{Object: m})
	}
	apply(t, crds)
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := world.Client.Discovery().ServerResourcesForGroupVersion("monitoring.coreos.com/v1")
		if err != nil {
			return false, nil
		}
		served := map[string]bool{}
		for _, r := range list.APIResources {
			served[r.Kind] = true
		}
		return served["ServiceMonitor"] && served["PodMonitor"] && served["PrometheusRule"], nil
	})
	if err != nil {
		t.Fatalf("the CRDs were never served: %v", err)
	}

	var ours []*unstructured.Unstructured
	var rule *unstructured.Unstructured
	for _, o := range render(t, "overlays/prometheus-operator") {
		switch {
		case o.GetKind() == "Namespace" && o.GetName() == testworld.ShippedNamespace, o.GetKind() == "ServiceMonitor":
			ours = append(ours, o)
		case o.GetKind() == "PrometheusRule":
			ours = append(ours, o)
			rule = o.DeepCopy()
		}
	}
	if len(ours) != 3 {
		t.Fatalf("the overlay has %d of Namespace, ServiceMonitor and PrometheusRule", len(ours))
	}
	// Another test's cleanup may still be deleting the namespace.
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 2*time.Minute), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := world.Client.CoreV1().Namespaces().Get(ctx, "maintenance-handler", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("namespace maintenance-handler still terminating: %v", err)
	}
	apply(t, ours)

	chartObjs := mustTemplate(t, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.podMonitor.sampleLimit=15000")
	monitors := []*unstructured.Unstructured{chartObjs["ServiceMonitor maintenance-handler/maintenance-handler"], chartObjs["PodMonitor maintenance-handler/maintenance-handler"]}
	apply(t, monitors)
	dynMonitors, err := dynamic.NewForConfig(world.Config)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{50000, 15000} {
		resource := strings.ToLower(monitors[i].GetKind()) + "s"
		got, err := dynMonitors.Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: resource}).
			Namespace("maintenance-handler").Get(testworld.Ctx(t, 30*time.Second), "maintenance-handler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if limit, _, _ := unstructured.NestedInt64(got.Object, "spec", "sampleLimit"); limit != want {
			t.Errorf("the chart's %s, applied: sampleLimit %d, want %d", monitors[i].GetKind(), limit, want)
		}
	}

	// The same PrometheusRule with one rule's expression removed.
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	first := groups[0].(map[string]any)["rules"].([]any)[0].(map[string]any)
	delete(first, "expr")
	if err := unstructured.SetNestedSlice(rule.Object, groups, "spec", "groups"); err != nil {
		t.Fatal(err)
	}
	rule.SetName("maintenance-handler-broken")
	dyn, err := dynamic.NewForConfig(world.Config)
	if err != nil {
		t.Fatal(err)
	}
	data, err := rule.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	_, err = dyn.Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}).
		Namespace(rule.GetNamespace()).Patch(testworld.Ctx(t, 30*time.Second), rule.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "maintenance-handler-test"})
	if err == nil || !strings.Contains(err.Error(), "expr") {
		t.Errorf("a rule without expr was not refused by the CRD's schema: %v", err)
	}
}
