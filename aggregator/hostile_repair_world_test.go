package aggregator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// lapsePolicy: one node of the pool in repair at a time, on a detector's
// condition held a second, drained within two seconds.
const lapsePolicy = `
pools:
  lapse:
    faults:
      conditions:
      - type: GPUUnhealthy
        for: 1s
        behavior: UNRECOVERABLE_GPU_ERROR
      maxInRepair: "1"
      drainTimeout: 2s
`

// lapsePool registers nodes (kwok plays them; no agent runs) in the pool
// of lapsePolicy, which it writes, and returns the test's context and
// processes.
func lapsePool(t *testing.T, nodes ...string) (context.Context, *procs) {
	t.Helper()
	testworld.Need(t)
	ctx := testworld.Ctx(t, 3*time.Minute)
	p := newProcs(t)
	for _, name := range nodes {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "lapse"})
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	configMap(t, p.ns, lapsePolicy)
	return ctx, p
}

// TestHostileApprovalLapses: a node whose repair is approved and whose
// agent never asks for the report (it lies, or is gone) holds its pool's
// only place under maxInRepair no longer than the drain timeout and the
// aggregator's --repair-ask-grace: the approval is withdrawn with a
// Warning Event, the pool's other faulty node is approved, and the first
// is not approved again within the pool's cool-down, though its condition
// still holds. Before approvals lapsed, the first held the place for as
// long as it liked.
func TestHostileApprovalLapses(t *testing.T) {
	const holder, waiting = "lapse-a-holder", "lapse-b-waiting"
	ctx, p := lapsePool(t, holder, waiting)
	setCondition(t, holder, corev1.ConditionTrue)
	addr := testworld.FreeAddrT(t)
	p.aggregatorWith("agg-lapse", addr, "maintenance-handler", "--repair-ask-grace", "2s")
	approved := world.WaitNode(t, holder, "its repair approved", func(n *corev1.Node) bool {
		_, ok := n.Annotations[protocol.AnnotationFaultRepair]
		return ok
	})
	// The waiting node's fault comes after the holder's approval: the
	// holder was approved first, and nothing but its lapse frees the place.
	setCondition(t, waiting, corev1.ConditionTrue)
	world.WaitNode(t, waiting, "its repair approved once the holder's lapsed", func(n *corev1.Node) bool {
		_, ok := n.Annotations[protocol.AnnotationFaultRepair]
		return ok
	})
	world.WaitEvent(t, holder, protocol.EventFaultRepairApprovalLapsed)
	passes(t, ctx, addr, 3)
	n, err := world.Client.CoreV1().Nodes().Get(ctx, holder, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if raw, ok := n.Annotations[protocol.AnnotationFaultRepair]; ok {
		t.Errorf("the holder is approved again (%s; first approval %s), within the pool's cool-down", raw, approved.Annotations[protocol.AnnotationFaultRepair])
	}
	if !protocol.HasTaintKey(n, protocol.TaintFaulty) {
		t.Error("the holder lost its faulty taint: its condition still holds")
	}
}

// TestHostileFullNodeHoldsNoPlace: a node whose kubelet fills its own
// Node's annotations to just under the API server's limit (the shipped
// fences let it: the annotation is no product key) makes every update of
// the aggregator's to it refused. Its repair's approval, claimed before
// the write, holds no place once the write is refused: the aggregator
// says so, and the pool's other faulty node is approved. Before, the
// claim counted for as long as the Node stayed as it was, and the node,
// first in the queue, was claimed again each pass.
func TestHostileFullNodeHoldsNoPlace(t *testing.T) {
	const holder, waiting = "full-a-holder", "full-b-waiting"
	ctx, p := lapsePool(t, holder, waiting)
	h := world.HostileNode(t, holder)
	world.ShippedFences(t, h)
	n, err := h.Kubelet.CoreV1().Nodes().Get(ctx, holder, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const key = "example.com/pad"
	total := 0
	for k, v := range n.Annotations {
		total += len(k) + len(v)
	}
	// The API server takes a Node's annotations up to 256 KiB in all.
	pad, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: strings.Repeat("x", 256*1024-total-len(key)-64)}}})
	if _, err := h.Kubelet.CoreV1().Nodes().Patch(ctx, holder, types.MergePatchType, pad, metav1.PatchOptions{}); err != nil {
		t.Fatalf("the kubelet's own annotation refused: %v", err)
	}
	setCondition(t, holder, corev1.ConditionTrue)
	p.aggregatorWith("agg-full", testworld.FreeAddrT(t), "maintenance-handler")
	world.WaitEvent(t, holder, protocol.EventFaultRepairApprovalLapsed, "could not be written")
	setCondition(t, waiting, corev1.ConditionTrue)
	world.WaitNode(t, waiting, "its repair approved", func(n *corev1.Node) bool {
		_, ok := n.Annotations[protocol.AnnotationFaultRepair]
		return ok
	})
}
