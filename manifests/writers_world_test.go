package manifests_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maintenance-handler/maintenance-handler/internal/generate"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// clientFor is a clientset of the identity kubeconfig holds.
func clientFor(t testing.TB, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refused: err is the API server's refusal (an admission policy's 422, or
// the authorizer's or NodeRestriction's 403), not another failure.
func refused(err error) bool {
	return err != nil && (apierrors.IsInvalid(err) || apierrors.IsForbidden(err))
}

// patchKey sets (value non-nil) or removes key of kind on node as c, a dry
// run through the whole admission chain. A taint's list is read first
// and written whole.
func patchKey(ctx context.Context, c kubernetes.Interface, node string, k protocol.Key, value *string) error {
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	var field string
	switch k.Kind {
	case protocol.Label:
		field = "labels"
	case protocol.Annotation:
		field = "annotations"
	case protocol.Condition:
		cond := corev1.NodeCondition{Type: corev1.NodeConditionType(k.Name), Status: corev1.ConditionTrue, Reason: "Forged",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
		body, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, body, dry, "status")
		return err
	case protocol.Taint:
		n, err := world.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read %s: %w", node, err)
		}
		taints := slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == k.Name })
		if value != nil {
			taints = append(taints, corev1.Taint{Key: k.Name, Value: *value, Effect: corev1.TaintEffectNoSchedule})
		}
		body, _ := json.Marshal(map[string]any{"spec": map[string]any{"taints": taints}})
		_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, dry)
		return err
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{field: map[string]*string{k.Name: value}}})
	_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, dry)
	return err
}

// seedKeys writes every label, annotation and taint of the protocol on
// node as the admin, before the policies hold them: each can then be
// tried for removal.
func seedKeys(t *testing.T, node string) {
	t.Helper()
	ctx := testworld.Ctx(t, time.Minute)
	labels, annotations := map[string]string{}, map[string]string{}
	var taints []corev1.Taint
	for _, k := range protocol.NodeKeys() {
		switch k.Kind {
		case protocol.Label:
			labels[k.Name] = "seeded"
		case protocol.Annotation:
			annotations[k.Name] = "seeded"
		case protocol.Taint:
			taints = append(taints, corev1.Taint{Key: k.Name, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	n, err := world.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations},
		"spec": map[string]any{"taints": append(n.Spec.Taints, taints...)}})
	// An earlier test's policies hold the admin off these keys until the
	// API server lets go of them, a moment after they are deleted: wait
	// until a dry run of the seed is let through.
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = world.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("seed %s: %v (%v)", node, last, err)
	}
	if _, err := world.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatalf("seed %s: %v", node, err)
	}
}

// awaitWritersPolicy waits until the API server holds the writers' policy:
// a dry run of a write it refuses (the hostile node-writer setting the VM
// facts of node) is refused.
func awaitWritersPolicy(t *testing.T, h *testworld.Hostile, node string) {
	t.Helper()
	ctx := testworld.Ctx(t, 2*time.Minute)
	forged := "forged"
	facts := protocol.Key{Name: protocol.AnnotationVMFacts, Kind: protocol.Annotation}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return refused(patchKey(ctx, h.DaemonSet, node, facts, &forged)), nil
	})
	if err != nil {
		t.Fatalf("the writers' policy never took effect: %v", err)
	}
}

// TestHostileNodeRefusedEveryKeyItDoesNotWrite: with the base applied, each
// of the three identities of node A (its agent's token, its kubelet, a
// DaemonSet account with Node write, each bound to A) is refused setting,
// changing and removing every key of the protocol, on A and on node B,
// that the table does not let it write: only the agent writes the agent's
// keys on its own Node, and any identity of A only the keys A shares with
// GKE's handler, on A.
func TestHostileNodeRefusedEveryKeyItDoesNotWrite(t *testing.T) {
	testworld.Need(t)
	a := world.NodeT(t, testworld.NodeSpec{Name: "hostile-a"})
	b := world.NodeT(t, testworld.NodeSpec{Name: "victim-b"})
	seedKeys(t, a.Name)
	seedKeys(t, b.Name)
	apply(t, render(t, "base"))
	h := world.HostileNode(t, a.Name)
	awaitWritersPolicy(t, h, b.Name)
	ctx := testworld.Ctx(t, 5*time.Minute)
	forged := "forged"
	tried := 0
	for _, id := range []struct {
		name   string
		client kubernetes.Interface
		agent  bool
	}{{"agent", h.Agent, true}, {"kubelet", h.Kubelet, false}, {"daemonset", h.DaemonSet, false}} {
		for _, node := range []string{a.Name, b.Name} {
			// The classes the identity is of, for node.
			is := []protocol.Who{protocol.WhoAnyone}
			if node == a.Name {
				is = append(is, protocol.WhoOwnNode)
				if id.agent {
					is = append(is, protocol.WhoAgent)
				}
			}
			may := func(who []protocol.Who) bool {
				return slices.ContainsFunc(who, func(w protocol.Who) bool { return slices.Contains(is, w) })
			}
			for _, k := range protocol.NodeKeys() {
				if !may(k.Setters()) {
					tried++
					if err := patchKey(ctx, id.client, node, k, &forged); !refused(err) {
						t.Errorf("%s of %s setting the %s %s on %s: %v, want refused", id.name, a.Name, k.Kind, k.Name, node, err)
					}
				}
				if !may(k.Removers()) && k.Kind != protocol.Condition {
					tried++
					if err := patchKey(ctx, id.client, node, k, nil); !refused(err) {
						t.Errorf("%s of %s removing the %s %s from %s: %v, want refused", id.name, a.Name, k.Kind, k.Name, node, err)
					}
				}
			}
		}
	}
	if tried < 300 {
		t.Fatalf("%d writes tried: the table is broken", tried)
	}
}

// TestKubeletRegistersWithTheOperatorsLabels: with the base applied, a
// kubelet registers its Node with the labels docs/install.md has operators
// give (--node-labels) and those GKE gives its nodes; afterwards it changes
// none of them.
func TestKubeletRegistersWithTheOperatorsLabels(t *testing.T) {
	testworld.Need(t)
	world.NodeT(t, testworld.NodeSpec{Name: "writers-probe"})
	apply(t, render(t, "base"))
	h := world.HostileNode(t, "writers-probe")
	awaitWritersPolicy(t, h, "writers-probe")
	const name = "registers-c"
	kubelet := kubeletOf(t, name)
	ctx := testworld.Ctx(t, time.Minute)
	labels := map[string]string{
		protocol.LabelTerminatesOnHostMaintenance: "true",
		protocol.LabelNodePool:                    "h4d-pool",
		protocol.LabelTopologyBlock:               "block-1",
		protocol.LabelTopologySubblock:            "sub-1",
		corev1.LabelHostname:                      name,
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := kubelet.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the kubelet registering with the operator's labels: %v, want allowed", err)
	}
	t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	pool := protocol.Key{Name: protocol.LabelNodePool, Kind: protocol.Label}
	other := "another-pool"
	if err := patchKey(ctx, kubelet, name, pool, &other); !refused(err) {
		t.Errorf("the kubelet moving its registered Node to another pool: %v, want refused", err)
	}
	// Another kubelet's registration of this name is not its own.
	if _, err := h.Kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "registers-d",
		Labels: map[string]string{protocol.LabelTerminatesOnHostMaintenance: "true"}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !refused(err) {
		t.Errorf("writers-probe's kubelet registering node registers-d: %v, want refused", err)
	}
}

// TestDetectorConditionsOnlyFromNamedDetectors: with the chart's writers'
// policy naming GPUUnhealthy a detector's condition and the node-writer
// account the detector, node A's kubelet and agent are refused writing it
// on A; the named detector writes it on A, and is refused it on B.
func TestDetectorConditionsOnlyFromNamedDetectors(t *testing.T) {
	testworld.Need(t)
	a := world.NodeT(t, testworld.NodeSpec{Name: "detected-a"})
	b := world.NodeT(t, testworld.NodeSpec{Name: "detected-b"})
	apply(t, render(t, "base"))
	h := world.HostileNode(t, a.Name)
	apply(t, writersPolicyOf(t, "--set", "admissionPolicy.detectorConditions={GPUUnhealthy}",
		"--set", "admissionPolicy.detectors={"+h.DaemonSetUser+"}"))
	awaitWritersPolicy(t, h, b.Name)
	ctx := testworld.Ctx(t, 2*time.Minute)
	gpu := protocol.Key{Name: "GPUUnhealthy", Kind: protocol.Condition}
	// The policy takes the new list up a moment after it is written.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return refused(patchKey(ctx, h.Kubelet, a.Name, gpu, nil)), nil
	})
	if err != nil {
		t.Errorf("the kubelet of %s writing GPUUnhealthy on its own Node: never refused", a.Name)
	}
	if err := patchKey(ctx, h.Agent, a.Name, gpu, nil); !refused(err) {
		t.Errorf("the agent of %s writing GPUUnhealthy: %v, want refused", a.Name, err)
	}
	if err := patchKey(ctx, h.DaemonSet, a.Name, gpu, nil); err != nil {
		t.Errorf("the named detector writing GPUUnhealthy on its own Node: %v, want allowed", err)
	}
	if err := patchKey(ctx, h.DaemonSet, b.Name, gpu, nil); !refused(err) || !strings.Contains(err.Error(), "detector") {
		t.Errorf("the named detector of %s writing GPUUnhealthy on %s: %v, want refused", a.Name, b.Name, err)
	}
}

// TestOperatorsPoolAndSliceLabelsFenced: with poolLabel and sliceLabel set,
// the labels they name are fenced as GKE's pool label is: node A's kubelet
// cannot label itself into a slice or a pool, nor its node-writer account
// any node; a kubelet registers with them.
func TestOperatorsPoolAndSliceLabelsFenced(t *testing.T) {
	testworld.Need(t)
	a := world.NodeT(t, testworld.NodeSpec{Name: "labelled-a"})
	b := world.NodeT(t, testworld.NodeSpec{Name: "labelled-b"})
	apply(t, render(t, "base"))
	h := world.HostileNode(t, a.Name)
	const poolLabel, sliceLabel = "example.com/pool", "example.com/slice"
	apply(t, writersPolicyOf(t, "--set", "poolLabel="+poolLabel, "--set", "sliceLabel="+sliceLabel))
	ctx := testworld.Ctx(t, 2*time.Minute)
	slice := protocol.Key{Name: sliceLabel, Kind: protocol.Label}
	pool := protocol.Key{Name: poolLabel, Kind: protocol.Label}
	victims := "victims"
	// The policy takes the new list up a moment after it is written.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return refused(patchKey(ctx, h.Kubelet, a.Name, slice, &victims)), nil
	})
	if err != nil {
		t.Fatalf("the kubelet of %s labelling itself into a slice by %s: never refused", a.Name, sliceLabel)
	}
	for _, tc := range []struct {
		who    string
		client kubernetes.Interface
		node   string
		key    protocol.Key
	}{
		{"the kubelet", h.Kubelet, a.Name, pool},
		{"the agent", h.Agent, a.Name, slice},
		{"the node-writer account", h.DaemonSet, a.Name, slice},
		{"the node-writer account", h.DaemonSet, b.Name, slice},
		{"the node-writer account", h.DaemonSet, b.Name, pool},
	} {
		if err := patchKey(ctx, tc.client, tc.node, tc.key, &victims); !refused(err) {
			t.Errorf("%s of %s setting %s on %s: %v, want refused", tc.who, a.Name, tc.key.Name, tc.node, err)
		}
	}
	const name = "labelled-c"
	kubelet := kubeletOf(t, name)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{poolLabel: "p", sliceLabel: "s", corev1.LabelHostname: name}}}
	if _, err := kubelet.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a kubelet registering with the operator's pool and slice labels: %v, want allowed", err)
	}
}

// writersPolicyOf is the writers' policy and its binding as the chart
// renders them with args.
func writersPolicyOf(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	var policy []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetName() == generate.WritersPolicy {
			policy = append(policy, o)
		}
	}
	return policy
}

// kubeletOf is a clientset of node name's kubelet (system:node:name).
func kubeletOf(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	cfg, err := world.ConfigForNode(t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kubelet
}

// legacyToken is the token of a Secret of type
// kubernetes.io/service-account-token for service account sa in ns, as
// the controller-manager fills it in: a token that names no node, which the
// node running a pod that mounts the Secret can read.
func legacyToken(t *testing.T, ns, sa string) string {
	t.Helper()
	ctx := testworld.Ctx(t, 2*time.Minute)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sa + "-legacy", Namespace: ns,
		Annotations: map[string]string{corev1.ServiceAccountNameKey: sa}}, Type: corev1.SecretTypeServiceAccountToken}
	if _, err := world.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a legacy token Secret for %s/%s: %v", ns, sa, err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().Secrets(ns).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})
	lw := cache.NewFilteredListWatchFromClient(world.Client.CoreV1().RESTClient(), "secrets", ns,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", secret.Name).String()
		})
	var token string
	filled := func(obj any) bool {
		if s, ok := obj.(*corev1.Secret); ok && len(s.Data[corev1.ServiceAccountTokenKey]) > 0 {
			token = string(s.Data[corev1.ServiceAccountTokenKey])
		}
		return token != ""
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Secret{},
		func(s cache.Store) (bool, error) { return slices.ContainsFunc(s.List(), filled), nil },
		func(ev watch.Event) (bool, error) { return filled(ev.Object), nil })
	if err != nil {
		t.Fatalf("the legacy token of %s/%s was never filled in: %v", ns, sa, err)
	}
	return token
}

// personKeys are the keys of the table a person may set but neither
// anyone nor any identity of the node written may.
func personKeys() []protocol.Key {
	var out []protocol.Key
	for _, k := range protocol.NodeKeys() {
		if set := k.Setters(); slices.Contains(set, protocol.WhoPerson) && !slices.Contains(set, protocol.WhoAnyone) {
			out = append(out, k)
		}
	}
	return out
}

// TestLegacyTokenIsNoPerson: with the base applied, a legacy token of node
// A's node-writer account (a Secret of type service-account-token, which
// names no node and which A can read when a pod on it mounts it) is no
// person: it is refused every key only a person (or the aggregator) sets,
// and their removal, on node B. Once admissionPolicy.people names the
// account, the same token sets them.
func TestLegacyTokenIsNoPerson(t *testing.T) {
	testworld.Need(t)
	a := world.NodeT(t, testworld.NodeSpec{Name: "legacy-a"})
	b := world.NodeT(t, testworld.NodeSpec{Name: "legacy-b"})
	seedKeys(t, b.Name)
	apply(t, render(t, "base"))
	h := world.HostileNode(t, a.Name)
	awaitWritersPolicy(t, h, b.Name)
	ns := strings.Split(h.DaemonSetUser, ":")[2]
	legacy := clientForToken(t, legacyToken(t, ns, testworld.NodeWriterAccount))
	ctx := testworld.Ctx(t, 5*time.Minute)
	forged := "true"
	keys := personKeys()
	if len(keys) < 10 {
		t.Fatalf("%d keys only a person sets: the table is broken", len(keys))
	}
	for _, k := range keys {
		if err := patchKey(ctx, legacy, b.Name, k, &forged); !refused(err) {
			t.Errorf("a legacy token of %s setting the %s %s on %s: %v, want refused", h.DaemonSetUser, k.Kind, k.Name, b.Name, err)
		}
		if k.Kind != protocol.Condition {
			if err := patchKey(ctx, legacy, b.Name, k, nil); !refused(err) {
				t.Errorf("a legacy token of %s removing the %s %s from %s: %v, want refused", h.DaemonSetUser, k.Kind, k.Name, b.Name, err)
			}
		}
	}

	apply(t, writersPolicyOf(t, "--set", "admissionPolicy.people.serviceAccounts={"+ns+"/"+testworld.NodeWriterAccount+"}"))
	trigger := protocol.Key{Name: protocol.LabelPerformMaintenance, Kind: protocol.Label}
	// The policy takes the new list up a moment after it is written.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return patchKey(ctx, legacy, b.Name, trigger, &forged) == nil, nil
	})
	if err != nil {
		t.Fatalf("the named account setting %s on %s: never allowed", trigger.Name, b.Name)
	}
	for _, k := range keys {
		if err := patchKey(ctx, legacy, b.Name, k, &forged); err != nil {
			t.Errorf("the named account setting the %s %s on %s: %v, want allowed", k.Kind, k.Name, b.Name, err)
		}
	}
}

// clientForToken is a clientset of the user token names.
func clientForToken(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(world.ConfigForToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFaultConditionsOfTheConfigMapFenced: with the base applied (which
// names no detector's condition: its policy ConfigMap is the operator's),
// the conditions the operator's policy ConfigMap names as faults are
// fenced as a detector's: node A's kubelet, agent and node-writer account
// are refused GPUUnhealthy on A (the node-writer on B too), while the
// kubelet keeps writing its own conditions and any other. Once
// admissionPolicy.detectors names the node-writer account, it writes
// GPUUnhealthy on A and is refused it on B.
//
// It runs on the newest Kubernetes only: on 1.34.4 the API server, once a
// policy's binding and the namespace of its parameter ConfigMap are
// deleted and made again (an earlier test's install, or an uninstall and
// install), no longer sees the new ConfigMap, and the fence lets the
// writes through (docs/security.md says so to operators).
func TestFaultConditionsOfTheConfigMapFenced(t *testing.T) {
	testworld.Need(t)
	if testworld.KubernetesVersion != testworld.NewestKubernetes {
		t.Skipf("the ConfigMap-parameter fence is proven on Kubernetes %s only (see the doc comment)", testworld.NewestKubernetes)
	}
	a := world.NodeT(t, testworld.NodeSpec{Name: "faulted-a"})
	b := world.NodeT(t, testworld.NodeSpec{Name: "faulted-b"})
	apply(t, render(t, "base"))
	h := world.HostileNode(t, a.Name)
	ctx := testworld.Ctx(t, 3*time.Minute)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "maintenance-handler", Namespace: testworld.ShippedNamespace},
		Data: map[string]string{"policy.yaml": "pools:\n  a3:\n    faults:\n      conditions:\n        - type: GPUUnhealthy\n          behavior: UNRECOVERABLE_GPU_ERROR\n"}}
	if _, err := world.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().ConfigMaps(cm.Namespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	gpu := protocol.Key{Name: "GPUUnhealthy", Kind: protocol.Condition}
	// The API server reads the policy and its ConfigMap a moment after
	// they are written.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return refused(patchKey(ctx, h.Kubelet, a.Name, gpu, nil)), nil
	})
	if err != nil {
		t.Fatalf("the kubelet of %s writing GPUUnhealthy, a fault condition of the policy ConfigMap, on its own Node: never refused", a.Name)
	}
	for _, tc := range []struct {
		who    string
		client kubernetes.Interface
		node   string
	}{{"the agent", h.Agent, a.Name}, {"the node-writer account", h.DaemonSet, a.Name}, {"the node-writer account", h.DaemonSet, b.Name}} {
		// The agent's own policy refuses it first, in its own words.
		if err := patchKey(ctx, tc.client, tc.node, gpu, nil); !refused(err) || tc.client != h.Agent && !strings.Contains(err.Error(), "fault condition") {
			t.Errorf("%s of %s writing GPUUnhealthy on %s: %v, want refused", tc.who, a.Name, tc.node, err)
		}
	}
	for _, c := range []string{string(corev1.NodeReady), "KernelDeadlock", "GPUUnhealthyLater"} {
		if err := patchKey(ctx, h.Kubelet, a.Name, protocol.Key{Name: c, Kind: protocol.Condition}, nil); err != nil {
			t.Errorf("the kubelet of %s writing %s, no fault condition or its own, on its own Node: %v, want allowed", a.Name, c, err)
		}
	}

	var named []*unstructured.Unstructured
	objs, err := helmTemplate(t, "--set", "admissionPolicy.detectors={"+h.DaemonSetUser+"}")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetName() == generate.FaultConditionsPolicy {
			named = append(named, o)
		}
	}
	apply(t, named)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return patchKey(ctx, h.DaemonSet, a.Name, gpu, nil) == nil, nil
	})
	if err != nil {
		t.Errorf("the named detector writing GPUUnhealthy on its own Node: never allowed")
	}
	if err := patchKey(ctx, h.DaemonSet, b.Name, gpu, nil); !refused(err) {
		t.Errorf("the named detector of %s writing GPUUnhealthy on %s: %v, want refused", a.Name, b.Name, err)
	}
}
