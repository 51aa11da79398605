package testworld

// The product's binaries run in the world with the identities and
// permissions they ship with (manifests/base), never as the admin: a
// permission a binary lacks in a real cluster fails its test here too.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// Shipped names: the namespaces and service accounts manifests/base
// installs (the aggregator's in ShippedNamespace, the agent's in a
// namespace of its own), and the Roles of the same names, in
// ShippedNamespace, that hold what each reads there.
const (
	ShippedNamespace      = "maintenance-handler"
	ShippedAgentNamespace = "maintenance-handler-agent"
	AgentIdentity         = "maintenance-handler-agent"
	AggregatorIdentity    = "maintenance-handler-aggregator"
)

// shippedAccountNamespace is the namespace of the shipped service account
// sa.
func shippedAccountNamespace(sa string) string {
	if sa == AgentIdentity {
		return ShippedAgentNamespace
	}
	return ShippedNamespace
}

// ErrAdminIdentity: a product binary was to run with the admin's
// credentials (or none named, which falls back to them).
var ErrAdminIdentity = errors.New("a product binary must run with the identity it ships with, not the test world's admin (see AgentKubeconfig, AggregatorKubeconfig)")

// productBinaries are the binaries that ship with their own identity; a
// person runs the kubectl plugin as whoever they are.
var productBinaries = []string{"agent", "aggregator"}

// notApplied are the kinds of manifests/base the world does not install:
// the workloads (the tests run the binaries themselves), their Services and
// budget, and the eviction check's webhook, which a test that runs the
// check installs pointing at it.
var notApplied = []string{"Deployment", "DaemonSet", "Service", "PodDisruptionBudget", "ValidatingWebhookConfiguration"}

// installShipped applies, once per world, the namespace, service accounts,
// RBAC and the admission policies that hold the product's service accounts
// (ownPolicies) of manifests/base, as `kubectl apply -k` would.
func (w *World) installShipped(ctx context.Context) error {
	w.shippedOnce.Do(func() { w.shippedErr = w.applyShipped(ctx) })
	return w.shippedErr
}

func (w *World) applyShipped(ctx context.Context) error {
	objs, err := shippedObjects(ctx)
	if err != nil {
		return err
	}
	return w.create(ctx, ownPolicies(objs))
}

// shippedObjects are the objects of manifests/base the world installs
// (not notApplied), the namespace first, then what lives in it.
func shippedObjects(ctx context.Context) ([]*unstructured.Unstructured, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(root, "manifests", "base", "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s/manifests/base", root)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			o := &unstructured.Unstructured{}
			if err := dec.Decode(&o.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if len(o.Object) > 0 && !slices.Contains(notApplied, o.GetKind()) {
				objs = append(objs, o)
			}
		}
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return cmp.Compare(kindOrder(b), kindOrder(a))
	})
	return objs, nil
}

// create makes each of objs in the world (one that exists is left as it
// is).
func (w *World) create(ctx context.Context, objs []*unstructured.Unstructured) error {
	return w.eachResource(objs, func(ri dynamic.ResourceInterface, o *unstructured.Unstructured) error {
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("install %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		return nil
	})
}

// remove deletes each of objs from the world (one that is gone is fine).
func (w *World) remove(ctx context.Context, objs []*unstructured.Unstructured) error {
	return w.eachResource(objs, func(ri dynamic.ResourceInterface, o *unstructured.Unstructured) error {
		if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		return nil
	})
}

// eachResource calls do with each of objs and the client of its resource,
// until one fails.
func (w *World) eachResource(objs []*unstructured.Unstructured, do func(dynamic.ResourceInterface, *unstructured.Unstructured) error) error {
	dyn, err := dynamic.NewForConfig(w.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(w.Client.Discovery()))
	for _, o := range objs {
		ri, err := resourceOf(dyn, mapper, o)
		if err != nil {
			return err
		}
		if err := do(ri, o); err != nil {
			return err
		}
	}
	return nil
}

// resourceOf is the client of o's resource (in its namespace).
func resourceOf(dyn dynamic.Interface, mapper meta.RESTMapper, o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("install %s %s: %w", gvk.Kind, o.GetName(), err)
	}
	if ns := o.GetNamespace(); ns != "" {
		return dyn.Resource(mapping.Resource).Namespace(ns), nil
	}
	return dyn.Resource(mapping.Resource), nil
}

// kindOrder puts a Namespace before what lives in it.
func kindOrder(o *unstructured.Unstructured) int {
	if o.GetKind() == "Namespace" {
		return 1
	}
	return 0
}

// ownPolicies is objs without the admission policies (and their
// bindings) that do not select one of the product's service accounts
// (a matchCondition on its name): those
// that pin the product's Events to it and fence kubelets' writes of its
// keys would also hold the tests' own admin, which writes Events and Nodes
// in the product's name to set scenes. The manifests' tests install them.
func ownPolicies(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	kept := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() != "ValidatingAdmissionPolicy" {
			continue
		}
		conditions, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
		for _, c := range conditions {
			e, _ := c.(map[string]any)["expression"].(string)
			for _, ns := range []string{ShippedNamespace, ShippedAgentNamespace} {
				if strings.HasPrefix(strings.TrimSpace(e), `request.userInfo.username == "system:serviceaccount:`+ns+":") {
					kept[o.GetName()] = true
				}
			}
		}
	}
	return slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy":
			return !kept[o.GetName()]
		case "ValidatingAdmissionPolicyBinding":
			policy, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
			return !kept[policy]
		}
		return false
	})
}

// AgentKubeconfig installs the shipped identities (once) and writes a
// kubeconfig for the agent of node: the agent's service account, with a
// token bound to the Node, which carries the node's name as the token the
// kubelet mounts into the agent's pod does (the admission policies read
// it). args is the agent's command line: the namespace of the policy
// ConfigMap it names (--policy-configmap) is given the agent's shipped
// Role.
func (w *World) AgentKubeconfig(ctx context.Context, node string, args ...string) (string, error) {
	if err := w.installShipped(ctx); err != nil {
		return "", err
	}
	for _, ns := range policyNamespaces(args) {
		if err := w.grantShippedRole(ctx, ns, AgentIdentity); err != nil {
			return "", err
		}
	}
	n, err := w.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// An agent started before its Node exists: a token bound to no
		// node, which reads as the agent's and writes nothing (the
		// policies refuse a token that names no node).
		return w.identityKubeconfig(ctx, AgentIdentity, nil)
	case err != nil:
		return "", fmt.Errorf("the agent's token: %w", err)
	}
	return w.identityKubeconfig(ctx, AgentIdentity, &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID})
}

// AggregatorKubeconfig installs the shipped identities (once) and writes a
// kubeconfig for the aggregator's service account, whose shipped Role
// (its Leases, policy ConfigMap and the eviction check's Secret, by their
// shipped names) is given it in ns too, the namespace it runs in.
func (w *World) AggregatorKubeconfig(ctx context.Context, ns string) (string, error) {
	if err := w.installShipped(ctx); err != nil {
		return "", err
	}
	if err := w.grantShippedRole(ctx, ns, AggregatorIdentity); err != nil {
		return "", err
	}
	return w.identityKubeconfig(ctx, AggregatorIdentity, nil)
}

// grantShippedRole copies the shipped Role name into ns and binds it to the
// shipped service account of that name, as installing the product in ns
// would.
func (w *World) grantShippedRole(ctx context.Context, ns, name string) error {
	if ns == ShippedNamespace {
		return nil
	}
	role, err := w.Client.RbacV1().Roles(ShippedNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the shipped Role %s: %w", name, err)
	}
	copied := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: role.Rules}
	if _, err := w.Client.RbacV1().Roles(ns).Create(ctx, copied, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: shippedAccountNamespace(name)}}}
	if _, err := w.Client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

var identitySeq atomic.Int64

// identityKubeconfig mints a token for the shipped service account sa
// (bound to bound, if set; valid for a week, longer than any test or a
// demo left running) and writes a kubeconfig holding it.
func (w *World) identityKubeconfig(ctx context.Context, sa string, bound *authnv1.BoundObjectReference) (string, error) {
	week := int64(7 * 24 * 3600)
	tr, err := w.Client.CoreV1().ServiceAccounts(shippedAccountNamespace(sa)).CreateToken(ctx, sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &week, BoundObjectRef: bound}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token for %s: %w", sa, err)
	}
	dir := filepath.Join(w.TempDir, "identities")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.kubeconfig", sa, identitySeq.Add(1)))
	return path, WriteKubeconfig(path, w.ConfigForToken(tr.Status.Token))
}

// policyNamespaces are the namespaces of the policy ConfigMaps args name
// (--policy-configmap namespace/name).
func policyNamespaces(args []string) []string {
	var out []string
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--policy-configmap=")
		if !ok && a == "--policy-configmap" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ns, _, found := strings.Cut(v, "/"); ok && found {
			out = append(out, ns)
		}
	}
	return out
}

// ProductCommand is exec.Command(bin, args...) for a test that runs a
// product binary itself: refused with ErrAdminIdentity where
// StartProcess would refuse it.
func ProductCommand(bin string, args ...string) (*exec.Cmd, error) {
	if err := refuseAdmin(bin, args, nil); err != nil {
		return nil, err
	}
	return exec.Command(bin, args...), nil
}

// refuseAdmin: bin, a product binary, would run with the admin's
// credentials: its --kubeconfig (or $KUBECONFIG in env) names none, or one
// holding the admin's token.
func refuseAdmin(bin string, args, env []string) error {
	if !slices.Contains(productBinaries, filepath.Base(bin)) {
		return nil
	}
	path := ""
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--kubeconfig="); ok {
			path = v
		} else if a == "--kubeconfig" && i+1 < len(args) {
			path = args[i+1]
		}
	}
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "KUBECONFIG="); ok && path == "" {
			path = v
		}
	}
	if path == "" {
		return fmt.Errorf("%s with no --kubeconfig: %w", filepath.Base(bin), ErrAdminIdentity)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return fmt.Errorf("%s: its kubeconfig %s: %w", filepath.Base(bin), path, err)
	}
	if cfg.BearerToken == adminToken || cfg.BearerToken == "" && cfg.BearerTokenFile == "" && cfg.CertFile == "" && len(cfg.CertData) == 0 {
		return fmt.Errorf("%s with %s: %w", filepath.Base(bin), path, ErrAdminIdentity)
	}
	return nil
}

// AggregatorKubeconfigT is AggregatorKubeconfig for a test, which fails if
// the identity cannot be made.
func (w *World) AggregatorKubeconfigT(tb testing.TB, ns string) string {
	tb.Helper()
	path, err := w.AggregatorKubeconfig(Ctx(tb, 30*time.Second), ns)
	if err != nil {
		tb.Fatal(err)
	}
	return path
}
