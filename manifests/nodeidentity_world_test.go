package manifests_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestNodeIdentityFencedLikeTheAgent: with the base applied, node A's own
// identity (its kubelet's client certificate, system:node:A, under the
// Node authorizer and NodeRestriction) writes what a kubelet writes (its
// status, a condition no fault policy names, its own Events), and none of
// the product's keys: it cannot approve its own
// repair, ask for it, take on the agent's state, taint itself as the
// aggregator does, rewrite its pool's settings, write node B, or write an
// Event as the product or about node B.
func TestNodeIdentityFencedLikeTheAgent(t *testing.T) {
	testworld.Need(t)
	world.NodeT(t, testworld.NodeSpec{Name: "kubelet-a"})
	world.NodeT(t, testworld.NodeSpec{Name: "kubelet-b"})
	apply(t, render(t, "base"))
	cfg, err := world.ConfigForNode(t.TempDir(), "kubelet-a")
	if err != nil {
		t.Fatal(err)
	}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testworld.Ctx(t, 2*time.Minute)
	// The API server takes policies up a moment after they are written:
	// wait until a dry run of one write each policy refuses is refused.
	probeEvent := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubelet-a.", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "kubelet-b", APIVersion: "v1"}, Reason: "Probe", Message: "probe",
		Source: corev1.EventSource{Component: protocol.EventSourceAggregator}, Type: corev1.EventTypeNormal}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := as.CoreV1().Nodes().Get(ctx, "kubelet-a", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		n.Annotations[protocol.AnnotationFaultRepair] = "{}"
		_, nodeErr := as.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		_, eventErr := as.CoreV1().Events("default").Create(ctx, probeEvent, dryRun)
		return nodeErr != nil && eventErr != nil, nil
	})
	if err != nil {
		t.Fatalf("the policies never took effect: %v", err)
	}
	update := func(node string, change func(*corev1.Node)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := as.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(n)
			_, err = as.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
	}
	// What a kubelet and a detector running with its credentials write.
	if err := update("kubelet-a", func(n *corev1.Node) { n.Labels["example.com/rack"] = "r7" }); err != nil {
		t.Errorf("its own label: %v, want allowed", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := as.CoreV1().Nodes().Get(ctx, "kubelet-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "GPUUnhealthy", Status: corev1.ConditionTrue, Reason: "XID79",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()})
		_, err = as.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("a condition no fault policy names, on its own node: %v, want allowed", err)
	}

	const fenced = "system:node:kubelet-a may not change the Node"
	for _, tc := range []struct {
		what   string
		change func(*corev1.Node)
	}{
		{"approving its own repair", func(n *corev1.Node) {
			protocol.WriteRepairApproval(n, protocol.RepairApproval{Behavior: protocol.BehaviorChipError, Source: protocol.FaultSourcePerson,
				Approved: time.Now(), DrainTimeout: protocol.Duration(time.Minute)})
		}},
		{"asking for its own repair", func(n *corev1.Node) { n.Labels[protocol.LabelReportFaulty] = protocol.BehaviorChipError }},
		{"the agent's state: draining for a repair", func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationPhase], n.Annotations[protocol.AnnotationReason] = string(protocol.PhaseDraining), string(protocol.ReasonFault)
		}},
		{"opting its pool out", func(n *corev1.Node) { n.Labels[protocol.LabelOpportunisticDisable] = "true" }},
		{"asking for its own maintenance (a place under the caps)", func(n *corev1.Node) { n.Labels[protocol.LabelPerformMaintenance] = protocol.TriggerValue }},
		{"asking GKE for its repair, outside every cap", func(n *corev1.Node) { n.Labels[protocol.LabelFaultBehavior] = protocol.BehaviorChipError }},
		{"asking the aggregator for a call on its VM", func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeCall] = protocol.Encode(protocol.ComputeCall{ID: "x", Method: protocol.CallPerformMaintenance})
		}},
		{"its pool's opportunistic configuration", func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationOpportunisticConfig] = "node-idle-time=1s,min-nodes=0"
		}},
	} {
		if err := update("kubelet-a", tc.change); err == nil || !strings.Contains(err.Error(), fenced) {
			t.Errorf("%s: %v, want denied saying %q", tc.what, err, fenced)
		}
	}
	// NodeRestriction keeps a node off every taint (the policy too, where
	// a cluster runs without it).
	err = update("kubelet-a", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: protocol.TaintFaulty, Effect: corev1.TaintEffectNoSchedule})
	})
	if err == nil || !strings.Contains(err.Error(), fenced) && !strings.Contains(err.Error(), "not allowed to modify taints") {
		t.Errorf("the faulty taint: %v, want denied", err)
	}
	if err := update("kubelet-b", func(n *corev1.Node) { n.Labels["example.com/rack"] = "r7" }); err == nil {
		t.Error("node A's identity changed node B; want it denied (NodeRestriction)")
	}

	event := func(component, node string) error {
		e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: node + ".", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, APIVersion: "v1"},
			Reason:         "NodeReady", Message: "a kubelet's word", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: component, Host: "kubelet-a"}, Count: 1,
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now()}
		_, err := as.CoreV1().Events("default").Create(ctx, e, metav1.CreateOptions{})
		return err
	}
	if err := event("kubelet", "kubelet-a"); err != nil {
		t.Errorf("the kubelet's Event about its own node: %v, want allowed", err)
	}
	for what, err := range map[string]error{
		"an Event as the aggregator": event(protocol.EventSourceAggregator, "kubelet-a"),
		"an Event as the agent":      event(protocol.EventSourceAgent, "kubelet-a"),
	} {
		if err == nil || !strings.Contains(err.Error(), "only maintenance-handler writes Events as maintenance-handler") {
			t.Errorf("%s: %v, want denied", what, err)
		}
	}
	if err := event("kubelet", "kubelet-b"); err == nil || !strings.Contains(err.Error(), "about its own Node only, not kubelet-b") {
		t.Errorf("an Event about node B: %v, want denied", err)
	}
	// The cluster's admin is no product either.
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubelet-a.", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "kubelet-a", APIVersion: "v1"}, Reason: "FaultRepairApproved", Message: "forged",
		Source: corev1.EventSource{Component: protocol.EventSourceAggregator}, Type: corev1.EventTypeWarning}
	if _, err := world.Client.CoreV1().Events("default").Create(ctx, e, metav1.CreateOptions{}); err == nil {
		t.Error("the admin wrote an Event as the aggregator; want it denied")
	}
}
