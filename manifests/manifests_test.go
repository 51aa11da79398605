package manifests_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/agent"
	"github.com/maintenance-handler/maintenance-handler/internal/testworld"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(testworld.RunMain(m, &world)) }

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// objects reads every object the kustomization lists.
func objects(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	var k struct {
		Resources []string `json:"resources"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, file := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if obj != nil {
				out = append(out, &unstructured.Unstructured{Object: obj})
			}
		}
	}
	return out
}

// apply server-side applies every object, as kubectl apply --server-side
// -k would, and deletes them when the test ends.
func apply(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(world.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(world.Client.Discovery()))
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk.Kind, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		force := true
		if _, err := ri.Patch(ctxFor(t, 30*time.Second), obj.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: "maintenance-handler-test", Force: &force}); err != nil {
			t.Fatalf("apply %s %s: %v", gvk.Kind, obj.GetName(), err)
		}
		t.Cleanup(func() { _ = ri.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
	}
}

// TestManifestsApplyAndTheAgentTouchesOnlyItsOwnNode: the base applies with
// server-side apply; the DaemonSet's pods land only on accelerator nodes;
// with a token bound to the agent pod on node A, the real admission chain
// (RBAC and the ValidatingAdmissionPolicy) lets it change node A's own keys
// and nothing else.
func TestManifestsApplyAndTheAgentTouchesOnlyItsOwnNode(t *testing.T) {
	const ns = "maintenance-handler"
	world.NodeT(t, testworld.NodeSpec{Name: "rbac-gpu-a"})
	world.NodeT(t, testworld.NodeSpec{Name: "rbac-tpu-b", TPU: true})
	world.NodeT(t, testworld.NodeSpec{Name: "rbac-plain"})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(ctxFor(t, 10*time.Second), "rbac-plain", metav1.GetOptions{})
		if err != nil {
			return err
		}
		delete(n.Labels, testworld.LabelGPUAccelerator)
		_, err = world.Client.CoreV1().Nodes().Update(ctxFor(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, objects(t, "base"))

	// The DaemonSet: on the two accelerator nodes, not on the plain one.
	var pods []corev1.Pod
	err = wait.PollUntilContextTimeout(ctxFor(t, 90*time.Second), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := world.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
		if err != nil {
			return false, nil
		}
		pods = list.Items
		on := map[string]bool{}
		for _, p := range pods {
			on[p.Spec.NodeName] = p.Status.Phase == corev1.PodRunning
		}
		return on["rbac-gpu-a"] && on["rbac-tpu-b"], nil
	})
	if err != nil {
		t.Fatalf("agent pods never ran on both accelerator nodes: %d pods", len(pods))
	}
	var podA *corev1.Pod
	for i, p := range pods {
		if p.Spec.NodeName == "rbac-plain" {
			t.Errorf("an agent pod landed on a node without accelerators: %s", p.Name)
		}
		if p.Spec.NodeName == "rbac-gpu-a" {
			podA = &pods[i]
		}
	}

	// A token bound to the agent pod on node A, as the kubelet mounts it.
	tr, err := world.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctxFor(t, 10*time.Second), "maintenance-handler-agent", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: podA.Name, UID: podA.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	as, err := kubernetes.NewForConfig(world.ConfigForToken(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	update := func(node string, change func(*corev1.Node)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := as.CoreV1().Nodes().Get(ctxFor(t, 10*time.Second), node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(n)
			_, err = as.CoreV1().Nodes().Update(ctxFor(t, 10*time.Second), n, metav1.UpdateOptions{})
			return err
		})
	}
	// Its own node, its own keys: allowed.
	err = update("rbac-gpu-a", func(n *corev1.Node) {
		n.Labels[agent.LabelActiveMaintenance] = agent.ValueOngoing
		n.Annotations[agent.AnnotationPhase] = "Draining"
		n.Annotations[agent.AnnotationUpcomingMaintenance] = `{"maintenance_status":"PENDING"}`
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: agent.TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule})
		n.Spec.Unschedulable = true
	})
	if err != nil {
		t.Errorf("the agent could not change its own node's keys: %v", err)
	}
	denied := func(what string, err error, says string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want denied saying %q", what, err, says)
		}
	}
	denied("another node", update("rbac-tpu-b", func(n *corev1.Node) { n.Labels[agent.LabelActiveMaintenance] = agent.ValueOngoing }),
		"only its own Node (rbac-gpu-a), not rbac-tpu-b")
	denied("a label it does not own", update("rbac-gpu-a", func(n *corev1.Node) { n.Labels["team"] = "mine" }), "only its own labels")
	denied("an annotation it does not own", update("rbac-gpu-a", func(n *corev1.Node) { n.Annotations["example.com/owner"] = "me" }), "only its own annotations")
	denied("a taint it does not own", update("rbac-gpu-a", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/mine", Effect: corev1.TaintEffectNoExecute})
	}), "only its own taint")
	denied("deleting its node", as.CoreV1().Nodes().Delete(ctxFor(t, 10*time.Second), "rbac-gpu-a", metav1.DeleteOptions{}), "forbidden")

	// What the drain needs: list pods, evict one.
	if _, err := as.CoreV1().Pods("").List(ctxFor(t, 10*time.Second), metav1.ListOptions{FieldSelector: "spec.nodeName=rbac-gpu-a"}); err != nil {
		t.Errorf("list pods: %v", err)
	}
	victim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "rbac-gpu-a", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
	if _, err := world.Client.CoreV1().Pods("default").Create(ctxFor(t, 10*time.Second), victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().Pods("default").Delete(context.Background(), "victim", metav1.DeleteOptions{})
	})
	if err := as.PolicyV1().Evictions("default").Evict(ctxFor(t, 10*time.Second), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: "default"}}); err != nil {
		t.Errorf("evict: %v", err)
	}

	// Nothing else.
	checkAccess(t, as, []access{
		{"get", "", "nodes", "", "", true},
		{"update", "", "nodes", "", "", true},
		{"list", "", "pods", "", "", true},
		{"create", "", "pods", "default", "eviction", true},
		{"create", "", "events", "default", "", true},
		{"patch", "", "nodes", "", "", false},
		{"update", "", "nodes", "", "status", false},
		{"delete", "", "nodes", "", "", false},
		{"create", "", "pods", "default", "", false},
		{"get", "", "secrets", "default", "", false},
		{"list", "", "configmaps", "default", "", false},
		{"update", "apps", "daemonsets", ns, "", false},
		{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", false},
		{"update", "admissionregistration.k8s.io", "validatingadmissionpolicies", "", "", false},
	})

	// The aggregator: what it needs, and no more.
	tr, err = world.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctxFor(t, 10*time.Second), "maintenance-handler-aggregator", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agg, err := kubernetes.NewForConfig(world.ConfigForToken(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	checkAccess(t, agg, []access{
		{"list", "", "nodes", "", "", true},
		{"watch", "", "nodes", "", "", true},
		{"update", "", "nodes", "", "", true},
		{"create", "", "events", "default", "", true},
		{"create", "coordination.k8s.io", "leases", ns, "", true},
		{"get", "coordination.k8s.io", "leases", ns, "", false}, // only its own Lease, by name (below)
		{"delete", "", "nodes", "", "", false},
		{"list", "", "pods", "", "", false},
		{"create", "", "pods", "default", "eviction", false},
		{"get", "", "secrets", ns, "", false},
		{"create", "coordination.k8s.io", "leases", "kube-system", "", false},
		{"update", "apps", "deployments", ns, "", false},
	})
	r, err := agg.AuthorizationV1().SelfSubjectAccessReviews().Create(ctxFor(t, 10*time.Second), &authzv1.SelfSubjectAccessReview{
		Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
			Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: "maintenance-handler-aggregator"}},
	}, metav1.CreateOptions{})
	if err != nil || !r.Status.Allowed {
		t.Errorf("the aggregator cannot update its Lease: %v %+v", err, r.Status)
	}
}

type access struct {
	verb, group, resource, ns, sub string
	want                           bool
}

// checkAccess asks the API server, as c, whether each access is allowed.
func checkAccess(t *testing.T, c kubernetes.Interface, accesses []access) {
	t.Helper()
	for _, a := range accesses {
		r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctxFor(t, 10*time.Second), &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.ns, Subresource: a.sub}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != a.want {
			t.Errorf("%s %s/%s %s in %q: allowed %t, want %t", a.verb, a.group, a.resource, a.sub, a.ns, r.Status.Allowed, a.want)
		}
	}
}
