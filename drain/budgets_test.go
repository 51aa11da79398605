package drain

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/test/kubetest"
)

// TestBudgetsAllow: a refused pod may be tried again when every budget
// covering it (by selector, policy/v1's way) has observed its spec and
// allows a disruption; the version changes with any of them.
func TestBudgetsAllow(t *testing.T) {
	budget := func(name, rv string, sel *metav1.LabelSelector, allowed int32, observed int64) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv, Generation: 2},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: sel},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, ObservedGeneration: observed},
		}
	}
	app := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	all := &metav1.LabelSelector{}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: map[string]string{"app": "a"}}}
	for _, tc := range []struct {
		name        string
		budgets     []*policyv1.PodDisruptionBudget
		ok          bool
		wantVersion string
	}{
		{"allows", []*policyv1.PodDisruptionBudget{budget("b", "7", app, 1, 2)}, true, "b@7"},
		{"allows none", []*policyv1.PodDisruptionBudget{budget("b", "7", app, 0, 2)}, false, "b@7"},
		{"status older than the spec", []*policyv1.PodDisruptionBudget{budget("b", "7", app, 1, 1)}, false, "b@7"},
		{"an empty selector covers every pod", []*policyv1.PodDisruptionBudget{budget("b", "7", app, 1, 2), budget("c", "9", all, 0, 2)}, false, "b@7,c@9"},
		{"no selector covers none", []*policyv1.PodDisruptionBudget{budget("b", "7", nil, 0, 2)}, true, "none"},
		{"another app's", []*policyv1.PodDisruptionBudget{budget("b", "7", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "z"}}, 0, 2)}, true, "none"},
	} {
		objs := make([]kube.Object, len(tc.budgets))
		for i, b := range tc.budgets {
			objs[i] = b
		}
		b := &budgets{informers: map[string]*kube.Informer{"ns": kubetest.NewInformer(t, objs...).Informer}}
		if ok, v := b.allows(pod); ok != tc.ok || v != tc.wantVersion {
			t.Errorf("%s: allows %t %q, want %t %q", tc.name, ok, v, tc.ok, tc.wantVersion)
		}
	}
	var none *budgets
	if ok, _ := none.allows(pod); ok || none.Changed() != nil {
		t.Error("no follower allowed a retry")
	}
	unread := &budgets{informers: map[string]*kube.Informer{}}
	if ok, _ := unread.allows(pod); ok {
		t.Error("a namespace not read yet allowed a retry")
	}
}
