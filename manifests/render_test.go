package manifests_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestOverlaysRender: every overlay builds as `kubectl apply -k` builds it;
// the monitoring components add exactly their objects, in the project's
// namespace; the example overlay's image and affinity patch take effect.
func TestOverlaysRender(t *testing.T) {
	const ns, ans = "maintenance-handler", "maintenance-handler-agent"
	base := kinds(render(t, "base"))
	for name, o := range base {
		want := ns
		if o.GetLabels()["app.kubernetes.io/component"] == "agent" {
			want = ans
		}
		if o.GetKind() != "Namespace" && !strings.HasPrefix(o.GetKind(), "Cluster") && !strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") && o.GetKind() != "ValidatingWebhookConfiguration" && o.GetNamespace() != want {
			t.Errorf("%s is not in namespace %s", name, want)
		}
	}
	for _, tc := range []struct {
		dir  string
		adds []string
	}{
		{"overlays/prometheus-operator", []string{"ServiceMonitor " + ns + "/maintenance-handler", "PrometheusRule " + ns + "/maintenance-handler"}},
		{"overlays/gke-managed-prometheus", []string{"PodMonitoring " + ns + "/maintenance-handler", "PodMonitoring " + ans + "/maintenance-handler", "Rules " + ns + "/maintenance-handler"}},
		{"overlays/example", []string{"PodMonitoring " + ns + "/maintenance-handler", "PodMonitoring " + ans + "/maintenance-handler", "Rules " + ns + "/maintenance-handler"}},
	} {
		got := kinds(render(t, tc.dir))
		for name := range base {
			if got[name] == nil {
				t.Errorf("%s lacks %s of the base", tc.dir, name)
			}
		}
		for _, name := range tc.adds {
			if got[name] == nil {
				t.Errorf("%s lacks %s", tc.dir, name)
			}
		}
		if len(got) != len(base)+len(tc.adds) {
			t.Errorf("%s has %d objects, want the base's %d and %d more", tc.dir, len(got), len(base), len(tc.adds))
		}
	}

	example := kinds(render(t, "overlays/example"))
	const image = "us-docker.pkg.dev/my-project/my-repo/maintenance-handler:v0.1.0"
	for _, name := range []string{"DaemonSet " + ans + "/maintenance-handler-agent", "Deployment " + ns + "/maintenance-handler-aggregator"} {
		containers, _, _ := unstructured.NestedSlice(example[name].Object, "spec", "template", "spec", "containers")
		if len(containers) != 1 || containers[0].(map[string]any)["image"] != image {
			t.Errorf("%s: containers %v, want one with image %s", name, containers, image)
		}
	}
	terms, _, _ := unstructured.NestedSlice(example["DaemonSet "+ans+"/maintenance-handler-agent"].Object,
		"spec", "template", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
	var keys []string
	for _, term := range terms {
		for _, e := range term.(map[string]any)["matchExpressions"].([]any) {
			keys = append(keys, e.(map[string]any)["key"].(string))
		}
	}
	if want := []string{"cloud.google.com/gke-accelerator", "cloud.google.com/gke-tpu-accelerator", "maintenance-handler.io/terminates-on-host-maintenance", "example.com/accelerator"}; strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("the example's agent affinity terms select %v, want %v", keys, want)
	}
}

// TestMonitorsFindTheMetricsPorts: a PodMonitoring in each workload's
// namespace selects its pods and names a port it exposes; the
// ServiceMonitor looks in both namespaces and selects both metrics
// Services by a port they have, and each Service selects its pods and
// targets their metrics port.
func TestMonitorsFindTheMetricsPorts(t *testing.T) {
	const ns = "maintenance-handler"
	objs := kinds(append(render(t, "overlays/prometheus-operator"), render(t, "overlays/gke-managed-prometheus")...))
	type workload struct {
		namespace string
		labels    map[string]string
		ports     map[string]bool
	}
	var workloads []workload
	for _, name := range []string{"DaemonSet maintenance-handler-agent/maintenance-handler-agent", "Deployment " + ns + "/maintenance-handler-aggregator"} {
		labels, _, _ := unstructured.NestedStringMap(objs[name].Object, "spec", "template", "metadata", "labels")
		containers, _, _ := unstructured.NestedSlice(objs[name].Object, "spec", "template", "spec", "containers")
		w := workload{namespace: objs[name].GetNamespace(), labels: labels, ports: map[string]bool{}}
		for _, c := range containers {
			ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
			for _, p := range ports {
				w.ports[p.(map[string]any)["name"].(string)] = true
			}
		}
		workloads = append(workloads, w)
	}
	endpointPorts := func(o *unstructured.Unstructured) []string {
		eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
		var out []string
		for _, e := range eps {
			out = append(out, e.(map[string]any)["port"].(string))
		}
		return out
	}

	for _, w := range workloads {
		pm := objs["PodMonitoring "+w.namespace+"/maintenance-handler"]
		if pm == nil {
			t.Errorf("no PodMonitoring in namespace %s, where workload %v runs", w.namespace, w.labels)
			continue
		}
		sel, _, _ := unstructured.NestedMap(pm.Object, "spec", "selector", "matchLabels")
		if !matches(sel, w.labels) {
			t.Errorf("the PodMonitoring of %s does not select its workload (labels %v)", w.namespace, w.labels)
		}
		for _, port := range endpointPorts(pm) {
			if !w.ports[port] {
				t.Errorf("the PodMonitoring of %s scrapes port %q, which its workload lacks", w.namespace, port)
			}
		}
	}

	sm := objs["ServiceMonitor "+ns+"/maintenance-handler"]
	raw, _, _ := unstructured.NestedMap(sm.Object, "spec", "selector")
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err != nil {
		t.Fatal(err)
	}
	smSel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil || smSel.Empty() {
		t.Fatalf("the ServiceMonitor's selector %v: %v", raw, err)
	}
	smNamespaces, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	if len(smNamespaces) == 0 {
		smNamespaces = []string{sm.GetNamespace()}
	}
	selected := 0
	for _, o := range objs {
		if o.GetKind() != "Service" || !smSel.Matches(labels.Set(o.GetLabels())) || !slices.Contains(smNamespaces, o.GetNamespace()) {
			continue
		}
		selected++
		ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
		names := map[string]string{}
		for _, p := range ports {
			names[p.(map[string]any)["name"].(string)] = p.(map[string]any)["targetPort"].(string)
		}
		for _, port := range endpointPorts(sm) {
			if names[port] == "" {
				t.Errorf("the ServiceMonitor scrapes port %q, which Service %s lacks", port, o.GetName())
			}
		}
		svcSel, _, _ := unstructured.NestedMap(o.Object, "spec", "selector")
		found := false
		for _, w := range workloads {
			if matches(svcSel, w.labels) && w.ports[names["metrics"]] {
				found = true
			}
		}
		if !found {
			t.Errorf("Service %s selects no workload exposing its target port %q", o.GetName(), names["metrics"])
		}
	}
	if selected != 2 {
		t.Errorf("the ServiceMonitor selects %d Services, want the agent's and the aggregator's", selected)
	}
}

// TestAdmissionPolicyKnowsTheDisruptionReasons: the agent's admission
// policy lets it set DisruptionTarget with exactly the reasons its drain
// uses.
func TestAdmissionPolicyKnowsTheDisruptionReasons(t *testing.T) {
	got := policyVariable(t, "maintenance-handler-agent-own-pods", "disruptionReasons")
	quoted := make([]string, 0, len(protocol.DisruptionReasons))
	for _, r := range protocol.DisruptionReasons {
		quoted = append(quoted, "'"+r+"'")
	}
	if want := "[" + strings.Join(quoted, ", ") + "]"; got != want {
		t.Errorf("the policy's disruptionReasons are %s, want %s", got, want)
	}
}

// TestAdmissionPolicyLetsTheAgentWriteItsLabels: the labels the agent's
// admission policy lets it change are those the protocol has it write or
// consume, no more and no fewer: a label the agent writes that the policy
// does not name is refused in every cluster that installs the policy.
func TestAdmissionPolicyLetsTheAgentWriteItsLabels(t *testing.T) {
	got := policyVariable(t, "maintenance-handler-agent-own-node", "ownedLabels")
	var quoted []string
	for _, k := range protocol.Keys {
		if k.Kind == protocol.Label && (k.Writer == protocol.Agent || k.Consumer == protocol.Agent) {
			quoted = append(quoted, "'"+k.Name+"'")
		}
	}
	sort.Strings(quoted)
	names := strings.Split(strings.Trim(got, "[]"), ", ")
	sort.Strings(names)
	if strings.Join(names, ",") != strings.Join(quoted, ",") {
		t.Errorf("the policy's ownedLabels are %s; the agent writes or consumes %v", got, quoted)
	}
}

// TestAdmissionPolicyKeepsTheAgentOffTheAggregatorsAnnotations: the
// annotations the agent's policy never lets it set are the aggregator's,
// no more and no fewer, and those it lets it remove the ones the agent
// answers.
func TestAdmissionPolicyKeepsTheAgentOffTheAggregatorsAnnotations(t *testing.T) {
	var aggregator, consumed []string
	for _, k := range protocol.Keys {
		if k.Kind == protocol.Annotation && k.Writer == protocol.Aggregator {
			aggregator = append(aggregator, "'"+k.Name+"'")
			if k.Consumer == protocol.Agent {
				consumed = append(consumed, "'"+k.Name+"'")
			}
		}
	}
	for name, want := range map[string][]string{"aggregatorAnnotations": aggregator, "consumedAnnotations": consumed} {
		got := strings.Split(strings.Trim(policyVariable(t, "maintenance-handler-agent-own-node", name), "[]"), ", ")
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("the policy's %s are %v; the protocol's are %v", name, got, want)
		}
	}
}

// TestAdmissionPolicyHoldsTheAggregatorToItsKeys: the labels, annotations
// and taints the aggregator's node policy lets it change are those the
// protocol has it write or consume (and its taints' earlier keys, which it
// renames), no more and no fewer.
func TestAdmissionPolicyHoldsTheAggregatorToItsKeys(t *testing.T) {
	want := map[string][]string{}
	for _, k := range protocol.Keys {
		if k.Writer != protocol.Aggregator && k.Consumer != protocol.Aggregator {
			continue
		}
		variable := map[protocol.Kind]string{protocol.Label: "labels", protocol.Annotation: "annotations", protocol.Taint: "taints"}[k.Kind]
		want[variable] = append(want[variable], "'"+k.Name+"'")
	}
	for old := range protocol.RenamedTaints {
		want["taints"] = append(want["taints"], "'"+old+"'")
	}
	for _, name := range []string{"labels", "annotations", "taints"} {
		got := strings.Split(strings.Trim(policyVariable(t, "maintenance-handler-aggregator-node-keys", name), "[]"), ", ")
		sort.Strings(got)
		sort.Strings(want[name])
		if strings.Join(got, ",") != strings.Join(want[name], ",") {
			t.Errorf("the aggregator's node policy's %s are %v; the protocol's are %v", name, got, want[name])
		}
	}
}

// TestAdmissionPolicyPinsTheProductsEvents: the components only the
// product may write Events as are the agent's and the aggregator's.
func TestAdmissionPolicyPinsTheProductsEvents(t *testing.T) {
	want := "['" + protocol.EventSourceAgent + "', '" + protocol.EventSourceAggregator + "']"
	if got := policyVariable(t, "maintenance-handler-events-pinned", "product"); got != want {
		t.Errorf("the pinned components are %s, want %s", got, want)
	}
}

// TestAgentToleratesTheProductsTaints: the agent's pods tolerate every
// taint the agent or the aggregator puts on a node: a DaemonSet pod
// replaced (an upgrade, an eviction) must land again on a node that is
// faulty, or whose slice is going down, or no agent carries out its
// repair.
func TestAgentToleratesTheProductsTaints(t *testing.T) {
	ds := kinds(render(t, "base"))["DaemonSet maintenance-handler-agent/maintenance-handler-agent"]
	if ds == nil {
		t.Fatal("the base has no agent DaemonSet")
	}
	var spec appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds.Object, &spec); err != nil {
		t.Fatal(err)
	}
	tolerates := func(key string) bool {
		for _, tol := range spec.Spec.Template.Spec.Tolerations {
			if tol.Key == key && tol.Operator == corev1.TolerationOpExists || tol.Key == "" && tol.Operator == corev1.TolerationOpExists {
				return true
			}
		}
		return false
	}
	for _, k := range protocol.Keys {
		if k.Kind == protocol.Taint && (k.Writer == protocol.Agent || k.Writer == protocol.Aggregator) && !tolerates(k.Name) {
			t.Errorf("the agent's pods do not tolerate the %s's taint %s", k.Writer, k.Name)
		}
	}
}

// policyVariable is the expression of the variable name of the base's
// admission policy policy.
func policyVariable(t *testing.T, policy, name string) string {
	t.Helper()
	p := kinds(render(t, "base"))["ValidatingAdmissionPolicy /"+policy]
	if p == nil {
		t.Fatalf("the base has no policy %s", policy)
	}
	variables, _, _ := unstructured.NestedSlice(p.Object, "spec", "variables")
	for _, v := range variables {
		if v := v.(map[string]any); v["name"] == name {
			return v["expression"].(string)
		}
	}
	t.Fatalf("the policy %s has no variable %s", policy, name)
	return ""
}

// TestAgentNamespaceHoldsOnlyTheAgent: the agent's namespace, the one that
// must allow the host network, holds the agent's objects and nothing of the
// aggregator's: no Secret, no Role but those of the observed nodes'
// Leases, no pod that mounts a Secret; it enforces "privileged", and the aggregator's enforces
// "restricted" in the base. The chart renders with every option that adds
// a Secret on.
func TestAgentNamespaceHoldsOnlyTheAgent(t *testing.T) {
	const ns, ans = "maintenance-handler", "maintenance-handler-agent"
	objs := mustTemplate(t, "--set", "aggregator.notifier.urlSecret=notifier",
		"--set", "monitoring.podMonitoring.enabled=true", "--set", "monitoring.serviceMonitor.enabled=true")
	seen := 0
	for name, o := range objs {
		if o.GetNamespace() != ans {
			continue
		}
		seen++
		if c := o.GetLabels()["app.kubernetes.io/component"]; c != "agent" && o.GetKind() != "PodMonitoring" {
			t.Errorf("%s (component %q) is in the agent's namespace", name, c)
		}
		// Roles there grant the observed nodes' Leases alone.
		rules := fmt.Sprint(o.Object["rules"])
		if o.GetKind() == "Secret" || o.GetKind() == "Role" && (strings.Contains(rules, "secrets") || strings.Count(rules, "resources:") != 1 || !strings.Contains(rules, "resources:[leases]")) {
			t.Errorf("%s is in the agent's namespace: %s", name, rules)
		}
	}
	if seen < 4 {
		t.Errorf("%d objects in the agent's namespace, want its DaemonSet, service account, metrics Service and PodMonitoring", seen)
	}
	for name, o := range objs {
		if o.GetKind() == "Role" && strings.Contains(fmt.Sprint(o.Object["rules"]), "secrets") && o.GetNamespace() != ns {
			t.Errorf("%s reads Secrets outside the aggregator's namespace", name)
		}
	}
	dep := objs["Deployment "+ns+"/maintenance-handler-aggregator"]
	if dep == nil || !strings.Contains(fmt.Sprint(field(t, dep, "spec", "template", "spec", "volumes")), "notifier") {
		t.Errorf("the aggregator in %s mounts no notifier Secret: the render did not exercise it", ns)
	}
	enforce := func(o *unstructured.Unstructured) string {
		if o == nil {
			return "(no namespace)"
		}
		return o.GetLabels()["pod-security.kubernetes.io/enforce"]
	}
	base := kinds(render(t, "base"))
	if got := []string{enforce(objs["Namespace /"+ans]), enforce(base["Namespace /"+ans]), enforce(base["Namespace /"+ns])}; !slices.Equal(got, []string{"privileged", "privileged", "restricted"}) {
		t.Errorf("pod security enforced: the agent's namespace (chart, base) and the aggregator's (base): %v, want privileged, privileged, restricted", got)
	}
}
