package manifests_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maintenance-handler/maintenance-handler/internal/generate"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// fence is who a policy lets set and remove one key.
type fence struct{ Kind, Set, Removers string }

var (
	// fenceKeys is the list of keys a validation of the writers' policy
	// names; fenceWho the lists of classes it lets change them (its
	// setters, then its removers).
	fenceKeys = regexp.MustCompile(`in (\[[^\]]*\])`)
	fenceWho  = regexp.MustCompile(`(\[[^\]]*\])\.exists\(w, variables\.who\[w\]\)`)
)

// celStrings are the strings of a CEL list literal of quoted strings.
func celStrings(list string) []string {
	var out []string
	for _, s := range strings.Split(strings.Trim(list, "[]"), ", ") {
		if s = strings.Trim(s, "'"); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// policyFences reads, from the writers' policy p, who it lets set and
// remove each key it names.
func policyFences(t *testing.T, p *unstructured.Unstructured) map[string]fence {
	t.Helper()
	validations, _, _ := unstructured.NestedSlice(p.Object, "spec", "validations")
	got := map[string]fence{}
	for _, v := range validations {
		e := v.(map[string]any)["expression"].(string)
		keys, who := fenceKeys.FindStringSubmatch(e), fenceWho.FindAllStringSubmatch(e, -1)
		if keys == nil || len(who) < 2 {
			continue // the product's unlisted keys, the detectors' conditions
		}
		kind := ""
		for _, k := range []struct{ word, kind string }{{"Labels", "label"}, {"Annotations", "annotation"}, {"Taints", "taint"}, {"Conditions", "condition"}} {
			if strings.Contains(e, "variables.new"+k.word) {
				kind = k.kind
			}
		}
		for _, k := range celStrings(keys[1]) {
			if _, twice := got[k]; twice {
				t.Errorf("%s is fenced twice", k)
			}
			got[k] = fence{kind, strings.Join(celStrings(who[0][1]), ","), strings.Join(celStrings(who[1][1]), ",")}
		}
	}
	return got
}

// TestKeyWritersPolicyFollowsTheTable: the base's writers' policy fences
// every Node key of the protocol (and the aggregator's taints' earlier
// keys) for exactly the identities the table lets set and remove it; its
// classes name the shipped service accounts.
func TestKeyWritersPolicyFollowsTheTable(t *testing.T) {
	p := kinds(render(t, "base"))["ValidatingAdmissionPolicy /"+generate.WritersPolicy]
	if p == nil {
		t.Fatalf("the base has no policy %s", generate.WritersPolicy)
	}
	want := map[string]fence{}
	for _, k := range protocol.NodeKeys() {
		want[k.Name] = fence{string(k.Kind), protocol.WhoList(k.Setters()), protocol.WhoList(k.Removers())}
	}
	for old := range protocol.RenamedTaints {
		k := protocol.Key{Name: old, Kind: protocol.Taint, Writer: protocol.Aggregator}
		want[old] = fence{string(k.Kind), protocol.WhoList(k.Setters()), protocol.WhoList(k.Removers())}
	}
	if diff := cmp.Diff(want, policyFences(t, p)); diff != "" {
		t.Errorf("the policy's fences differ from the protocol's table (-table +policy):\n%s", diff)
	}
	who := policyVariable(t, generate.WritersPolicy, "who")
	for _, user := range []string{"system:serviceaccount:maintenance-handler-agent:maintenance-handler-agent",
		"system:serviceaccount:maintenance-handler:maintenance-handler-aggregator",
		"system:serviceaccount:maintenance-handler:maintenance-handler-uninstall"} {
		if !strings.Contains(who, "'"+user+"'") {
			t.Errorf("the policy's classes do not name %s: %s", user, who)
		}
	}
	// Every class a key's row names is one the policy tells apart.
	for _, k := range protocol.NodeKeys() {
		for _, w := range slices.Concat(k.Setters(), k.Removers()) {
			if !strings.Contains(who, "'"+string(w)+"':") {
				t.Errorf("%s: the policy has no class %s", k.Name, w)
			}
		}
	}
}

// writersVariable is the expression of the variable name of the writers'
// policy among objs.
func writersVariable(t testing.TB, objs map[string]*unstructured.Unstructured, name string) string {
	t.Helper()
	p := objs["ValidatingAdmissionPolicy /"+generate.WritersPolicy]
	if p == nil {
		t.Fatalf("no policy %s", generate.WritersPolicy)
	}
	variables, _, _ := unstructured.NestedSlice(p.Object, "spec", "variables")
	for _, v := range variables {
		if v := v.(map[string]any); v["name"] == name {
			return v["expression"].(string)
		}
	}
	t.Fatalf("the policy %s has no variable %s", generate.WritersPolicy, name)
	return ""
}

// TestKeyWritersPolicyNamesTheDetectors: the detectors' conditions are
// those admissionPolicy.detectorConditions and the fault policies name, and
// only admissionPolicy.detectors (node-problem-detector's account by
// default) may write them.
func TestKeyWritersPolicyNamesTheDetectors(t *testing.T) {
	def := mustTemplate(t)
	if got, want := writersVariable(t, def, "detectors"), "['system:serviceaccount:kube-system:node-problem-detector']"; got != want {
		t.Errorf("the default detectors are %s, want %s", got, want)
	}
	if got := writersVariable(t, def, "detectorConditions"); got != "[]" {
		t.Errorf("the default detectors' conditions are %s, want none", got)
	}
	set := mustTemplate(t, "--set", "admissionPolicy.detectorConditions={GPUSlow,example.com/Burnin}",
		"--set", "admissionPolicy.detectors={system:serviceaccount:dcgm:exporter}",
		"--set-json", `policy={"cluster":{"faults":{"conditions":[{"type":"GPUSlow","behavior":"PERFORMANCE"}]}},"pools":{"a3":{"faults":{"conditions":[{"type":"GPUUnhealthy","behavior":"UNRECOVERABLE_GPU_ERROR"}]}}}}`)
	if got, want := writersVariable(t, set, "detectorConditions"), "['GPUSlow', 'example.com/Burnin', 'GPUUnhealthy']"; got != want {
		t.Errorf("the detectors' conditions are %s, want %s", got, want)
	}
	if got, want := writersVariable(t, set, "detectors"), "['system:serviceaccount:dcgm:exporter']"; got != want {
		t.Errorf("the detectors are %s, want %s", got, want)
	}
}

// TestKeyWritersPolicyNamesThePeople: a person is no node's kubelet, and
// either an account or Google identity admissionPolicy.people names or a
// user with neither a node-name claim nor a service account's or Google
// identity's name; none is named by default.
func TestKeyWritersPolicyNamesThePeople(t *testing.T) {
	def := mustTemplate(t)
	if got := writersVariable(t, def, "people"); got != "[]" {
		t.Errorf("the default people are %s, want none", got)
	}
	person := regexp.MustCompile(`(?s)'person': (.*?),\s*'registration'`).FindStringSubmatch(writersVariable(t, def, "who"))
	want := "!variables.user.startsWith('system:node:') && " +
		"(variables.user in variables.people || variables.claim == '' && !variables.user.startsWith('system:serviceaccount:') && !variables.google)"
	if person == nil || strings.Join(strings.Fields(person[1]), " ") != want {
		t.Errorf("the class person is %q, want %q", person, want)
	}
	google := "variables.user.lowerAscii().endsWith('.gserviceaccount.com') || " +
		"variables.user.lowerAscii().startsWith('principal://') || variables.user.lowerAscii().startsWith('principalset://')"
	if got := writersVariable(t, def, "google"); got != google {
		t.Errorf("the Google identities are %q, want %q", got, google)
	}
	set := mustTemplate(t, "--set", "admissionPolicy.people.serviceAccounts={ops/maintainer,kube-system/scheduler-plugins}",
		"--set", "admissionPolicy.people.googleIdentities={ops@p.iam.gserviceaccount.com,principal://iam.googleapis.com/locations/global/workforcePools/ops/subject/ana}")
	if got, want := writersVariable(t, set, "people"), "['system:serviceaccount:ops:maintainer', 'system:serviceaccount:kube-system:scheduler-plugins', "+
		"'ops@p.iam.gserviceaccount.com', 'principal://iam.googleapis.com/locations/global/workforcePools/ops/subject/ana']"; got != want {
		t.Errorf("the people are %s, want %s", got, want)
	}
}

// TestFaultConditionsPolicyReadsTheConfigMap: the base fences the fault
// conditions of the very ConfigMap the aggregator reads (its --config-map,
// in its namespace), lets every change through where there is none, and
// tells identities apart as the writers' policy does.
func TestFaultConditionsPolicyReadsTheConfigMap(t *testing.T) {
	objs := kinds(render(t, "base"))
	binding := objs["ValidatingAdmissionPolicyBinding /"+generate.FaultConditionsPolicy]
	if binding == nil {
		t.Fatalf("the base has no binding %s", generate.FaultConditionsPolicy)
	}
	ref, _, _ := unstructured.NestedStringMap(binding.Object, "spec", "paramRef")
	var configMap string
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, "--config-map="); ok {
					configMap = o.GetNamespace() + "/" + v
				}
			}
		}
	}
	if got := ref["namespace"] + "/" + ref["name"]; got != configMap || ref["parameterNotFoundAction"] != "Allow" {
		t.Errorf("the binding reads %s (not found: %s); want the aggregator's ConfigMap %s, and Allow", got, ref["parameterNotFoundAction"], configMap)
	}
	if kind, _, _ := unstructured.NestedString(objs["ValidatingAdmissionPolicy /"+generate.FaultConditionsPolicy].Object, "spec", "paramKind", "kind"); kind != "ConfigMap" {
		t.Errorf("the policy's parameter is a %q, want a ConfigMap", kind)
	}
	for _, v := range []string{"who", "detectors", "people", "google"} {
		if w, f := writersVariable(t, objs, v), policyVariable(t, generate.FaultConditionsPolicy, v); w != f {
			t.Errorf("the variable %s differs between the policies:\n%s\n%s", v, w, f)
		}
	}
}
