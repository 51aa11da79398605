package manifests_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// chartCase is a value of the chart, set, and what it must change in the
// rendered objects (got and want).
type chartCase struct {
	key  string
	set  []string
	want func(o map[string]*unstructured.Unstructured) (got, want any)
}

// podAndMonitorCases check the pods' pass-throughs (affinity, security
// contexts), the autoscaler status's grant, and the monitors' values.
func podAndMonitorCases(t *testing.T) []chartCase {
	const (
		ns  = "maintenance-handler"
		ans = "maintenance-handler-agent"
	)
	pod := func(o map[string]*unstructured.Unstructured, key string) map[string]any {
		return field(t, o[key], "spec", "template", "spec").(map[string]any)
	}
	agentPod := func(o map[string]*unstructured.Unstructured) map[string]any {
		return pod(o, "DaemonSet "+ans+"/maintenance-handler-agent")
	}
	aggPod := func(o map[string]*unstructured.Unstructured) map[string]any {
		return pod(o, "Deployment "+ns+"/maintenance-handler-aggregator")
	}
	agent := func(o map[string]*unstructured.Unstructured) map[string]any {
		return agentPod(o)["containers"].([]any)[0].(map[string]any)
	}
	agg := func(o map[string]*unstructured.Unstructured) map[string]any {
		return aggPod(o)["containers"].([]any)[0].(map[string]any)
	}
	return []chartCase{
		{"agent.affinity", []string{"--set-json", `agent.affinity={"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":"z"}}]},"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":2,"preference":{}}]}}`}, func(o map[string]*unstructured.Unstructured) (any, any) {
			a := agentPod(o)["affinity"].(map[string]any)
			return []any{a["podAntiAffinity"], a["nodeAffinity"].(map[string]any)["preferredDuringSchedulingIgnoredDuringExecution"], a["nodeAffinity"].(map[string]any)["requiredDuringSchedulingIgnoredDuringExecution"] != nil},
				[]any{map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{"weight": int64(1), "podAffinityTerm": map[string]any{"topologyKey": "z"}}}}, []any{map[string]any{"weight": int64(2), "preference": map[string]any{}}}, true}
		}},
		{"agent.podSecurityContext", []string{"--set", "agent.podSecurityContext.fsGroup=2000"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return agentPod(o)["securityContext"], map[string]any{"fsGroup": int64(2000)}
		}},
		{"agent.securityContext", []string{"--set", "agent.securityContext.runAsGroup=65532", "--set", "agent.securityContext.runAsUser=1000"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			sc := agent(o)["securityContext"].(map[string]any)
			return []any{sc["runAsGroup"], sc["runAsUser"], sc["readOnlyRootFilesystem"], sc["capabilities"]}, []any{int64(65532), int64(1000), true, map[string]any{"drop": []any{"ALL"}}}
		}},
		{"aggregator.autoscalerStatus", []string{"--set", "aggregator.autoscalerStatus="}, func(o map[string]*unstructured.Unstructured) (any, any) {
			// None read: the flag empty, and no ConfigMap of kube-system granted.
			var names []any
			for _, r := range field(t, o["ClusterRole /maintenance-handler-aggregator"], "rules").([]any) {
				if slices.Contains(r.(map[string]any)["resources"].([]any), any("configmaps")) {
					names = append(names, r.(map[string]any)["resourceNames"])
				}
			}
			return []any{slices.Contains(anyStrings(agg(o)["args"]), "--autoscaler-status="), len(names)}, []any{true, 0}
		}},
		{"aggregator.affinity", []string{"--set-json", `aggregator.affinity={"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"topologyKey":"example.com/rack"}]},"podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":"z"}}]}}`}, func(o map[string]*unstructured.Unstructured) (any, any) {
			a := aggPod(o)["affinity"].(map[string]any)
			required := a["podAntiAffinity"].(map[string]any)["requiredDuringSchedulingIgnoredDuringExecution"].([]any)
			return []any{len(required), required[0].(map[string]any)["topologyKey"], required[1], a["podAffinity"] != nil, a["nodeAffinity"] != nil},
				[]any{2, "kubernetes.io/hostname", map[string]any{"topologyKey": "example.com/rack"}, true, true}
		}},
		{"aggregator.podSecurityContext", []string{"--set", "aggregator.podSecurityContext.fsGroup=2000"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return aggPod(o)["securityContext"], map[string]any{"fsGroup": int64(2000)}
		}},
		{"aggregator.securityContext", []string{"--set", "aggregator.securityContext.runAsGroup=65532"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			sc := agg(o)["securityContext"].(map[string]any)
			return []any{sc["runAsGroup"], sc["runAsUser"], sc["allowPrivilegeEscalation"]}, []any{int64(65532), int64(65532), false}
		}},
		{"monitoring.serviceMonitor.sampleLimit", []string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.sampleLimit=5000"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{field(t, o["ServiceMonitor "+ns+"/maintenance-handler"], "spec", "sampleLimit"), field(t, mustTemplate(t, "--set", "monitoring.serviceMonitor.enabled=true")["ServiceMonitor "+ns+"/maintenance-handler"], "spec", "sampleLimit")}, []any{int64(5000), int64(50000)}
		}},
		{"monitoring.podMonitor.enabled", []string{"--set", "monitoring.podMonitor.enabled=true"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			m := o["PodMonitor "+ns+"/maintenance-handler"]
			return []any{field(t, m, "spec", "namespaceSelector", "matchNames"), field(t, m, "spec", "podMetricsEndpoints"), field(t, m, "spec", "sampleLimit")},
				[]any{[]any{ns, ans}, []any{map[string]any{"port": "metrics", "interval": "30s"}}, int64(50000)}
		}},
		{"monitoring.podMonitor.interval", []string{"--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.podMonitor.interval=15s"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o["PodMonitor "+ns+"/maintenance-handler"], "spec", "podMetricsEndpoints").([]any)[0].(map[string]any)["interval"], "15s"
		}},
		{"monitoring.podMonitor.labels", []string{"--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.podMonitor.labels.release=kps"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["PodMonitor "+ns+"/maintenance-handler"].GetLabels()["release"], "kps"
		}},
		{"monitoring.podMonitor.namespace", []string{"--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.podMonitor.namespace=monitoring"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["PodMonitor monitoring/maintenance-handler"] != nil, true
		}},
		{"monitoring.podMonitor.sampleLimit", []string{"--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.podMonitor.sampleLimit=0"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			_, limited := field(t, o["PodMonitor "+ns+"/maintenance-handler"], "spec").(map[string]any)["sampleLimit"]
			return limited, false
		}},
	}
}

// TestChartPodsAndMonitors: the pods' pass-throughs add to the chart's own
// affinity and security context, the autoscaler's status is read (and
// granted) only where named, and the monitors take their values.
func TestChartPodsAndMonitors(t *testing.T) {
	for _, tc := range podAndMonitorCases(t) {
		t.Run(tc.key, func(t *testing.T) {
			got, want := tc.want(mustTemplate(t, tc.set...))
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%v (-want +got):\n%s", tc.set, d)
			}
		})
	}
}

// TestChartSchemaRejectsFlagValues: the values that set flags are typed: a
// duration, a level, a reservation's path, a region, a number; the agent's
// required node terms are its own; a scrape limit is not negative.
func TestChartSchemaRejectsFlagValues(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"--set", "agent.manualDrainTimeout=two hours"}, "/agent/manualDrainTimeout"},
		{[]string{"--set", "agent.logLevel=verbose"}, "/agent/logLevel"},
		{[]string{"--set", "agent.preemptionNotice=sometimes"}, "/agent/preemptionNotice"},
		{[]string{"--set", "aggregator.reservations={a4-training}"}, "/aggregator/reservations/0"},
		{[]string{"--set", "aggregator.regions={us-central1-a}"}, "/aggregator/regions/0"},
		{[]string{"--set", "aggregator.kubeAPIBurst=-1"}, "/aggregator/kubeAPIBurst"},
		{[]string{"--set-json", `agent.affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{}}}`}, "'requiredDuringSchedulingIgnoredDuringExecution' not allowed"},
		{[]string{"--set", "monitoring.podMonitor.sampleLimit=-5"}, "/monitoring/podMonitor/sampleLimit"},
	} {
		_, err := helmTemplate(t, tc.set...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: %v; want an error naming %q", tc.set, err, tc.want)
		}
	}
}

// TestChartValuesRemoved: a value removed with null (as --set key=null or
// a parent chart does) renders as its default: no pass-through, the
// chart's own security context, and the autoscaler's status read and
// granted.
func TestChartValuesRemoved(t *testing.T) {
	var set []string
	for _, key := range []string{"agent.affinity", "agent.podSecurityContext", "agent.securityContext", "agent.logLevel",
		"aggregator.affinity", "aggregator.podSecurityContext", "aggregator.securityContext", "aggregator.autoscalerStatus"} {
		set = append(set, "--set", key+"=null")
	}
	o := mustTemplate(t, set...)
	d := mustTemplate(t)
	for _, key := range []string{"DaemonSet maintenance-handler-agent/maintenance-handler-agent", "Deployment maintenance-handler/maintenance-handler-aggregator", "ClusterRole /maintenance-handler-aggregator"} {
		if diff := cmp.Diff(d[key].Object, o[key].Object); diff != "" {
			t.Errorf("%s with %v (-default +removed):\n%s", key, set, diff)
		}
	}
}
