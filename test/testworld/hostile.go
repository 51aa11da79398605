package testworld

// One hostile node: every identity a compromised node holds, as clients a
// test can attack the cluster with. A node holds its kubelet's credentials
// and can have a token minted for any service account whose pod is bound
// to it (the kubelet asks for those tokens), so the three identities here
// are what an attacker on that node has without taking anything else.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// NodeWriterAccount is the name of the service account (and of its
// ClusterRole) HostileNode gives Node write to, as a CNI or device plugin
// DaemonSet's account has.
const NodeWriterAccount = "hostile-node-writer"

// Hostile is one node's three identities, each a clientset and the config
// behind it.
type Hostile struct {
	// Node is the name of the node that holds them.
	Node string
	// Agent is the shipped agent service account, with a token bound to a
	// pod on Node (it carries the node-name claim, as the token the kubelet
	// mounts into the agent's pod does).
	Agent       kubernetes.Interface
	AgentConfig *rest.Config
	// Kubelet is Node's kubelet: system:node:NAME in system:nodes, under
	// the Node authorizer and NodeRestriction.
	Kubelet       kubernetes.Interface
	KubeletConfig *rest.Config
	// DaemonSet is a service account of another component with Node write
	// (nodes and nodes/status get, list, watch, update, patch), its token
	// bound to a pod on Node. Its username is DaemonSetUser.
	DaemonSet       kubernetes.Interface
	DaemonSetConfig *rest.Config
	DaemonSetUser   string
}

// HostileNode gives a test the three identities node name holds (see
// Hostile). The Node must exist. Its pods, the node-writer account's
// namespace and its cluster-wide RBAC are removed when tb ends.
func (w *World) HostileNode(tb testing.TB, name string) *Hostile {
	tb.Helper()
	ctx := Ctx(tb, 2*time.Minute)
	if err := w.installShipped(ctx); err != nil {
		tb.Fatal(err)
	}
	h := &Hostile{Node: name}
	var err error
	if h.KubeletConfig, err = w.ConfigForNode(tb.TempDir(), name); err != nil {
		tb.Fatalf("the kubelet's identity of %s: %v", name, err)
	}
	agentToken := w.podBoundToken(tb, ctx, ShippedAgentNamespace, AgentIdentity, name)
	h.AgentConfig = w.ConfigForToken(agentToken)

	ns := w.Namespace(tb)
	h.DaemonSetUser = "system:serviceaccount:" + ns + ":" + NodeWriterAccount
	w.nodeWriter(tb, ctx, ns)
	h.DaemonSetConfig = w.ConfigForToken(w.podBoundToken(tb, ctx, ns, NodeWriterAccount, name))

	for _, c := range []struct {
		cfg *rest.Config
		out *kubernetes.Interface
	}{{h.AgentConfig, &h.Agent}, {h.KubeletConfig, &h.Kubelet}, {h.DaemonSetConfig, &h.DaemonSet}} {
		cs, err := kubernetes.NewForConfig(c.cfg)
		if err != nil {
			tb.Fatal(err)
		}
		*c.out = cs
	}
	return h
}

// ShippedFences installs the admission policies of manifests/base that
// the world leaves out (those that hold every identity to a key's writer:
// see ownPolicies), so that h's node meets the fences as in a real
// cluster, and waits until they are in force. From then until tb ends,
// the test's admin is a person to them: it may not write a key only an
// agent or the aggregator writes. They are removed when tb ends, and the
// next test starts once they are lifted.
func (w *World) ShippedFences(tb testing.TB, h *Hostile) {
	tb.Helper()
	ctx := Ctx(tb, 2*time.Minute)
	objs, err := shippedObjects(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	kept := ownPolicies(slices.Clone(objs))
	fences := slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool {
		return !strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") || slices.ContainsFunc(kept, func(k *unstructured.Unstructured) bool {
			return k.GetKind() == o.GetKind() && k.GetName() == o.GetName()
		})
	})
	tb.Cleanup(func() {
		ctx := Ctx(tb, 2*time.Minute)
		if err := w.remove(ctx, fences); err != nil {
			tb.Errorf("removing the fences: %v", err)
			return
		}
		if err := h.awaitFences(ctx, false); err != nil {
			tb.Errorf("the fences were never lifted: %v", err)
		}
	})
	if err := w.create(ctx, fences); err != nil {
		tb.Fatal(err)
	}
	if err := h.awaitFences(ctx, true); err != nil {
		tb.Fatalf("the shipped admission policies never took effect for %s: %v", h.Node, err)
	}
}

// awaitFences waits until the fences are in force (or, !in, lifted): the
// API server takes a policy up, or lets it go, a moment after it is
// written, and no watch says when. The probe is the node-writer account's
// write of the aggregator's vm-facts on its own Node, a dry run that
// changes nothing.
func (h *Hostile) awaitFences(ctx context.Context, in bool) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, protocol.AnnotationVMFacts, `{"id":"fence-probe"}`)
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := h.DaemonSet.CoreV1().Nodes().Patch(ctx, h.Node, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		refused := apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
		return refused == in && (refused || err == nil), nil
	})
}

// nodeWriter makes, in ns, the service account NodeWriterAccount and binds
// it a ClusterRole with Node write, removed when tb ends.
func (w *World) nodeWriter(tb testing.TB, ctx context.Context, ns string) {
	tb.Helper()
	if _, err := w.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: NodeWriterAccount}}, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("the node writer's service account: %v", err)
	}
	w.grantNodeWrite(tb, ctx, NodeWriterAccount+"-"+ns, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: NodeWriterAccount, Namespace: ns})
}

// grantNodeWrite binds subject a ClusterRole with Node write, both named
// name, removed when tb ends.
func (w *World) grantNodeWrite(tb testing.TB, ctx context.Context, name string, subject rbacv1.Subject) {
	tb.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"},
		Verbs: []string{"get", "list", "watch", "update", "patch"}}}}
	if _, err := w.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("the node writer's ClusterRole: %v", err)
	}
	tb.Cleanup(func() {
		_ = ignoreNotFound(w.Client.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}))
	})
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{subject}}
	if _, err := w.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("the node writer's ClusterRoleBinding: %v", err)
	}
	tb.Cleanup(func() {
		_ = ignoreNotFound(w.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{}))
	})
}

// podBoundToken binds a pod of service account sa (in ns) to node and
// returns a token for sa bound to that pod, as the kubelet asks for the
// pod's projected token. The pod is deleted when tb ends, which also
// invalidates the token.
func (w *World) podBoundToken(tb testing.TB, ctx context.Context, ns, sa, node string) string {
	tb.Helper()
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: sa + "-", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: sa,
			// As a DaemonSet's pod: it stays on its node whatever the taints.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no,
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					RunAsNonRoot:   func() *bool { b := true; return &b }(),
					RunAsUser:      func() *int64 { u := int64(65532); return &u }(),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}},
		},
	}
	created, err := w.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("a pod of %s/%s on %s: %v", ns, sa, node, err)
	}
	tb.Cleanup(func() {
		zero := int64(0)
		_ = ignoreNotFound(w.Client.CoreV1().Pods(ns).Delete(context.Background(), created.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	})
	hour := int64(3600)
	tr, err := w.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		ExpirationSeconds: &hour,
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: created.Name, UID: created.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("a token for %s/%s bound to pod %s: %v", ns, sa, created.Name, err)
	}
	return tr.Status.Token
}
