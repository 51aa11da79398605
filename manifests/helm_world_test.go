package manifests_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// helmRelease is the release and namespace the chart is installed as.
const helmRelease = "maintenance-handler"

// helmRun runs the pinned helm against the world and returns what it
// printed, failing t on an error.
func helmRun(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(testworld.Helm(t), append(args, "--kubeconfig", world.Kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// packageChart packages the chart as version (its appVersion, the image
// tag, appVersion) into a temp folder, as make release does, and returns
// the archive.
func packageChart(t testing.TB, version, appVersion string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command(testworld.Helm(t), "package", chart, "--version", version, "--app-version", appVersion, "--destination", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("helm package: %v\n%s", err, out)
	}
	return filepath.Join(dir, "maintenance-handler-"+version+".tgz")
}

// TestHelmOnARealNode installs the chart with helm on a real node (the
// image built without a container engine), and upgrades it twice: once
// while the node has a pending notice, once while it drains for host
// maintenance and another node has a pending notice. Each notice stays
// through the upgrade, on the Node and its pods; the drain finishes once,
// in order, each pod with its whole grace, and the maintenance is counted
// once. The chart's versions differ in their image tags, so that each
// upgrade replaces every pod. helm uninstall, with the node's maintenance
// under way, then removes every object the chart made, leaves that node
// cordoned and tainted with a Warning Event, and removes the product's
// keys from the other node.
//
// It runs on the newest Kubernetes only: what it adds to
// TestShippedManifestsOnARealNode, whose objects are the chart's default
// render, is helm's upgrade and uninstall and the agent's restart, none of
// which depends on the API server's version, and the one real node is the
// slowest part of make test.
func TestHelmOnARealNode(t *testing.T) {
	testworld.Need(t)
	if testworld.KubernetesVersion != testworld.NewestKubernetes {
		t.Skipf("helm's upgrade and uninstall run on Kubernetes %s only", testworld.NewestKubernetes)
	}
	if err := testworld.RealNodeSupport(); err != nil {
		t.Skipf("real node: skipped: %v", err)
	}
	const name = "real-gpu-helm"
	emu := gceemu.New(gceemu.Config{Name: name, Project: "p", Zone: "z"})
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	layout := shippedImageLayout(t)
	waitShippedGone(t)
	// Three versions of the chart, each with its image tag, so that each
	// upgrade replaces every pod.
	versions := []struct{ chart, tag string }{{"0.0.1", "v1"}, {"0.0.2", "v2"}, {"0.0.3", "v3"}}
	charts := map[string]string{}
	for _, v := range versions {
		charts[v.tag] = packageChart(t, v.chart, v.tag)
	}
	// The world has one real node: the aggregator and the uninstall Job
	// run on it, cordoned or not.
	values := []string{
		"--set-json", `agent.extraEnv=[{"name":"GCE_METADATA_HOST","value":"` + emu.Host() + `"}]`,
		"--set-json", `aggregator.nodeSelector={"kubernetes.io/hostname":"` + name + `"}`,
		"--set-json", `aggregator.tolerations=[{"key":"` + protocol.TaintImpendingTermination + `","operator":"Exists"},{"key":"node.kubernetes.io/unschedulable","operator":"Exists"}]`,
		"--set", "aggregator.replicas=1",
		// The world's one real node is an accelerator node, without a zone.
		"--set-json", "aggregator.avoidNodesLabelled=[]", "--set", "aggregator.zoneSpread=",
	}
	helmRun(t, append([]string{"install", helmRelease, charts["v1"], "--namespace", helmRelease, "--create-namespace"}, values...)...)
	t.Cleanup(func() { cleanUpRelease(t) })

	n := world.RealNodeT(t, testworld.RealNodeOptions{Name: name, Labels: map[string]string{
		testworld.LabelGPUAccelerator: "nvidia-h100-80gb",
		testworld.LabelNodePool:       "real-pool",
	}})
	ctx := testworld.Ctx(t, 5*time.Minute)
	for _, v := range versions {
		if err := n.ImportLayout(ctx, "docker.io/library/maintenance-handler:"+v.tag, layout); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.ImportWorkload(ctx); err != nil {
		t.Fatal(err)
	}
	agentWithTag(t, name, "v1")

	// A pending notice, mirrored on the Node and on a workload's pod,
	// stays while the agents are replaced.
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(3*time.Hour), time.Hour))
	pending := world.WaitNode(t, name, "the notice mirrored", func(node *corev1.Node) bool {
		return node.Labels[protocol.LabelScheduledMaintenanceTime] != "" && slices.Contains(protocol.ForgetConditions(node), protocol.ConditionMaintenancePlanned)
	})
	ns := world.Namespace(t)
	createWorkload(t, n, testworld.Workload{Namespace: ns, Name: "reader", Grace: 1, ExitOnSIGTERM: true})
	reader := world.WaitPod(t, ns, "reader", "told of the notice", func(p *corev1.Pod) bool {
		return strings.Contains(p.Annotations[protocol.PodAnnotationNotice], "MAINTENANCE_WINDOW_START=")
	})
	nodeLost := watchFor(t, "nodes", "", name, pending.ResourceVersion, func(o watch.Event) bool {
		node, ok := o.Object.(*corev1.Node)
		return ok && (node.Labels[protocol.LabelScheduledMaintenanceTime] == "" || node.Annotations[protocol.AnnotationUpcomingMaintenance] == "")
	})
	podLost := watchFor(t, "pods", ns, "reader", reader.ResourceVersion, func(o watch.Event) bool {
		p, ok := o.Object.(*corev1.Pod)
		return ok && !strings.Contains(p.Annotations[protocol.PodAnnotationNotice], "MAINTENANCE_WINDOW_START=")
	})
	helmRun(t, append([]string{"upgrade", helmRelease, charts["v2"], "--namespace", helmRelease}, values...)...)
	agentWithTag(t, name, "v2")
	if lost := nodeLost(); len(lost) > 0 {
		t.Errorf("the Node lost its notice during the upgrade: %v", lost)
	}
	if lost := podLost(); len(lost) > 0 {
		t.Errorf("the pod lost its notice during the upgrade: %v", lost)
	}
	if c := eventCount(t, name, protocol.EventMaintenanceScheduled); c != 1 {
		t.Errorf("%d %s Events, want 1: the new agent announced the notice again", c, protocol.EventMaintenanceScheduled)
	}

	// Host maintenance: the agents are replaced while the workloads drain.
	pods := []testworld.Workload{
		{Namespace: ns, Name: "first", Grace: 6},
		{Namespace: ns, Name: "second", Grace: 12},
		{Namespace: "kube-system", Name: "sys-" + ns, Grace: 2},
	}
	startWorkloads(t, n, pods...)
	graces := deletionGraces(t, ns, "kube-system")
	// Another node has a pending notice while the real node drains and
	// the chart is upgraded: what an agent writes for one (copied from
	// the real node's), with an agent pod that kwok plays. No component
	// of either version may change what its agent wrote (the aggregator
	// may answer the agent's asks copied with it).
	idle := world.NodeT(t, testworld.NodeSpec{Name: "helm-idle"})
	copyKeys(t, pending, idle.Name)
	noticed, err := world.Client.CoreV1().Nodes().Get(ctx, idle.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	emu.SetMaintenanceEvent("TERMINATE_ON_HOST_MAINTENANCE")
	n.WaitRecord(t, ns, "first", "SIGTERM", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "sigterm"); return ok })
	helmRun(t, append([]string{"upgrade", helmRelease, charts["v3"], "--namespace", helmRelease}, values...)...)
	agentWithTag(t, name, "v3")
	drained := world.WaitNode(t, name, "terminating: drained", func(node *corev1.Node) bool {
		return node.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	sigterm := sigtermOnce(t, n, pods)
	if sys, second := sigterm[pods[2].Name], sigterm["second"]; sys.Sub(second) < 12*time.Second {
		t.Errorf("the kube-system pod got SIGTERM %s after the workload with a 12 s grace; want after that workload was gone", sys.Sub(second))
	}
	for _, w := range append(pods, testworld.Workload{Namespace: ns, Name: "reader", Grace: 1}) {
		if got, ok := graces()[w.Namespace+"/"+w.Name]; !ok || got != w.Grace {
			t.Errorf("%s was deleted with a grace of %d s (seen: %t), want its own %d s", w.Name, got, ok, w.Grace)
		}
	}
	if still, err := world.Client.CoreV1().Nodes().Get(ctx, idle.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if before, after := agentValues(noticed), agentValues(still); !maps.Equal(before, after) {
		t.Errorf("the other node's pending notice changed during the upgrade: %v, then %v", before, after)
	}
	world.WaitEvent(t, name, protocol.EventEvictionComplete)
	if c := eventCount(t, name, protocol.EventEvictionComplete); c != 1 {
		t.Errorf("%d %s Events, want 1", c, protocol.EventEvictionComplete)
	}
	if got := protocol.ReadAgentState(drained).Interruptions; len(got) != 1 || got[protocol.HostMaintenance.Key()] != 1 {
		t.Errorf("interruptions counted on the Node: %v, want one %s", got, protocol.HostMaintenance.Key())
	}

	helmRun(t, "uninstall", helmRelease, "--namespace", helmRelease, "--timeout", "3m")
	after, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !after.Spec.Unschedulable || !protocol.HasTaint(after) || after.Labels[protocol.LabelActiveMaintenance] != protocol.ValueTerminating {
		t.Errorf("the node in maintenance lost its cordon, taint or label: unschedulable %t, taints %v, labels %v", after.Spec.Unschedulable, after.Spec.Taints, after.Labels)
	}
	world.WaitEvent(t, name, protocol.EventUninstallLeftNode)
	cleaned, err := world.Client.CoreV1().Nodes().Get(ctx, idle.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if left := productKeys(cleaned); len(left) > 0 {
		t.Errorf("the idle node keeps %v after the uninstall", left)
	}
	if left := releaseObjects(t); len(left) > 0 {
		t.Errorf("left after helm uninstall: %v", left)
	}
}

// agentWithTag waits until the agent's pod on node runs the image tag and
// is Ready.
func agentWithTag(t testing.TB, node, tag string) {
	t.Helper()
	world.WaitPods(t, helmRelease+"-agent", "app.kubernetes.io/component=agent", "the agent "+tag+" Ready on "+node, func(pods []*corev1.Pod) bool {
		for _, p := range pods {
			if p.Spec.NodeName == node && p.DeletionTimestamp == nil && strings.HasSuffix(p.Spec.Containers[0].Image, ":"+tag) && testworld.PodReady(p) {
				return true
			}
		}
		return false
	})
}

// watchFor watches the object name of resource from its version rv on,
// and returns a function that stops the watch and lists the events for
// which bad held.
func watchFor(t testing.TB, resource, ns, name, rv string, bad func(watch.Event) bool) func() []string {
	t.Helper()
	w, err := world.Client.CoreV1().RESTClient().Get().Resource(resource).Namespace(ns).
		VersionedParams(&metav1.ListOptions{Watch: true, ResourceVersion: rv, FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}, metav1.ParameterCodec).
		Watch(testworld.Ctx(t, 10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			if bad(e) {
				mu.Lock()
				m, _ := meta.Accessor(e.Object)
				seen = append(seen, fmt.Sprintf("%s at version %s", e.Type, m.GetResourceVersion()))
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// deletionGraces watches the pods of namespaces and returns a function
// that says, for each pod seen being deleted (namespace/name), the grace
// period of its deletion.
func deletionGraces(t testing.TB, namespaces ...string) func() map[string]int64 {
	t.Helper()
	deletions := watchDeletions(t, namespaces...)
	return func() map[string]int64 {
		out := map[string]int64{}
		for k, d := range deletions() {
			out[k] = d.grace
		}
		return out
	}
}

// copyKeys writes from's product keys (labels, annotations, node
// conditions) on the Node to, each as its writer: the aggregator's as the
// aggregator, the others as to's agent (the admission policies let no one
// else set them).
func copyKeys(t testing.TB, from *corev1.Node, to string) {
	t.Helper()
	ctx := testworld.Ctx(t, 30*time.Second)
	kubeconfig, err := world.AgentKubeconfig(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	nodes := clientFor(t, kubeconfig).CoreV1().Nodes()
	aggregator := clientFor(t, world.AggregatorKubeconfigT(t, testworld.ShippedNamespace)).CoreV1().Nodes()
	for _, as := range []struct {
		nodes      corev1client.NodeInterface
		aggregator bool
	}{{nodes, false}, {aggregator, true}} {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := as.nodes.Get(ctx, to, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, k := range productKeys(from) {
				if slices.ContainsFunc(protocol.Keys, func(key protocol.Key) bool { return key.Name == k && key.Writer == protocol.Aggregator }) != as.aggregator {
					continue
				}
				if v, ok := from.Labels[k]; ok {
					n.Labels[k] = v
				}
				if v, ok := from.Annotations[k]; ok {
					n.Annotations[k] = v
				}
			}
			_, err = as.nodes.Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var conditions []corev1.NodeCondition
	for _, c := range from.Status.Conditions {
		if slices.Contains(protocol.NodeConditionTypes, c.Type) {
			conditions = append(conditions, c)
		}
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conditions}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Patch(ctx, to, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if got, err := nodes.Get(ctx, to, metav1.GetOptions{}); err != nil || len(productKeys(got)) < 4 {
		t.Fatalf("%s carries %v of the product's keys (%v); want the pending notice's", to, productKeys(got), err)
	}
}

// productKeys lists the labels, annotations, taints and node conditions
// of the product on n.
func productKeys(n *corev1.Node) []string {
	var out []string
	for _, key := range protocol.Keys {
		if key.Writer != protocol.Agent && key.Writer != protocol.Aggregator {
			continue
		}
		_, label := n.Labels[key.Name]
		_, annotation := n.Annotations[key.Name]
		if label || annotation || protocol.HasTaintKey(n, key.Name) {
			out = append(out, key.Name)
		}
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, protocol.Prefix) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	for _, c := range protocol.ForgetConditions(n) {
		out = append(out, string(c))
	}
	slices.Sort(out)
	return out
}

// agentValues are the values of the labels and annotations the agent
// writes on n, by key.
func agentValues(n *corev1.Node) map[string]string {
	out := map[string]string{}
	for _, k := range productKeys(n) {
		if !slices.ContainsFunc(protocol.Keys, func(key protocol.Key) bool { return key.Name == k && key.Writer == protocol.Agent }) {
			continue
		}
		if v, ok := n.Labels[k]; ok {
			out["label "+k] = v
		}
		if v, ok := n.Annotations[k]; ok {
			out["annotation "+k] = v
		}
	}
	return out
}

// releaseObjects lists what is left of the release: objects labelled with
// its instance, and the aggregator's Leases.
func releaseObjects(t testing.TB) []string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(world.Config)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "serviceaccounts"}, {Version: "v1", Resource: "services"}, {Version: "v1", Resource: "configmaps"},
		{Group: "apps", Version: "v1", Resource: "daemonsets"}, {Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "batch", Version: "v1", Resource: "jobs"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}, {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
	} {
		list, err := dyn.Resource(r).List(testworld.Ctx(t, 10*time.Second), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + helmRelease})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Items {
			left = append(left, fmt.Sprintf("%s %s/%s", r.Resource, o.GetNamespace(), o.GetName()))
		}
	}
	for _, l := range []string{"maintenance-handler-aggregator", "maintenance-handler-aggregator-claims"} {
		if _, err := world.Client.CoordinationV1().Leases(helmRelease).Get(testworld.Ctx(t, 10*time.Second), l, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "lease "+l)
		}
	}
	return left
}

// cleanUpRelease removes what a failed test left of the release, and its
// namespace, and waits until the namespace is gone: the next test of the
// shipped manifests installs into a namespace of the same name.
func cleanUpRelease(t testing.TB) {
	cmd := exec.Command(testworld.Helm(t), "uninstall", helmRelease, "--namespace", helmRelease, "--no-hooks", "--ignore-not-found", "--kubeconfig", world.Kubeconfig)
	_ = cmd.Run()
	rbac := world.Client.RbacV1()
	_ = rbac.ClusterRoles().Delete(context.Background(), "maintenance-handler-uninstall", metav1.DeleteOptions{})
	_ = rbac.ClusterRoleBindings().Delete(context.Background(), "maintenance-handler-uninstall", metav1.DeleteOptions{})
	for _, ns := range []string{helmRelease, helmRelease + "-agent"} {
		_ = world.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}
	waitShippedGone(t)
}
