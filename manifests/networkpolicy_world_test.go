package manifests_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestNetworkPolicyShipped: the base, as shipped, carries the replicas'
// NetworkPolicy and the API server takes it as written: the replicas'
// pods selected, their metrics port from gmp-system's pods only, the
// eviction check's port from anywhere. (The test world's network enforces
// no policy: this proves the object, not the dataplane.)
func TestNetworkPolicyShipped(t *testing.T) {
	testworld.Need(t)
	apply(t, render(t, "base"))
	np, err := world.Client.NetworkingV1().NetworkPolicies(testworld.ShippedNamespace).Get(testworld.Ctx(t, 30*time.Second), "maintenance-handler-aggregator", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the replicas' NetworkPolicy: %v", err)
	}
	port := func(name string) []networkingv1.NetworkPolicyPort {
		tcp, p := corev1.ProtocolTCP, intstr.FromString(name)
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
	}
	want := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "maintenance-handler", "app.kubernetes.io/component": "aggregator"}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{Ports: port("metrics"), From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"gmp-system"}}}}}}},
			{Ports: port("eviction-check")},
		},
	}
	if diff := cmp.Diff(want, np.Spec); diff != "" {
		t.Errorf("the replicas' NetworkPolicy as the API server keeps it (-want +got):\n%s", diff)
	}
}
