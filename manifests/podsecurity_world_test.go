package manifests_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestPodSecurity: the aggregator's pod meets pod security's
// "restricted" profile; the agent's meets it but for its host network
// (which "baseline" forbids too), which is why it runs in a namespace of
// its own that enforces "privileged", and the aggregator's enforces
// "restricted".
func TestPodSecurity(t *testing.T) {
	testworld.Need(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "restricted-", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	ns, err := world.Client.CoreV1().Namespaces().Create(testworld.Ctx(t, 10*time.Second), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	// The pods run at the critical priority classes, which the API server,
	// as GKE's, admits only where a quota names them (as the base's does
	// in its own namespaces).
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "critical-pods", Namespace: ns.Name}, Spec: corev1.ResourceQuotaSpec{
		Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")},
		ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
			ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: testworld.CriticalPriorityClasses}}},
	}}
	if _, err := world.Client.CoreV1().ResourceQuotas(ns.Name).Create(testworld.Ctx(t, 10*time.Second), quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	admit := func(kind, name string) error {
		t.Helper()
		for _, o := range render(t, "base") {
			if o.GetKind() != kind || o.GetName() != name {
				continue
			}
			var tmpl corev1.PodTemplateSpec
			raw, _, _ := unstructured.NestedMap(o.Object, "spec", "template")
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl); err != nil {
				t.Fatal(err)
			}
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tmpl.Spec.ServiceAccountName, Namespace: ns.Name}}
			if _, err := world.Client.CoreV1().ServiceAccounts(ns.Name).Create(testworld.Ctx(t, 10*time.Second), sa, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name}, Spec: tmpl.Spec}
			_, err := world.Client.CoreV1().Pods(ns.Name).Create(testworld.Ctx(t, 10*time.Second), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
		t.Fatalf("the base has no %s %s", kind, name)
		return nil
	}
	if err := admit("Deployment", "maintenance-handler-aggregator"); err != nil {
		t.Errorf("the aggregator's pod under restricted: %v", err)
	}
	err = admit("DaemonSet", "maintenance-handler-agent")
	if err == nil || !strings.Contains(err.Error(), "host namespaces") {
		t.Errorf("the agent's pod under restricted: %v, want refused for its host network", err)
	} else if msg := err.Error(); strings.Contains(msg, "seccompProfile") || strings.Contains(msg, "allowPrivilegeEscalation") || strings.Contains(msg, "runAsNonRoot") || strings.Contains(msg, "capabilities") {
		t.Errorf("the agent's pod under restricted: %v, want refused for its host network alone", err)
	}
}
