package manifests_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNetworkPolicyRender: the replicas' NetworkPolicy admits, by default,
// the named namespaces' pods to the metrics port and anyone to the
// eviction check's; with no namespace named and no check served it admits
// no pod at all (an empty rule list), never everyone (a rule with no
// peers).
func TestNetworkPolicyRender(t *testing.T) {
	const np = "NetworkPolicy maintenance-handler/maintenance-handler-aggregator"
	metrics := func(namespaces ...any) map[string]any {
		return map[string]any{"ports": []any{map[string]any{"port": "metrics"}}, "from": []any{map[string]any{"namespaceSelector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}}}}}}
	}
	check := map[string]any{"ports": []any{map[string]any{"port": "eviction-check"}}}
	for _, tc := range []struct {
		name string
		set  []string
		want []any
	}{
		{"by default", nil, []any{metrics("gmp-system"), check}},
		{"no namespace named", []string{"--set", "networkPolicy.metricsFromNamespaces=null"}, []any{check}},
		{"no check served", []string{"--set", "aggregator.evictionCheckPort=0"}, []any{metrics("gmp-system")}},
		{"neither", []string{"--set", "networkPolicy.metricsFromNamespaces=null", "--set", "aggregator.evictionCheckPort=0"}, []any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := mustTemplate(t, tc.set...)[np]
			if o == nil {
				t.Fatal("no NetworkPolicy")
			}
			if diff := cmp.Diff(tc.want, field(t, o, "spec", "ingress")); diff != "" {
				t.Errorf("ingress (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]any{"Ingress"}, field(t, o, "spec", "policyTypes")); diff != "" {
				t.Errorf("policyTypes (-want +got):\n%s", diff)
			}
		})
	}
}
