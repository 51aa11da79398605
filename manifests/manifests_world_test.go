package manifests_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(vms.RunMain(m, &world)) }

// render builds the kustomization in dir as `kubectl apply -k` does (the
// same kustomize library) and returns its objects.
func render(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	return renderFS(t, filesys.MakeFsOnDisk(), dir)
}

// renderFS is render for the kustomization in dir on fs.
func renderFS(t testing.TB, fs filesys.FileSystem, dir string) []*unstructured.Unstructured {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// waitShippedGone waits until the shipped namespaces (the aggregator's and
// the agent's) of an earlier test's install are gone: the next install
// makes them again.
func waitShippedGone(tb testing.TB) {
	tb.Helper()
	world.WaitNamespaceGone(tb, testworld.ShippedNamespace)
	world.WaitNamespaceGone(tb, testworld.ShippedAgentNamespace)
}

// apply server-side applies every object, as kubectl apply --server-side
// -k would, and deletes them when the test ends. A namespace it applies is
// first waited for until no earlier test's copy of it is left terminating,
// since nothing can be created in a namespace being deleted.
func apply(t testing.TB, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, obj := range objs {
		if obj.GetKind() == "Namespace" {
			world.WaitNamespaceGone(t, obj.GetName())
		}
	}
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
		if _, err := ri.Patch(testworld.Ctx(t, 30*time.Second), obj.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: "maintenance-handler-test", Force: &force}); err != nil {
			t.Fatalf("apply %s %s: %v", gvk.Kind, obj.GetName(), err)
		}
		t.Cleanup(func() { _ = ri.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
	}
}

// TestManifestsApplyAndTheAgentTouchesOnlyItsOwnNode: the base applies with
// server-side apply; the DaemonSet's pods land only on accelerator nodes
// and on nodes labelled as VMs that stop for host maintenance;
// with a token bound to the agent pod on node A, the real admission chain
// (RBAC and the ValidatingAdmissionPolicy) lets it change node A's own keys
// and nothing else.
func TestManifestsApplyAndTheAgentTouchesOnlyItsOwnNode(t *testing.T) {
	testworld.Need(t)
	const ns, ans = testworld.ShippedNamespace, testworld.ShippedAgentNamespace
	world.NodeT(t, testworld.NodeSpec{Name: "rbac-gpu-a"})
	world.NodeT(t, testworld.NodeSpec{Name: "rbac-tpu-b", TPU: true})
	world.NodeT(t, testworld.NodeSpec{Name: "rbac-plain"})
	world.NodeT(t, testworld.NodeSpec{Name: "rbac-gpu-c"}) // where a real agent runs, below
	// An H4D VM, say: no accelerator, and it stops for host maintenance.
	world.NodeT(t, testworld.NodeSpec{Name: "rbac-h4d", NoAccelerators: true,
		Labels: map[string]string{"maintenance-handler.io/terminates-on-host-maintenance": "true"}})
	// A GPU node in maintenance, with the GPU operator's taint: the agent
	// tolerates both (the node must be watched through its maintenance).
	world.NodeT(t, testworld.NodeSpec{Name: "rbac-gpu-tainted"})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), "rbac-gpu-tainted", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints,
			corev1.Taint{Key: protocol.TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule},
			corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule})
		n.Spec.Unschedulable = true
		_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), "rbac-plain", metav1.GetOptions{})
		if err != nil {
			return err
		}
		delete(n.Labels, testworld.LabelGPUAccelerator)
		_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, render(t, "base"))

	// The DaemonSet: on the accelerator nodes and the labelled one, not on
	// the plain one.
	var pods []corev1.Pod
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 90*time.Second), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := world.Client.CoreV1().Pods(ans).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
		if err != nil {
			return false, nil
		}
		pods = list.Items
		on := map[string]bool{}
		for _, p := range pods {
			on[p.Spec.NodeName] = p.Status.Phase == corev1.PodRunning
		}
		return on["rbac-gpu-a"] && on["rbac-tpu-b"] && on["rbac-gpu-tainted"] && on["rbac-gpu-c"] && on["rbac-h4d"], nil
	})
	if err != nil {
		t.Fatalf("agent pods never ran on the four accelerator nodes, the tainted and cordoned one included, and the labelled one: %d pods", len(pods))
	}
	var podA, podC *corev1.Pod
	for i, p := range pods {
		if p.Spec.NodeName == "rbac-gpu-c" {
			podC = &pods[i]
		}
		if p.Spec.NodeName == "rbac-plain" {
			t.Errorf("an agent pod landed on a node without accelerators: %s", p.Name)
		}
		if p.Spec.NodeName == "rbac-gpu-a" {
			podA = &pods[i]
		}
	}

	// A token bound to the agent pod on node A, as the kubelet mounts it.
	tr := agentToken(t, podA)
	as, err := kubernetes.NewForConfig(world.ConfigForToken(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	update := func(node string, change func(*corev1.Node)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := as.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(n)
			_, err = as.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
			return err
		})
	}
	// The aggregator approved the node's repair (with its own identity, the
	// approval's one writer): the agent may remove the approval (the repair
	// over), below, never write one.
	approver := clientFor(t, world.AggregatorKubeconfigT(t, testworld.ShippedNamespace))
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := approver.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), "rbac-gpu-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		protocol.WriteRepairApproval(n, protocol.RepairApproval{Behavior: protocol.BehaviorChipError, Source: protocol.FaultSourcePerson,
			Approved: time.Now(), DrainTimeout: protocol.Duration(time.Minute)})
		_, err = approver.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// GKE's repair label, while the approval is on the node: allowed.
	if err := update("rbac-gpu-a", func(n *corev1.Node) { n.Labels[protocol.LabelFaultBehavior] = "XID" }); err != nil {
		t.Errorf("GKE's repair label during an approved repair: %v, want allowed", err)
	}
	// Its own node, its own keys: allowed.
	err = update("rbac-gpu-a", func(n *corev1.Node) {
		delete(n.Labels, protocol.LabelFaultBehavior)
		protocol.ConsumeRepairApproval(n)
		n.Labels[protocol.LabelActiveMaintenance] = protocol.ValueOngoing
		n.Annotations[protocol.AnnotationPhase] = "Draining"
		n.Annotations[protocol.AnnotationUpcomingMaintenance] = `{"maintenance_status":"PENDING"}`
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: protocol.TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule})
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
	denied("another node", update("rbac-tpu-b", func(n *corev1.Node) { n.Labels[protocol.LabelActiveMaintenance] = protocol.ValueOngoing }),
		"only its own Node (rbac-gpu-a), not rbac-tpu-b")
	denied("a label it does not own", update("rbac-gpu-a", func(n *corev1.Node) { n.Labels["team"] = "mine" }), "only its own labels")
	denied("an annotation it does not own", update("rbac-gpu-a", func(n *corev1.Node) { n.Annotations["example.com/owner"] = "me" }), "only its own annotations")
	denied("a taint it does not own", update("rbac-gpu-a", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/mine", Effect: corev1.TaintEffectNoExecute})
	}), "only its own taint")
	denied("deleting its node", as.CoreV1().Nodes().Delete(testworld.Ctx(t, 10*time.Second), "rbac-gpu-a", metav1.DeleteOptions{}), "forbidden")

	// A hostile agent, rule by rule: each write breaks one of the
	// admission policy's rules on its own Node, and that rule refuses it
	// (RBAC alone already refuses creating or deleting a Node, and every
	// subresource but status, so the policy's first rule is defence in
	// depth).
	const (
		ruleLabels      = "only its own labels"
		ruleAnnotations = "only its own annotations"
		ruleTaint       = "only its own taint"
		ruleSpec        = "only spec.unschedulable and its taint"
		ruleReport      = "may only remove a request on its node once it has answered it"
		ruleGKERepair   = "only while the aggregator's approval of its node's repair"
	)
	for _, tc := range []struct {
		rule, what string
		change     func(*corev1.Node)
	}{
		{ruleLabels, "moving into a slice (the TPU topology label)", func(n *corev1.Node) { n.Labels[protocol.LabelTPUTopology] = "4x4x4" }},
		{ruleLabels, "moving to another pool", func(n *corev1.Node) { n.Labels[protocol.LabelNodePool] = "other-pool" }},
		{ruleLabels, "removing a label it does not own", func(n *corev1.Node) { delete(n.Labels, testworld.LabelGPUAccelerator) }},
		{ruleLabels, "opting out for the pool", func(n *corev1.Node) { n.Labels[protocol.LabelOpportunisticDisable] = "true" }},
		{ruleAnnotations, "the pool's opportunistic configuration", func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationOpportunisticConfig] = "node-idle-time=1s,min-nodes=0,window=99999999s"
		}},
		{ruleAnnotations, "removing an annotation it does not own", func(n *corev1.Node) { delete(n.Annotations, testworld.KwokNodeAnnotation) }},
		{ruleAnnotations, "approving its own repair", func(n *corev1.Node) {
			protocol.WriteRepairApproval(n, protocol.RepairApproval{Behavior: protocol.BehaviorChipError, Source: protocol.FaultSourcePerson,
				Approved: time.Now(), DrainTimeout: protocol.Duration(time.Minute)})
		}},
		{ruleAnnotations, "a slice ask on its own node", func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationSliceMaintenance] = `{"slice":"s","cause":"x","reason":"preemption"}`
		}},
		{ruleAnnotations, "the repairs the aggregator counts", func(n *corev1.Node) { n.Annotations[protocol.AnnotationRepairs] = `{}` }},
		{ruleAnnotations, "a trigger's state", func(n *corev1.Node) { n.Annotations[protocol.AnnotationMaintenanceState] = `{}` }},
		{ruleReport, "asking for its own repair, taking a place under its pool's maxInRepair", func(n *corev1.Node) {
			n.Labels[protocol.LabelReportFaulty] = protocol.BehaviorChipError
		}},
		{ruleReport, "triggering its own maintenance, taking a place under the caps", func(n *corev1.Node) { n.Labels[protocol.LabelPerformMaintenance] = protocol.TriggerValue }},
		{ruleGKERepair, "starting GKE's repair with no approval, outside every cap", func(n *corev1.Node) { n.Labels[protocol.LabelFaultBehavior] = "XID" }},
		{ruleTaint, "removing another taint", func(n *corev1.Node) { n.Spec.Taints = nil }},
		// The API server's validation refuses this before the policy does
		// (1.37 says "field cannot be modified once set", older minors
		// "may not change providerID"; both name the field).
		{"spec.providerID: ", "its provider ID", func(n *corev1.Node) { n.Spec.ProviderID = "gce://other/zone/other" }},
		{ruleSpec, "its pod CIDR", func(n *corev1.Node) { n.Spec.PodCIDR = "10.99.0.0/24" }},
	} {
		if tc.what == "removing another taint" {
			// Give node A a taint that is not the agent's, as a GPU operator does.
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), "rbac-gpu-a", metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule})
				_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		denied(tc.what, update("rbac-gpu-a", tc.change), tc.rule)
	}
	// What the policy lets it write, it may fill with garbage, up to the
	// API server's limit: the aggregator's and the plugin's business
	// (aggregator's TestHostileNodeCannotMoveTheFleet).
	if err := update("rbac-gpu-a", func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationPhase] = "\x00garbage"
		n.Annotations[protocol.AnnotationInterruptions] = strings.Repeat("9", 200<<10)
		n.Labels[protocol.LabelKnownEnd] = "1796000000" // the VM's known end, which the agent mirrors
	}); err != nil {
		t.Errorf("garbage in its own keys: %v, want allowed (the readers refuse it)", err)
	}
	// A person's request for its repair it may remove, once repaired.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), "rbac-gpu-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels[protocol.LabelReportFaulty] = protocol.BehaviorChipError
		_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	denied("changing a person's request for its repair", update("rbac-gpu-a", func(n *corev1.Node) { n.Labels[protocol.LabelReportFaulty] = protocol.BehaviorPerformance }), ruleReport)
	if err := update("rbac-gpu-a", protocol.ConsumeReportFaulty); err != nil {
		t.Errorf("removing a person's request for its repair: %v, want allowed", err)
	}
	if err := update("rbac-gpu-a", func(n *corev1.Node) {
		delete(n.Annotations, protocol.AnnotationInterruptions)
		n.Annotations[protocol.AnnotationPhase] = "Draining"
		delete(n.Labels, protocol.LabelPerformMaintenance)
	}); err != nil {
		t.Fatal(err)
	}

	// Its node lifecycle conditions, through nodes/status: on its own
	// node, those types only.
	status := func(node, patch string) error {
		_, err := as.CoreV1().Nodes().Patch(testworld.Ctx(t, 10*time.Second), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	}
	own := `{"status":{"conditions":[{"type":"MaintenancePlanned","status":"True","reason":"MaintenanceScheduled"},{"type":"Drained","status":"False","reason":"NotDrained"}]}}`
	if err := status("rbac-gpu-a", own); err != nil {
		t.Errorf("the agent could not set its own node's lifecycle conditions: %v", err)
	}
	denied("lifecycle conditions on another node", status("rbac-tpu-b", own), "only its own Node")
	denied("another condition of its node", status("rbac-gpu-a", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Faked"}]}}`), "only its own conditions")
	denied("its node's capacity", status("rbac-gpu-a", `{"status":{"capacity":{"nvidia.com/gpu":"64"}}}`), "only its own conditions")
	denied("faking its boot ID (node status)", status("rbac-gpu-a", `{"status":{"nodeInfo":{"bootID":"forged"}}}`), "only its own conditions")
	denied("its addresses (node status)", status("rbac-gpu-a", `{"status":{"addresses":[{"type":"InternalIP","address":"10.9.9.9"}]}}`), "only its own conditions")

	// What the drain needs: list pods, evict one.
	if _, err := as.CoreV1().Pods("").List(testworld.Ctx(t, 10*time.Second), metav1.ListOptions{FieldSelector: "spec.nodeName=rbac-gpu-a"}); err != nil {
		t.Errorf("list pods: %v", err)
	}
	// Evictions: RBAC lets the token evict any pod (checkAccess below);
	// the eviction check, which the aggregator's replicas serve, holds it
	// to its own node's pods. The replicas kwok plays answer nothing:
	// while none serves the check, the agent's evictions fail, even on its
	// own node.
	scaleAggregatorToZero(t)
	podOn(t, "default", "victim", "rbac-gpu-a")
	podOn(t, "default", "evict-b", "rbac-tpu-b")
	podOn(t, "kube-system", "evict-elsewhere", "rbac-tpu-b")
	if err := evictAs(t, as, "default", "victim"); !checkCallFailed(err) {
		t.Errorf("evicting a pod on its own node while no replica serves the check: %v, want the API server's failure to call it", err)
	}
	check := hostEvictionCheck(t, ns)
	if err := evictWhenServed(t, as, "default", "victim"); err != nil {
		t.Errorf("the agent could not evict a pod on its own node: %v", err)
	}
	denied("evicting a pod on another node", evictAs(t, as, "default", "evict-b"),
		"may evict only the pods on its own Node (rbac-gpu-a), not default/evict-b on rbac-tpu-b")
	denied("evicting a kube-system pod on another node", evictAs(t, as, "kube-system", "evict-elsewhere"),
		"may evict only the pods on its own Node (rbac-gpu-a), not kube-system/evict-elsewhere on rbac-tpu-b")
	for _, p := range []string{"default/evict-b", "kube-system/evict-elsewhere"} {
		ns, name, _ := strings.Cut(p, "/")
		if got, err := world.Client.CoreV1().Pods(ns).Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
			t.Errorf("pod %s on another node was evicted: %v", p, err)
		}
	}
	if allowed, refused := testutil.ToFloat64(check.Checks.WithLabelValues(admission.Allowed)), testutil.ToFloat64(check.Checks.WithLabelValues(admission.Refused)); allowed != 1 || refused != 2 {
		t.Errorf("eviction checks: %v allowed, %v refused; want 1 and 2", allowed, refused)
	}
	// Another service account's evictions never reach the check.
	if err := evictAs(t, world.Client, "default", "evict-b"); err != nil {
		t.Errorf("the admin's eviction of a pod: %v", err)
	}
	if n := testutil.ToFloat64(check.Checks.WithLabelValues(admission.Allowed)) + testutil.ToFloat64(check.Checks.WithLabelValues(admission.Refused)); n != 3 {
		t.Errorf("the admin's eviction was reviewed by the check (%v reviews, want 3)", n)
	}

	// Deletes (the drain's escalation): a pod on its own node only, never
	// one on another node, kube-system's included.
	podOn(t, "default", "escalated", "rbac-gpu-a")
	podOn(t, "kube-system", "dns-elsewhere", "rbac-tpu-b")
	deletePod := func(ns, name string) error {
		zero := int64(0)
		return as.CoreV1().Pods(ns).Delete(testworld.Ctx(t, 10*time.Second), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	denied("deleting a kube-system pod on another node", deletePod("kube-system", "dns-elsewhere"),
		"may delete only the pods on its own Node (rbac-gpu-a), not kube-system/dns-elsewhere")
	if err := deletePod("default", "escalated"); err != nil {
		t.Errorf("the agent could not delete a pod on its own node: %v", err)
	}

	// Events: about its own Node, reported from it, and nothing else.
	eventAs := func(component, node, host string) error {
		e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: node + ".", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, APIVersion: "v1"},
			Reason:         protocol.EventManualRejected, Message: "forged", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: component, Host: host}, Count: 1,
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now()}
		_, err := as.CoreV1().Events("default").Create(testworld.Ctx(t, 10*time.Second), e, metav1.CreateOptions{})
		return err
	}
	event := func(node, host string) error { return eventAs(protocol.EventSourceAgent, node, host) }
	if err := event("rbac-gpu-a", "rbac-gpu-a"); err != nil {
		t.Errorf("the agent could not write an Event about its own node: %v", err)
	}
	denied("an Event about another node", event("rbac-tpu-b", "rbac-gpu-a"), "Events only about its own Node (rbac-gpu-a)")
	denied("an Event about another node, as if reported from it", event("rbac-tpu-b", "rbac-tpu-b"), "Events only about its own Node (rbac-gpu-a)")
	denied("an Event about its node, as if another reported it", event("rbac-gpu-a", "rbac-tpu-b"), "Events only about its own Node (rbac-gpu-a)")
	denied("an Event about its node, as the aggregator", eventAs(protocol.EventSourceAggregator, "rbac-gpu-a", "rbac-gpu-a"), "Events only about its own Node (rbac-gpu-a)")

	// An observed node's Lease: its own node's only, in its namespace.
	lease := func(node string) error {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: protocol.ObservedNodeLabels, Annotations: map[string]string{protocol.AnnotationShadow: "{}"}}}
		_, err := as.CoordinationV1().Leases(ans).Create(testworld.Ctx(t, 10*time.Second), l, metav1.CreateOptions{})
		return err
	}
	if err := lease("rbac-gpu-a"); err != nil {
		t.Errorf("the agent could not write its observed node's Lease: %v", err)
	}
	denied("another node's Lease", lease("rbac-tpu-b"), "only the Lease of its own Node (rbac-gpu-a)")
	if _, err := world.Client.CoordinationV1().Leases(ans).Create(testworld.Ctx(t, 10*time.Second), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "rbac-tpu-b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	denied("deleting another node's Lease", as.CoordinationV1().Leases(ans).Delete(testworld.Ctx(t, 10*time.Second), "rbac-tpu-b", metav1.DeleteOptions{}),
		"only the Lease of its own Node (rbac-gpu-a)")
	if err := as.CoordinationV1().Leases(ans).Delete(testworld.Ctx(t, 10*time.Second), "rbac-gpu-a", metav1.DeleteOptions{}); err != nil {
		t.Errorf("the agent could not delete its observed node's Lease: %v", err)
	}

	agentDeviceTaintRules(t, as, denied)

	// The workload notice: on the pods of its own node, the notice only.
	podOn(t, "default", "elsewhere", "rbac-tpu-b")
	podOn(t, "default", "told", "rbac-gpu-a")
	var conditionWith func(pod, typ, status, reason string) error
	notice := func(pod, key string) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"MAINTENANCE_PHASE=pending\n"}}}`, key)
		_, err := as.CoreV1().Pods("default").Patch(testworld.Ctx(t, 10*time.Second), pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	condition := func(pod, typ string) error { return conditionWith(pod, typ, "True", "Pending") }
	conditionWith = func(pod, typ, status, reason string) error {
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q,"reason":%q}]}}`, typ, status, reason)
		_, err := as.CoreV1().Pods("default").Patch(testworld.Ctx(t, 10*time.Second), pod, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	}
	if err := notice("told", protocol.PodAnnotationNotice); err != nil {
		t.Errorf("the agent could not tell a pod on its node: %v", err)
	}
	if err := condition("told", protocol.PodConditionMaintenance); err != nil {
		t.Errorf("the agent could not set the notice condition of a pod on its node: %v", err)
	}
	denied("a pod on another node", notice("elsewhere", protocol.PodAnnotationNotice), "only the pods on its own Node (rbac-gpu-a), not default/elsewhere")
	denied("a condition on a pod on another node", condition("elsewhere", protocol.PodConditionMaintenance), "only the pods on its own Node")
	denied("another annotation of a pod on its node", notice("told", "example.com/owner"), "only the notice annotation")
	denied("another condition of a pod on its node", condition("told", "Ready"), "only the notice condition")
	// DisruptionTarget, before a delete: True, with a reason of its own,
	// on its own node's pods only.
	for _, reason := range protocol.DisruptionReasons {
		if err := conditionWith("told", string(corev1.DisruptionTarget), "True", reason); err != nil {
			t.Errorf("the agent could not set DisruptionTarget (%s) on a pod on its node: %v", reason, err)
		}
	}
	denied("DisruptionTarget with another reason", conditionWith("told", string(corev1.DisruptionTarget), "True", "EvictionByEvictionAPI"), "a reason of its own")
	denied("DisruptionTarget False", conditionWith("told", string(corev1.DisruptionTarget), "False", protocol.DisruptionPreemption), "a reason of its own")
	denied("DisruptionTarget on a pod on another node", conditionWith("elsewhere", string(corev1.DisruptionTarget), "True", protocol.DisruptionPreemption), "only the pods on its own Node")

	// Nothing else.
	checkAccess(t, as, []access{
		{"get", "", "nodes", "", "", true},
		{"update", "", "nodes", "", "", true},
		{"list", "", "pods", "", "", true},
		{"create", "", "pods", "default", "eviction", true},
		{"create", "", "events", "default", "", true},
		{"watch", "policy", "poddisruptionbudgets", "default", "", true},
		{"update", "policy", "poddisruptionbudgets", "default", "", false},
		{"patch", "", "nodes", "", "", false},
		{"update", "", "nodes", "", "status", false},
		{"patch", "", "nodes", "", "status", true},
		{"delete", "", "nodes", "", "", false},
		{"create", "", "pods", "default", "", false},
		{"update", "", "pods", "default", "", false},
		{"patch", "", "pods", "default", "status", true},
		{"get", "", "secrets", "default", "", false},
		{"list", "", "configmaps", "default", "", false},
		{"update", "apps", "daemonsets", ans, "", false},
		{"get", "", "secrets", ns, "maintenance-handler-eviction-check", false},
		{"create", "coordination.k8s.io", "leases", ans, "", true},
		{"list", "coordination.k8s.io", "leases", ans, "", false},
		{"create", "coordination.k8s.io", "leases", ns, "", false},
		{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", false},
		{"update", "admissionregistration.k8s.io", "validatingadmissionpolicies", "", "", false},
	})

	// The aggregator: what it needs, and no more.
	tr, err = world.Client.CoreV1().ServiceAccounts(ns).CreateToken(testworld.Ctx(t, 10*time.Second), "maintenance-handler-aggregator", &authnv1.TokenRequest{}, metav1.CreateOptions{})
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
		{"patch", "", "nodes", "", "", true}, // the answers to the agents' Compute asks
		{"create", "", "events", "default", "", true},
		{"create", "coordination.k8s.io", "leases", ns, "", true},
		{"get", "coordination.k8s.io", "leases", ns, "", false}, // only its own Lease, by name (below)
		{"delete", "", "nodes", "", "", false},
		{"list", "", "pods", "", "", false},
		{"get", "", "pods", "default", "", true}, // the pod an eviction names (the eviction check)
		{"create", "", "pods", "default", "eviction", false},
		{"get", "", "secrets", ns, "", false}, // only the check's CA, by name (below)
		{"create", "", "secrets", ns, "", true},
		{"create", "coordination.k8s.io", "leases", "kube-system", "", false},
		{"watch", "coordination.k8s.io", "leases", ans, "", true}, // the observed nodes' (observe-only)
		{"create", "coordination.k8s.io", "leases", ans, "", false},
		{"list", "", "configmaps", "kube-system", "", false}, // only the autoscaler's status, by name (below)
		{"get", "", "secrets", "kube-system", "", false},
		{"update", "apps", "deployments", ns, "", false},
	})
	// Its leader-election Lease, and the claims Lease that fences its
	// triggers.
	for _, verb := range []string{"get", "list", "watch"} {
		r, err := agg.AuthorizationV1().SelfSubjectAccessReviews().Create(testworld.Ctx(t, 10*time.Second), &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: verb, Resource: "configmaps", Namespace: "kube-system", Name: "cluster-autoscaler-status"}},
		}, metav1.CreateOptions{})
		if err != nil || !r.Status.Allowed {
			t.Errorf("the aggregator cannot %s the cluster autoscaler's status: %v %+v", verb, err, r.Status)
		}
	}
	for _, named := range []authzv1.ResourceAttributes{
		{Verb: "get", Resource: "secrets", Namespace: ns, Name: "maintenance-handler-eviction-check"},
		{Verb: "update", Resource: "secrets", Namespace: ns, Name: "maintenance-handler-eviction-check"},
		{Verb: "get", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: evictionWebhook},
		{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: evictionWebhook},
	} {
		r, err := agg.AuthorizationV1().SelfSubjectAccessReviews().Create(testworld.Ctx(t, 10*time.Second), &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &named}}, metav1.CreateOptions{})
		if err != nil || !r.Status.Allowed {
			t.Errorf("the aggregator cannot %s %s %s: %v %+v", named.Verb, named.Resource, named.Name, err, r.Status)
		}
	}
	for _, lease := range []string{"maintenance-handler-aggregator", aggregator.ClaimsLeaseName("maintenance-handler-aggregator")} {
		for _, verb := range []string{"get", "update"} {
			r, err := agg.AuthorizationV1().SelfSubjectAccessReviews().Create(testworld.Ctx(t, 10*time.Second), &authzv1.SelfSubjectAccessReview{
				Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
					Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: lease}},
			}, metav1.CreateOptions{})
			if err != nil || !r.Status.Allowed {
				t.Errorf("the aggregator cannot %s the Lease %s: %v %+v", verb, lease, err, r.Status)
			}
		}
	}

	aggregatorWritesOnlyTheCA(t, agg)
	aggregatorWritesOnlyItsKeys(t, agg, "rbac-plain")

	// The real agent under these permissions.
	t.Run("AgentWithItsPodBoundTokenDoesItsJob", func(t *testing.T) { agentWithBoundToken(t, podC) })
	t.Run("AgentWhoseTokenNamesNoNodeChangesNothingAndSaysWhy", agentWithoutNodeName)
	t.Run("AgentDrainsUnderPreemptionWhileTheCheckIsDown", agentDrainsWhileTheCheckIsDown)
}

// agentVM starts the agent binary for node with a kubeconfig holding token
// and an emulated metadata server, and returns its VM.
func agentVM(t testing.TB, node, token string, args ...string) *vms.VM {
	t.Helper()
	bins, err := vms.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testworld.WriteKubeconfig(kubeconfig, world.ConfigForToken(token)); err != nil {
		t.Fatal(err)
	}
	v := &vms.VM{Name: node, Emu: gceemu.New(gceemu.Config{Name: node, Project: "p", Zone: "z"})}
	if err := v.Emu.Start(); err != nil {
		t.Fatal(err)
	}
	f := &vms.Fleet{World: world, AgentBin: filepath.Join(bins, "agent"), VMs: []*vms.VM{v},
		AgentArgs: append([]string{"--kubeconfig", kubeconfig, "--eviction-retry-interval", "1s"}, args...)}
	if err := f.StartAgent(v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = v.Agent.Stop(10 * time.Second)
		f.Close()
	})
	return v
}

// workload runs a pod on node and returns its namespace and name.
func workload(t *testing.T, node string) (string, string) {
	t.Helper()
	ns := world.Namespace(t)
	one := int64(1)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &one, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
	if _, err := world.Client.CoreV1().Pods(ns).Create(testworld.Ctx(t, 10*time.Second), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := world.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod on %s never ran: %v", node, err)
	}
	return ns, p.Name
}

func healthz(v *vms.VM) (int, string) {
	resp, err := http.Get("http://" + v.MetricsAddr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// agentWithBoundToken runs the agent binary as the DaemonSet runs it: with
// a token bound to its pod on the node, through RBAC and the admission
// policy. A scheduled notice labels the node; host maintenance taints it,
// evicts the workload and marks it terminating; /healthz is ok: every write
// the agent makes is one the policy allows.
func agentWithBoundToken(t *testing.T, pod *corev1.Pod) {
	tr := agentToken(t, pod)
	node := pod.Spec.NodeName
	wns, name := workload(t, node)
	v := agentVM(t, node, tr.Status.Token, "--node-name", node, "--pod-namespace", pod.Namespace, "--pod-name", pod.Name,
		"--policy-configmap", testworld.ShippedNamespace+"/maintenance-handler")
	v.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(72*time.Hour), 4*time.Hour))
	world.WaitNode(t, node, "the scheduled-maintenance-time label", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" && n.Annotations[protocol.AnnotationIdleSince] != "" && n.Annotations[protocol.AnnotationLastBootID] != ""
	})
	// The workload is told, under the same permissions (RBAC and the
	// policy on pods).
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := world.Client.CoreV1().Pods(wns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && strings.Contains(p.Annotations[protocol.PodAnnotationNotice], "MAINTENANCE_PHASE="+protocol.NoticePending), nil
	})
	if err != nil {
		t.Error("the workload pod was never told of the pending maintenance")
	}
	v.Emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitNode(t, node, "terminating, tainted and cordoned", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating && protocol.HasTaint(n) && n.Spec.Unschedulable
	})
	if _, err := world.Client.CoreV1().Pods(wns).Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the workload pod is still there (%v)", err)
	}
	if _, err := world.Client.CoreV1().Pods(pod.Namespace).Get(testworld.Ctx(t, 10*time.Second), pod.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the agent's own pod: %v", err)
	}
	if code, body := healthz(v); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
}

// agentWithoutNodeName runs the agent with a token of its service account
// that is bound to no pod, so it names no node (as on a cluster whose
// tokens lack the node name): the policy refuses its every Node update, so
// host maintenance changes nothing, no pod is evicted, and /healthz says
// why.
func agentWithoutNodeName(t *testing.T) {
	const node = "rbac-gpu-d"
	world.NodeT(t, testworld.NodeSpec{Name: node})
	tr, err := world.Client.CoreV1().ServiceAccounts(testworld.ShippedAgentNamespace).CreateToken(testworld.Ctx(t, 10*time.Second), "maintenance-handler-agent", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wns, name := workload(t, node)
	v := agentVM(t, node, tr.Status.Token, "--node-name", node, "--unhealthy-after", "15s", "--metadata-timeout", "4s")
	v.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(72*time.Hour), 4*time.Hour))
	v.Emu.SetMaintenanceEvent(gceemu.EventTerminate)
	var code int
	var body string
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 2*time.Minute), time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		code, body = healthz(v)
		return code == http.StatusServiceUnavailable, nil
	})
	if err != nil || !strings.Contains(body, "its token names no node") {
		t.Errorf("/healthz: %d %q, want 503 naming the policy's refusal", code, body)
	}
	n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if protocol.HasTaint(n) || n.Spec.Unschedulable || n.Labels[protocol.LabelActiveMaintenance] != "" || n.Labels[protocol.LabelScheduledMaintenanceTime] != "" {
		t.Errorf("the node changed: labels %v, taints %v, unschedulable %v", n.Labels, n.Spec.Taints, n.Spec.Unschedulable)
	}
	p, err := world.Client.CoreV1().Pods(wns).Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the workload pod was touched: %v", err)
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
		r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(testworld.Ctx(t, 10*time.Second), &authzv1.SelfSubjectAccessReview{
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

// kinds lists "Kind namespace/name" of objs.
func kinds(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = o
	}
	return out
}

// matches reports whether labels has every key and value of selector.
func matches(selector map[string]any, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}
