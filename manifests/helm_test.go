package manifests_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/maintenance-handler/maintenance-handler/internal/chartdoc"
	"github.com/maintenance-handler/maintenance-handler/internal/generate"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// chart is the chart's directory, from this package's.
const chart = "../charts/maintenance-handler"

// helmLabels are the labels the chart adds to the base's: Helm's own.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// helmTemplate renders the chart as release maintenance-handler in the
// namespace maintenance-handler with args added, as `helm template`
// does; it returns the objects, or helm's error with what it printed.
func helmTemplate(t testing.TB, args ...string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	cmd := exec.Command(testworld.Helm(t), append([]string{"template", "maintenance-handler", chart, "--namespace", "maintenance-handler"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(strings.TrimSpace(stderr.String()))
	}
	return decodeYAML(t, out), nil
}

// decodeYAML decodes a stream of YAML documents into objects.
func decodeYAML(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == io.EOF {
			return objs
		} else if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			t.Fatalf("decode: %v", err)
		}
		objs = append(objs, o)
	}
}

// mustTemplate is helmTemplate that fails t on an error.
func mustTemplate(t testing.TB, args ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	objs, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	return kinds(objs)
}

// TestChartNotes: what helm prints after an install says what was
// installed, as the values chose, and how to check it.
func TestChartNotes(t *testing.T) {
	notes := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(testworld.Helm(t), append([]string{"install", "mh", chart, "--namespace", "fleet", "--dry-run=client"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm install --dry-run: %v\n%s", err, out)
		}
		_, n, ok := strings.Cut(string(out), "NOTES:\n")
		if !ok {
			t.Fatalf("no NOTES in:\n%s", out)
		}
		return n
	}
	for _, tc := range []struct {
		args       []string
		has, lacks []string
	}{
		{nil, []string{
			"installed in namespace fleet",
			"the eviction check that holds each agent's evictions to its own node",
			"kubectl -n fleet-agent rollout status daemonset/maintenance-handler-agent",
			"kubectl -n fleet rollout status deployment/maintenance-handler-aggregator",
			"kubectl gce-maintenance status",
			"the aggregator's metrics port takes only the pods of the namespaces gmp-system",
		}, []string{"no aggregator", "no admission policies"}},
		{[]string{"--set", "aggregator.enabled=false", "--set", "admissionPolicy.enabled=false"}, []string{
			"no aggregator (aggregator.enabled=false)", "no admission policies (admissionPolicy.enabled=false)",
		}, []string{"deployment/maintenance-handler-aggregator"}},
	} {
		n := notes(tc.args...)
		for _, want := range tc.has {
			if !strings.Contains(n, want) {
				t.Errorf("%v: the notes lack %q:\n%s", tc.args, want, n)
			}
		}
		for _, not := range tc.lacks {
			if strings.Contains(n, not) {
				t.Errorf("%v: the notes say %q:\n%s", tc.args, not, n)
			}
		}
	}
}

// TestChartLints: helm lint --strict finds nothing in the chart.
func TestChartLints(t *testing.T) {
	out, err := exec.Command(testworld.Helm(t), "lint", "--strict", chart).CombinedOutput()
	if err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
}

// TestBaseIsTheChartsRender: the kustomize base is what make generate
// renders from the chart's defaults, without Helm's hooks and labels, and
// kustomize builds from it the chart's objects field by field (less the
// base's Namespace, which helm install --create-namespace makes), so the
// two never drift apart.
func TestBaseIsTheChartsRender(t *testing.T) {
	cmd := exec.Command(testworld.Helm(t), generate.BaseRender...)
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v: %s", err, stderr.String())
	}
	files, err := generate.Base(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		have, err := os.ReadFile(filepath.Join("..", f.Path))
		if err != nil || !bytes.Equal(have, f.Data) {
			t.Errorf("%s is not the chart's default render (%v): edit %s, not the base, and run make generate", f.Path, err, f.Source)
		}
	}
	chartObjs := map[string]*unstructured.Unstructured{}
	for name, o := range kinds(decodeYAML(t, out)) {
		if o.GetAnnotations()["helm.sh/hook"] == "" {
			stripHelmLabels(o)
			chartObjs[name] = o
		}
	}
	base := kinds(render(t, "base"))
	delete(base, "Namespace /maintenance-handler")
	if d := cmp.Diff(base, chartObjs); d != "" {
		t.Errorf("kustomize builds from the base other objects than the chart's default render (-base +chart):\n%s", d)
	}
}

// stripHelmLabels removes Helm's labels from o and its pod template.
func stripHelmLabels(o *unstructured.Unstructured) {
	for _, path := range [][]string{{"metadata", "labels"}, {"spec", "template", "metadata", "labels"}} {
		labels, ok, _ := unstructured.NestedStringMap(o.Object, path...)
		if !ok {
			continue
		}
		for _, l := range helmLabels {
			delete(labels, l)
		}
		_ = unstructured.SetNestedStringMap(o.Object, labels, path...)
	}
}

// TestChartSchemaRejects: a value of the wrong type, or a key values.yaml
// does not have, is refused with a message that names it.
func TestChartSchemaRejects(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"--set", "agent.noticeport=8190"}, "'noticeport' not allowed"},
		{[]string{"--set", "agent.noticePort=high"}, "/agent/noticePort"},
		{[]string{"--set", "aggregator.replicas=-1"}, "/aggregator/replicas"},
		{[]string{"--set", "image.pullPolicy=Sometimes"}, "/image/pullPolicy"},
		{[]string{"--set", "agent.maxUnavailable=ten"}, "/agent/maxUnavailable"},
		{[]string{"--set", "monitoring.serviceMonitor.interval=often"}, "/monitoring/serviceMonitor/interval"},
		{[]string{"--set", "bogus=true"}, "'bogus' not allowed"},
		{[]string{"--set", "aggregator.notifier.steps={draining,drained}"}, "/aggregator/notifier/steps/1"},
		{[]string{"--set", "aggregator.notifier.digest=soon"}, "/aggregator/notifier/digest"},
		{[]string{"--set", "admissionPolicy.people.serviceAccounts={system:serviceaccount:ops:maintainer}"}, "/admissionPolicy/people/serviceAccounts/0"},
		{[]string{"--set", "admissionPolicy.people.googleIdentities={ops@example.com}"}, "/admissionPolicy/people/googleIdentities/0"},
		{[]string{"--set", "admissionPolicy.people.googleIdentities={x@p.iam.gserviceaccount.com' || true || '}"}, "/admissionPolicy/people/googleIdentities/0"},
		{[]string{"--set-json", `agent.tolerations=[{"key":"a","operator":"Maybe"}]`}, "/agent/tolerations/0/operator"},
		// The policy, as the aggregator reads it: a key it does not know, a
		// word for a count, a list for the pools.
		{[]string{"--set-json", `policy={"pools":{"gpu":{"maxVoluntaryMaintenence":2}}}`}, "'maxVoluntaryMaintenence' not allowed"},
		{[]string{"--set-json", `policy={"pools":{"gpu":{"maxVoluntaryMaintenance":"two"}}}`}, "/policy/pools/gpu/maxVoluntaryMaintenance"},
		{[]string{"--set-json", `policy={"pools":[{"name":"gpu"}]}`}, "/policy/pools"},
		{[]string{"--set-json", `policy={"cluster":{"faults":{"conditions":[{"type":"GPUFault","behavior":"repair","after":"5m"}]}}}`}, "'after' not allowed"},
	} {
		_, err := helmTemplate(t, tc.set...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: %v; want an error naming %q", tc.set, err, tc.want)
		}
	}
}

// TestChartOptions: each value of values.yaml changes what its description
// says, in the rendered objects. A value missing from the table fails the
// test, so a new value comes with its check.
func TestChartOptions(t *testing.T) {
	const (
		ns  = "maintenance-handler"
		ans = "maintenance-handler-agent"
		ds  = "DaemonSet " + ans + "/maintenance-handler-agent"
		dep = "Deployment " + ns + "/maintenance-handler-aggregator"
		np  = "NetworkPolicy " + ns + "/maintenance-handler-aggregator"
	)
	agentPod := func(o map[string]*unstructured.Unstructured) map[string]any {
		return field(t, o[ds], "spec", "template", "spec").(map[string]any)
	}
	aggPod := func(o map[string]*unstructured.Unstructured) map[string]any {
		return field(t, o[dep], "spec", "template", "spec").(map[string]any)
	}
	agent := func(o map[string]*unstructured.Unstructured) map[string]any {
		return agentPod(o)["containers"].([]any)[0].(map[string]any)
	}
	agg := func(o map[string]*unstructured.Unstructured) map[string]any {
		return aggPod(o)["containers"].([]any)[0].(map[string]any)
	}
	cases := []struct {
		key  string
		set  []string
		want func(o map[string]*unstructured.Unstructured) (got, want any)
	}{
		{"image.repository", []string{"--set", "image.repository=r.example/mh"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{agent(o)["image"], agg(o)["image"]}, []any{"r.example/mh:dev", "r.example/mh:dev"}
		}},
		{"image.tag", []string{"--set", "image.tag=v9"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{agent(o)["image"], agg(o)["image"]}, []any{"maintenance-handler:v9", "maintenance-handler:v9"}
		}},
		{"image.pullPolicy", []string{"--set", "image.pullPolicy=Always"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{agent(o)["imagePullPolicy"], agg(o)["imagePullPolicy"]}, []any{"Always", "Always"}
		}},
		{"imagePullSecrets", []string{"--set", "imagePullSecrets[0].name=pull"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{agentPod(o)["imagePullSecrets"], aggPod(o)["imagePullSecrets"]}, []any{[]any{map[string]any{"name": "pull"}}, []any{map[string]any{"name": "pull"}}}
		}},
		{"computeCaller", []string{"--set", "computeCaller=node"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{slices.Contains(anyStrings(agent(o)["args"]), "--compute-caller=node"), slices.Contains(anyStrings(agent(mustTemplate(t))["args"]), "--compute-caller=aggregator")}, []any{true, true}
		}},
		{"poolLabel", []string{"--set", "poolLabel=example.com/pool"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []bool{slices.Contains(anyStrings(agent(o)["args"]), "--pool-label=example.com/pool"), slices.Contains(anyStrings(agg(o)["args"]), "--pool-label=example.com/pool")}, []bool{true, true}
		}},
		{"sliceLabel", []string{"--set", "sliceLabel=example.com/slice"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []bool{slices.Contains(anyStrings(agent(o)["args"]), "--slice-label=example.com/slice"), slices.Contains(anyStrings(agg(o)["args"]), "--slice-label=example.com/slice")}, []bool{true, true}
		}},
		{"reservationGroups", []string{"--set", "reservationGroups=subblock"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			base := slices.ContainsFunc(anyStrings(agent(mustTemplate(t))["args"]), func(a string) bool { return strings.HasPrefix(a, "--reservation-groups") })
			return []bool{slices.Contains(anyStrings(agent(o)["args"]), "--reservation-groups=subblock"), slices.Contains(anyStrings(agg(o)["args"]), "--reservation-groups=subblock"), base}, []bool{true, true, false}
		}},
		{"observeOnly", []string{"--set", "observeOnly=true"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			base := slices.Contains(anyStrings(agg(mustTemplate(t))["args"]), "--observe-only")
			return []bool{slices.Contains(anyStrings(agent(o)["args"]), "--observe-only"), slices.Contains(anyStrings(agg(o)["args"]), "--observe-only"), base}, []bool{true, true, false}
		}},
		{"agent.nodeSelectorTerms", []string{"--set-json", `agent.nodeSelectorTerms=[{"matchExpressions":[{"key":"example.com/gpu","operator":"Exists"}]}]`}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o[ds], "spec", "template", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"),
				[]any{map[string]any{"matchExpressions": []any{map[string]any{"key": "example.com/gpu", "operator": "Exists"}}}}
		}},
		{"agent.tolerations", []string{"--set-json", `agent.tolerations=[{"key":"example.com/t","operator":"Exists"}]`}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return agentPod(o)["tolerations"], []any{map[string]any{"key": "example.com/t", "operator": "Exists"}}
		}},
		{"agent.resources", []string{"--set", "agent.resources.limits.memory=64Mi"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return agent(o)["resources"].(map[string]any)["limits"], map[string]any{"memory": "64Mi"}
		}},
		{"agent.priorityClassName", []string{"--set", "agent.priorityClassName=gpu-critical"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return agentPod(o)["priorityClassName"], "gpu-critical"
		}},
		{"agent.terminationGracePeriodSeconds", []string{"--set", "agent.terminationGracePeriodSeconds=45"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return agentPod(o)["terminationGracePeriodSeconds"], int64(45)
		}},
		{"agent.maxUnavailable", []string{"--set", "agent.maxUnavailable=25%"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o[ds], "spec", "updateStrategy", "rollingUpdate", "maxUnavailable"), "25%"
		}},
		{"agent.metricsPort", []string{"--set", "agent.metricsPort=9300"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{agent(o)["args"].([]any)[0], agent(o)["ports"].([]any)[0].(map[string]any)["containerPort"], field(t, o["Service "+ans+"/maintenance-handler-agent-metrics"], "spec", "ports").([]any)[0].(map[string]any)["port"]},
				[]any{"--listen-address=$(HOST_IP):9300", int64(9300), int64(9300)}
		}},
		{"agent.noticePort", []string{"--set", "agent.noticePort=0"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{strings.Contains(strings.Join(anyStrings(agent(o)["args"]), " "), "--notice-listen-address"), len(agent(o)["ports"].([]any))}, []any{false, 1}
		}},
		{"agent.gkeHandler", []string{"--set", "agent.gkeHandler=ignore"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []bool{slices.Contains(anyStrings(agent(o)["args"]), "--gke-handler=ignore"), slices.ContainsFunc(anyStrings(agent(mustTemplate(t))["args"]), func(a string) bool { return strings.HasPrefix(a, "--gke-handler") })}, []bool{true, false}
		}},
		{"agent.evictionRequests", []string{"--set", "agent.evictionRequests=true"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []bool{slices.Contains(anyStrings(agent(o)["args"]), "--eviction-requests"), slices.Contains(anyStrings(agent(mustTemplate(t))["args"]), "--eviction-requests")}, []bool{true, false}
		}},
		{"agent.extraArgs", []string{"--set", "agent.extraArgs[0]=--manual-drain-timeout=2h"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			args := anyStrings(agent(o)["args"])
			return args[len(args)-1], "--manual-drain-timeout=2h"
		}},
		{"agent.extraEnv", []string{"--set", "agent.extraEnv[0].name=GCE_METADATA_HOST", "--set", "agent.extraEnv[0].value=10.0.0.1:80"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			env := agent(o)["env"].([]any)
			return env[len(env)-1], map[string]any{"name": "GCE_METADATA_HOST", "value": "10.0.0.1:80"}
		}},
		{"agent.podAnnotations", []string{"--set", "agent.podAnnotations.a=b"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o[ds], "spec", "template", "metadata", "annotations"), map[string]any{"a": "b"}
		}},
		{"agent.podLabels", []string{"--set", "agent.podLabels.team=ml"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o[ds], "spec", "template", "metadata", "labels").(map[string]any)["team"], "ml"
		}},
		{"agent.serviceAccount.create", []string{"--set", "agent.serviceAccount.create=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{o["ServiceAccount "+ans+"/maintenance-handler-agent"] == nil, agentPod(o)["serviceAccountName"]}, []any{true, "maintenance-handler-agent"}
		}},
		{"agent.serviceAccount.name", []string{"--set", "agent.serviceAccount.name=gpu-agent"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			subject := field(t, o["ClusterRoleBinding /maintenance-handler-agent"], "subjects").([]any)[0].(map[string]any)["name"]
			match := func(kind, name string) any {
				return field(t, o[kind+" /"+name], "spec", "matchConditions").([]any)[0].(map[string]any)["expression"]
			}
			hook := field(t, o["ValidatingWebhookConfiguration /maintenance-handler-agent-evictions"], "webhooks").([]any)[0].(map[string]any)["matchConditions"].([]any)[0].(map[string]any)["expression"]
			user := `request.userInfo.username == "system:serviceaccount:` + ans + `:gpu-agent"`
			return []any{o["ServiceAccount "+ans+"/gpu-agent"] != nil, agentPod(o)["serviceAccountName"], subject, match("ValidatingAdmissionPolicy", "maintenance-handler-agent-own-node"), hook},
				[]any{true, "gpu-agent", "gpu-agent", user, user}
		}},
		{"agent.serviceAccount.annotations", []string{"--set", "agent.serviceAccount.annotations.a=b"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["ServiceAccount "+ans+"/maintenance-handler-agent"].GetAnnotations(), map[string]string{"a": "b"}
		}},
		{"agent.namespace.name", []string{"--set", "agent.namespace.name=gpu-nodes"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			subject := field(t, o["RoleBinding "+ns+"/maintenance-handler-agent"], "subjects").([]any)[0].(map[string]any)["namespace"]
			hook := field(t, o["ValidatingWebhookConfiguration /maintenance-handler-agent-evictions"], "webhooks").([]any)[0].(map[string]any)["matchConditions"].([]any)[0].(map[string]any)["expression"]
			return []any{o["Namespace /gpu-nodes"] != nil, o["DaemonSet gpu-nodes/maintenance-handler-agent"] != nil, o["ServiceAccount gpu-nodes/maintenance-handler-agent"] != nil, subject, hook},
				[]any{true, true, true, "gpu-nodes", `request.userInfo.username == "system:serviceaccount:gpu-nodes:maintenance-handler-agent"`}
		}},
		{"agent.namespace.create", []string{"--set", "agent.namespace.create=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{o["Namespace /"+ans] == nil, o[ds] != nil}, []any{true, true}
		}},
		{"aggregator.enabled", []string{"--set", "aggregator.enabled=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{o[dep] == nil, o["ClusterRole /maintenance-handler-aggregator"] == nil, o[ds] != nil}, []any{true, true, true}
		}},
		{"aggregator.replicas", []string{"--set", "aggregator.replicas=3"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o[dep], "spec", "replicas"), int64(3)
		}},
		{"aggregator.metricsPort", []string{"--set", "aggregator.metricsPort=9301"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{agg(o)["args"].([]any)[0], agg(o)["ports"].([]any)[0].(map[string]any)["containerPort"]}, []any{"--listen-address=:9301", int64(9301)}
		}},
		{"aggregator.evictionCheckPort", []string{"--set", "aggregator.evictionCheckPort=0"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			_, hook := o["ValidatingWebhookConfiguration /maintenance-handler-agent-evictions"]
			_, svc := o["Service maintenance-handler/maintenance-handler-eviction-check"]
			return []any{agg(o)["args"].([]any)[2], len(agg(o)["ports"].([]any)), hook, svc}, []any{"--eviction-check-listen-address=", 1, false, false}
		}},
		{"aggregator.evictionCheckCallers", []string{"--set", "aggregator.evictionCheckCallers={kube-apiserver,webhook-caller}"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			reviews := strings.Contains(fmt.Sprint(field(t, o["ClusterRole /maintenance-handler-aggregator"], "rules")), "tokenreviews")
			return []any{agg(o)["args"].([]any)[3], reviews}, []any{"--eviction-check-callers=kube-apiserver,webhook-caller", true}
		}},
		{"aggregator.evictionCheckAllowFrom", []string{"--set", "aggregator.evictionCheckAllowFrom={172.16.0.0/28}"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o[np], "spec", "ingress").([]any)[1], map[string]any{"ports": []any{map[string]any{"port": "eviction-check"}}, "from": []any{map[string]any{"ipBlock": map[string]any{"cidr": "172.16.0.0/28"}}}}
		}},
		{"aggregator.resources", []string{"--set", "aggregator.resources.limits.memory=1Gi"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return agg(o)["resources"].(map[string]any)["limits"], map[string]any{"memory": "1Gi"}
		}},
		{"aggregator.nodeSelector", []string{"--set", "aggregator.nodeSelector.pool=system"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return aggPod(o)["nodeSelector"], map[string]any{"pool": "system"}
		}},
		{"aggregator.tolerations", []string{"--set-json", `aggregator.tolerations=[{"key":"system","operator":"Exists"}]`}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return aggPod(o)["tolerations"], []any{map[string]any{"key": "system", "operator": "Exists"}}
		}},
		{"aggregator.avoidNodesLabelled", []string{"--set-json", `aggregator.avoidNodesLabelled=["example.com/gpu"]`}, func(o map[string]*unstructured.Unstructured) (any, any) {
			_, none := aggPod(mustTemplate(t, "--set-json", "aggregator.avoidNodesLabelled=[]"))["affinity"].(map[string]any)["nodeAffinity"]
			return []any{field(t, o[dep], "spec", "template", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"), none},
				[]any{[]any{map[string]any{"matchExpressions": []any{map[string]any{"key": "example.com/gpu", "operator": "DoesNotExist"}}}}, false}
		}},
		{"aggregator.zoneSpread", []string{"--set", "aggregator.zoneSpread=ScheduleAnyway"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			_, none := aggPod(mustTemplate(t, "--set", "aggregator.zoneSpread="))["topologySpreadConstraints"]
			spread := aggPod(o)["topologySpreadConstraints"].([]any)[0].(map[string]any)
			return []any{spread["whenUnsatisfiable"], spread["topologyKey"], none}, []any{"ScheduleAnyway", "topology.kubernetes.io/zone", false}
		}},
		{"aggregator.extraArgs", []string{"--set", "aggregator.extraArgs[0]=--interval=10s"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			args := anyStrings(agg(o)["args"])
			return args[len(args)-1], "--interval=10s"
		}},
		{"aggregator.extraEnv", []string{"--set", "aggregator.extraEnv[0].name=A", "--set", "aggregator.extraEnv[0].value=b"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			env := agg(o)["env"].([]any)
			return env[len(env)-1], map[string]any{"name": "A", "value": "b"}
		}},
		{"aggregator.podAnnotations", []string{"--set", "aggregator.podAnnotations.a=b"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o[dep], "spec", "template", "metadata", "annotations"), map[string]any{"a": "b"}
		}},
		{"aggregator.podLabels", []string{"--set", "aggregator.podLabels.team=ml"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o[dep], "spec", "template", "metadata", "labels").(map[string]any)["team"], "ml"
		}},
		{"aggregator.priorityClassName", []string{"--set", "aggregator.priorityClassName=fleet-critical"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return aggPod(o)["priorityClassName"], "fleet-critical"
		}},
		{"aggregator.notifier.urlSecret", []string{"--set", "aggregator.notifier.urlSecret=hook"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{anyStrings(agg(o)["args"])[3], aggPod(o)["volumes"]}, []any{"--notify-url-file=/etc/maintenance-handler/notifier/url",
				[]any{map[string]any{"name": "notifier", "secret": map[string]any{"secretName": "hook"}}}}
		}},
		{"aggregator.notifier.urlKey", []string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.urlKey=slack"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return anyStrings(agg(o)["args"])[3], "--notify-url-file=/etc/maintenance-handler/notifier/slack"
		}},
		{"aggregator.notifier.format", []string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.format=slack"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return anyStrings(agg(o)["args"])[4], "--notify-format=slack"
		}},
		{"aggregator.notifier.templateKey", []string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.format=template", "--set", "aggregator.notifier.templateKey=chat"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return anyStrings(agg(o)["args"])[4:6], []string{"--notify-format=template", "--notify-template-file=/etc/maintenance-handler/notifier/chat"}
		}},
		{"aggregator.notifier.headersKey", []string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.headersKey=headers"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return anyStrings(agg(o)["args"])[5], "--notify-headers-file=/etc/maintenance-handler/notifier/headers"
		}},
		{"aggregator.notifier.clusterName", []string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.clusterName=prod-a3"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return anyStrings(agg(o)["args"])[5], "--cluster-name=prod-a3"
		}},
		{"aggregator.notifier.steps", []string{"--set", "aggregator.notifier.urlSecret=hook", "--set-json", `aggregator.notifier.steps=["draining","back"]`}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return anyStrings(agg(o)["args"])[5], "--notify-steps=draining,back"
		}},
		{"aggregator.notifier.digest", []string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.digest=2m"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return anyStrings(agg(o)["args"])[6], "--notify-digest=2m"
		}},
		{"aggregator.podDisruptionBudget.enabled", []string{"--set", "aggregator.podDisruptionBudget.enabled=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["PodDisruptionBudget "+ns+"/maintenance-handler-aggregator"] == nil, true
		}},
		{"aggregator.serviceAccount.create", []string{"--set", "aggregator.serviceAccount.create=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{o["ServiceAccount "+ns+"/maintenance-handler-aggregator"] == nil, aggPod(o)["serviceAccountName"]}, []any{true, "maintenance-handler-aggregator"}
		}},
		{"aggregator.serviceAccount.name", []string{"--set", "aggregator.serviceAccount.name=fleet"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			subject := field(t, o["RoleBinding "+ns+"/maintenance-handler-aggregator"], "subjects").([]any)[0].(map[string]any)["name"]
			return []any{o["ServiceAccount "+ns+"/fleet"] != nil, aggPod(o)["serviceAccountName"], subject}, []any{true, "fleet", "fleet"}
		}},
		{"aggregator.serviceAccount.annotations", []string{"--set", "aggregator.serviceAccount.annotations.a=b"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["ServiceAccount "+ns+"/maintenance-handler-aggregator"].GetAnnotations(), map[string]string{"a": "b"}
		}},
		{"policy", []string{"--set-json", `policy={"pools":{"gpu":{"maxVoluntaryMaintenance":2}}}`}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o["ConfigMap "+ns+"/maintenance-handler"], "data"), map[string]any{"policy.yaml": "pools:\n  gpu:\n    maxVoluntaryMaintenance: 2\n"}
		}},
		{"admissionPolicy.enabled", []string{"--set", "admissionPolicy.enabled=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{o["ValidatingAdmissionPolicy /maintenance-handler-agent-own-node"] == nil, o["ValidatingAdmissionPolicyBinding /maintenance-handler-agent-own-pods"] == nil}, []any{true, true}
		}},
		{"admissionPolicy.detectors", []string{"--set", "admissionPolicy.detectors={system:serviceaccount:dcgm:exporter}"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return writersVariable(t, o, "detectors"), "['system:serviceaccount:dcgm:exporter']"
		}},
		{"admissionPolicy.detectorConditions", []string{"--set", "admissionPolicy.detectorConditions={GPUSlow}"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return writersVariable(t, o, "detectorConditions"), "['GPUSlow']"
		}},
		{"admissionPolicy.people.serviceAccounts", []string{"--set", "admissionPolicy.people.serviceAccounts={ops/maintainer}"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return writersVariable(t, o, "people"), "['system:serviceaccount:ops:maintainer']"
		}},
		{"admissionPolicy.people.googleIdentities", []string{"--set", "admissionPolicy.people.googleIdentities={ops@p.iam.gserviceaccount.com}"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return writersVariable(t, o, "people"), "['ops@p.iam.gserviceaccount.com']"
		}},
		{"criticalPodsQuota.create", []string{"--set", "criticalPodsQuota.create=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return criticalQuotas(t, o), map[string][]string{}
		}},
		{"criticalPodsQuota.pods", []string{"--set", "criticalPodsQuota.pods=500"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o["ResourceQuota "+ans+"/maintenance-handler-critical-pods"], "spec", "hard", "pods"), "500"
		}},
		{"networkPolicy.create", []string{"--set", "networkPolicy.create=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			_, off := o[np]
			return []any{mustTemplate(t)[np] != nil, off}, []any{true, false}
		}},
		{"networkPolicy.metricsFromNamespaces", []string{"--set", "networkPolicy.metricsFromNamespaces={monitoring}"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o[np], "spec", "ingress").([]any)[0].(map[string]any)["from"].([]any)[0], map[string]any{"namespaceSelector": map[string]any{"matchExpressions": []any{
				map[string]any{"key": "kubernetes.io/metadata.name", "operator": "In", "values": []any{"monitoring"}}}}}
		}},
		{"rbac.create", []string{"--set", "rbac.create=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			var roles []string
			for k := range o {
				if strings.Contains(k, "Role") && !strings.Contains(k, "uninstall") {
					roles = append(roles, k)
				}
			}
			return []any{roles, o["ServiceAccount "+ans+"/maintenance-handler-agent"] != nil}, []any{[]string(nil), true}
		}},
		{"monitoring.serviceMonitor.enabled", []string{"--set", "monitoring.serviceMonitor.enabled=true"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["ServiceMonitor "+ns+"/maintenance-handler"] != nil, true
		}},
		{"monitoring.serviceMonitor.interval", []string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.interval=15s"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o["ServiceMonitor "+ns+"/maintenance-handler"], "spec", "endpoints").([]any)[0].(map[string]any)["interval"], "15s"
		}},
		{"monitoring.serviceMonitor.labels", []string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.labels.release=kps"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["ServiceMonitor "+ns+"/maintenance-handler"].GetLabels()["release"], "kps"
		}},
		{"monitoring.serviceMonitor.namespace", []string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.namespace=monitoring"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			m := o["ServiceMonitor monitoring/maintenance-handler"]
			if m == nil {
				return nil, "a ServiceMonitor in monitoring"
			}
			return field(t, m, "spec", "namespaceSelector", "matchNames"), []any{ns, ans}
		}},
		{"monitoring.podMonitoring.enabled", []string{"--set", "monitoring.podMonitoring.enabled=true"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{o["PodMonitoring "+ns+"/maintenance-handler"] != nil, o["PodMonitoring "+ans+"/maintenance-handler"] != nil}, []any{true, true}
		}},
		{"monitoring.podMonitoring.interval", []string{"--set", "monitoring.podMonitoring.enabled=true", "--set", "monitoring.podMonitoring.interval=1m"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o["PodMonitoring "+ns+"/maintenance-handler"], "spec", "endpoints").([]any)[0].(map[string]any)["interval"], "1m"
		}},
		{"monitoring.prometheusRule.enabled", []string{"--set", "monitoring.prometheusRule.enabled=true"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o["PrometheusRule "+ns+"/maintenance-handler"], "spec"), field(t, kinds(render(t, "overlays/prometheus-operator"))["PrometheusRule "+ns+"/maintenance-handler"], "spec")
		}},
		{"monitoring.prometheusRule.labels", []string{"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.prometheusRule.labels.release=kps"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["PrometheusRule "+ns+"/maintenance-handler"].GetLabels()["release"], "kps"
		}},
		{"monitoring.prometheusRule.namespace", []string{"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.prometheusRule.namespace=monitoring"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["PrometheusRule monitoring/maintenance-handler"] != nil, true
		}},
		{"monitoring.rules.enabled", []string{"--set", "monitoring.rules.enabled=true"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return field(t, o["Rules "+ns+"/maintenance-handler"], "spec"), field(t, kinds(render(t, "overlays/gke-managed-prometheus"))["Rules "+ns+"/maintenance-handler"], "spec")
		}},
		{"monitoring.grafanaDashboard.enabled", []string{"--set", "monitoring.grafanaDashboard.enabled=true"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			dashboard, _ := os.ReadFile("../monitoring/grafana/maintenance-handler.json")
			return field(t, o["ConfigMap "+ns+"/maintenance-handler-dashboard"], "data", "maintenance-handler.json"), string(dashboard)
		}},
		{"monitoring.grafanaDashboard.labels", []string{"--set", "monitoring.grafanaDashboard.enabled=true", "--set", "monitoring.grafanaDashboard.labels.dash=yes"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return o["ConfigMap "+ns+"/maintenance-handler-dashboard"].GetLabels()["dash"], "yes"
		}},
		{"uninstall.cleanNodes", []string{"--set", "uninstall.cleanNodes=false"}, func(o map[string]*unstructured.Unstructured) (any, any) {
			return []any{o["Job "+ns+"/maintenance-handler-uninstall"] == nil, mustTemplate(t)["Job "+ns+"/maintenance-handler-uninstall"] != nil}, []any{true, true}
		}},
	}
	values, err := os.ReadFile(chart + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	documented, err := chartdoc.Values(values)
	if err != nil {
		t.Fatal(err)
	}
	// A value that sets a flag is checked by TestChartValuesSetTheirFlags,
	// the pods' pass-throughs and the monitors by TestChartPodsAndMonitors,
	// unless this test checks more of them.
	var keys, checked []string
	for _, tc := range cases {
		checked = append(checked, tc.key)
	}
	elsewhere := flagValues()
	for _, tc := range podAndMonitorCases(t) {
		elsewhere[tc.key] = true
	}
	for _, v := range documented {
		if !elsewhere[v.Key] || slices.Contains(checked, v.Key) {
			keys = append(keys, v.Key)
		}
	}
	if d := cmp.Diff(keys, checked); d != "" {
		t.Errorf("the values of values.yaml (-) and the values this test checks (+) differ:\n%s", d)
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			got, want := tc.want(mustTemplate(t, tc.set...))
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%v (-want +got):\n%s", tc.set, d)
			}
		})
	}
}

// field is o's field at path, failing t when it is absent.
func field(t testing.TB, o *unstructured.Unstructured, path ...string) any {
	t.Helper()
	if o == nil {
		t.Fatalf("no such object (for %v)", path)
	}
	v, ok, err := unstructured.NestedFieldNoCopy(o.Object, path...)
	if !ok || err != nil {
		t.Fatalf("%s %s has no %v (%v)", o.GetKind(), o.GetName(), path, err)
	}
	return v
}

func anyStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// TestChartAsASubchart: the chart renders as a dependency of an umbrella
// chart, where Helm gives it the umbrella's global values, and takes its
// own values from the umbrella's under its name.
func TestChartAsASubchart(t *testing.T) {
	umbrella := t.TempDir()
	if err := os.WriteFile(filepath.Join(umbrella, "Chart.yaml"), []byte("apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n  - name: maintenance-handler\n    version: \"*\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	values := "global:\n  imageRegistry: registry.example.com\nmaintenance-handler:\n  image:\n    tag: v9.9.9\n"
	if err := os.WriteFile(filepath.Join(umbrella, "values.yaml"), []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(umbrella, "charts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", chart, filepath.Join(umbrella, "charts", "maintenance-handler")).CombinedOutput(); err != nil {
		t.Fatalf("copy the chart: %v\n%s", err, out)
	}
	cmd := exec.Command(testworld.Helm(t), "template", "platform", umbrella, "--namespace", "maintenance-handler")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template of an umbrella chart: %v\n%s", err, stderr.String())
	}
	objs := kinds(decodeYAML(t, out))
	ds, ok := objs["DaemonSet maintenance-handler-agent/maintenance-handler-agent"]
	if !ok {
		t.Fatalf("no agent DaemonSet among %d objects", len(objs))
	}
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 || !strings.HasSuffix(containers[0].(map[string]any)["image"].(string), ":v9.9.9") {
		t.Errorf("the agent's image %v, want the umbrella's tag v9.9.9", containers)
	}
}

// TestChartBumpAloneRollsNothing: the pod templates of a chart whose
// version alone changed are the same, so that upgrading to it restarts no
// agent and no aggregator.
func TestChartBumpAloneRollsNothing(t *testing.T) {
	bumped := filepath.Join(t.TempDir(), "maintenance-handler")
	if out, err := exec.Command("cp", "-r", chart, bumped).CombinedOutput(); err != nil {
		t.Fatalf("copy the chart: %v\n%s", err, out)
	}
	meta, err := os.ReadFile(filepath.Join(bumped, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(meta), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "version:") {
			lines[i] = "version: 99.0.0"
		}
	}
	if err := os.WriteFile(filepath.Join(bumped, "Chart.yaml"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	render := func(dir string) map[string]*unstructured.Unstructured {
		out, err := exec.Command(testworld.Helm(t), "template", "maintenance-handler", dir, "--namespace", "maintenance-handler").Output()
		if err != nil {
			t.Fatalf("helm template %s: %v", dir, err)
		}
		return kinds(decodeYAML(t, out))
	}
	before, after := render(chart), render(bumped)
	for _, w := range []string{"DaemonSet maintenance-handler-agent/maintenance-handler-agent", "Deployment maintenance-handler/maintenance-handler-aggregator"} {
		a, _, _ := unstructured.NestedMap(before[w].Object, "spec", "template")
		b, _, _ := unstructured.NestedMap(after[w].Object, "spec", "template")
		if d := cmp.Diff(a, b); d != "" {
			t.Errorf("%s: its pod template changes with the chart's version alone (-before +after):\n%s", w, d)
		}
	}
}

// TestAggregatorOffTheNodesItMaintains: by default no aggregator replica
// may run on a node the agent runs on (each key the agent's node selector
// requires is one the aggregator's forbids), no two replicas share a node,
// they spread over zones as required, and a rollout never needs a third
// node.
func TestAggregatorOffTheNodesItMaintains(t *testing.T) {
	o := mustTemplate(t)
	ds := o["DaemonSet maintenance-handler-agent/maintenance-handler-agent"]
	dep := o["Deployment maintenance-handler/maintenance-handler-aggregator"]
	forbidden := map[string]bool{}
	terms := field(t, dep, "spec", "template", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms").([]any)
	for _, e := range terms[0].(map[string]any)["matchExpressions"].([]any) {
		if e := e.(map[string]any); e["operator"] == "DoesNotExist" {
			forbidden[e["key"].(string)] = true
		}
	}
	if len(terms) != 1 {
		t.Errorf("the aggregator's node affinity has %d terms, want 1 (every forbidden key at once)", len(terms))
	}
	for _, term := range field(t, ds, "spec", "template", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms").([]any) {
		for _, e := range term.(map[string]any)["matchExpressions"].([]any) {
			if key := e.(map[string]any)["key"].(string); !forbidden[key] {
				t.Errorf("the agent runs on nodes labelled %s; the aggregator may too", key)
			}
		}
	}
	anti := field(t, dep, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution").([]any)
	if len(anti) != 1 || anti[0].(map[string]any)["topologyKey"] != "kubernetes.io/hostname" {
		t.Errorf("the replicas' anti-affinity is %v, want required per node", anti)
	}
	spread := field(t, dep, "spec", "template", "spec", "topologySpreadConstraints").([]any)
	if s := spread[0].(map[string]any); s["topologyKey"] != "topology.kubernetes.io/zone" || s["whenUnsatisfiable"] != "DoNotSchedule" {
		t.Errorf("the replicas' zone spread is %v, want required", s)
	}
	if r := field(t, dep, "spec", "strategy", "rollingUpdate").(map[string]any); r["maxSurge"] != int64(0) && r["maxSurge"] != float64(0) {
		t.Errorf("rollout %v: a surge replica would need a node of its own", r)
	}
}

// TestEvictionCheckReachableFromAPrivateControlPlane: by default the check
// serves on a port a GKE private cluster's control plane may reach (443 or
// 10250, by the firewall rule GKE creates), and its Service sends there.
func TestEvictionCheckReachableFromAPrivateControlPlane(t *testing.T) {
	o := mustTemplate(t)
	dep := o["Deployment maintenance-handler/maintenance-handler-aggregator"]
	svc := o["Service maintenance-handler/maintenance-handler-eviction-check"]
	var port any
	for _, p := range field(t, dep, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)["ports"].([]any) {
		if p := p.(map[string]any); p["name"] == "eviction-check" {
			port = p["containerPort"]
		}
	}
	if fmt.Sprint(port) != "443" && fmt.Sprint(port) != "10250" {
		t.Errorf("the eviction check serves on %v; a private GKE control plane reaches pods on 443 and 10250 only", port)
	}
	target := field(t, svc, "spec", "ports").([]any)[0].(map[string]any)["targetPort"]
	if target != "eviction-check" && fmt.Sprint(target) != fmt.Sprint(port) {
		t.Errorf("the check's Service targets %v, not the check's port %v", target, port)
	}
}

// TestChartClaimsWhatTheTestsRun: the chart installs on the oldest
// Kubernetes make test runs (its second pass, OLDEST_KUBERNETES in the
// Makefile) and on the newest, and refuses the minor before the oldest;
// the README's table names both.
func TestChartClaimsWhatTheTestsRun(t *testing.T) {
	var minor, patch int
	if _, err := fmt.Sscanf(testworld.OldestKubernetes, "v1.%d.%d", &minor, &patch); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{testworld.OldestKubernetes + "-gke.1000", testworld.NewestKubernetes, fmt.Sprintf("v1.%d.0", minor)} {
		if _, err := helmTemplate(t, "--kube-version", v); err != nil {
			t.Errorf("helm template for Kubernetes %s: %v, want it rendered", v, err)
		}
	}
	older := fmt.Sprintf("v1.%d.99", minor-1)
	if _, err := helmTemplate(t, "--kube-version", older); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("helm template for Kubernetes %s: %v, want it refused for the chart's kubeVersion", older, err)
	}
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nOLDEST_KUBERNETES ?= " + testworld.OldestKubernetes + "\n"; !strings.Contains(string(makefile), want) {
		t.Errorf("the Makefile's second pass does not run on %s: want %q", testworld.OldestKubernetes, strings.TrimSpace(want))
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{testworld.OldestKubernetes, testworld.NewestKubernetes} {
		if !strings.Contains(string(readme), "| "+strings.TrimPrefix(v, "v")+" |") {
			t.Errorf("the README's compatibility table has no row for Kubernetes %s", v)
		}
	}
}

// criticalQuotas is, for each namespace of o holding a quota for critical
// pods, the priority classes its scope names.
func criticalQuotas(t testing.TB, o map[string]*unstructured.Unstructured) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, obj := range o {
		if obj.GetKind() != "ResourceQuota" {
			continue
		}
		for _, e := range field(t, obj, "spec", "scopeSelector", "matchExpressions").([]any) {
			m := e.(map[string]any)
			if m["scopeName"] == "PriorityClass" && m["operator"] == "In" {
				out[obj.GetNamespace()] = append(out[obj.GetNamespace()], anyStrings(m["values"])...)
			}
		}
	}
	return out
}

// TestChartQuotasTheCriticalClasses: pods at the critical priority classes
// are created on GKE only in a namespace with a quota naming their class,
// so the chart makes one where its pods run at such a class, naming the
// classes they run at, and none where they don't.
func TestChartQuotasTheCriticalClasses(t *testing.T) {
	const ns, ans = "maintenance-handler", "maintenance-handler-agent"
	for _, tc := range []struct {
		name string
		set  []string
		want map[string][]string
	}{
		{"default", nil, map[string][]string{ans: {"system-node-critical"}, ns: {"system-cluster-critical"}}},
		{"one namespace for both", []string{"--set", "agent.namespace.name=" + ns, "--set", "agent.namespace.create=false"},
			map[string][]string{ns: {"system-cluster-critical", "system-node-critical"}}},
		{"the agent at a class of its own", []string{"--set", "agent.priorityClassName=gpu-critical"},
			map[string][]string{ns: {"system-cluster-critical"}}},
		{"neither at a critical class", []string{"--set", "agent.priorityClassName=gpu-critical", "--set", "aggregator.priorityClassName="},
			map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, criticalQuotas(t, mustTemplate(t, tc.set...))); d != "" {
				t.Errorf("the critical classes each namespace's quota names (-want +got):\n%s", d)
			}
		})
	}
}
