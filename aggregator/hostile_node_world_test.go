package aggregator_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/internal/plugin"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestOneHostileNodeMovesNoOtherNode is the security model's whole claim
// in one world: one node, holding every identity it can mint (its agent's
// token bound to a pod on it, its kubelet's, and a DaemonSet account's
// with Node write, its token bound to a pod on it), tries every path the
// product's trust model closes, against the shipped manifests and the
// aggregator as shipped (its own identity, reading VMs through Compute
// Engine, --reservation-groups subblock). The world beside it: its
// reservation sub-block's sibling, an honest node of its pool, and a
// four-host TPU slice, each running its workload.
//
// As a proven member of its sub-block, the node:
//   - with the DaemonSet account, writes a person's request on its
//     sibling, an approval, the aggregator's facts and group state on
//     itself: each refused by admission;
//   - with its kubelet, moves itself to another pool and writes GKE's
//     health prediction: refused;
//   - with its agent's token, writes a manual maintenance under way and
//     asks for its group's maintenance: answered not-vouched;
//   - then a fault repair under way and a repair that ended now, in a pool
//     that repairs one node at a time and one a week: the honest node a
//     person reports faulty still has its repair approved.
//
// Then its Node is deleted, and its kubelet registers it again into the TPU
// slice's pool (the slice's topology, four chips patched into its
// capacity), and its new agent token writes a preemption under way that
// starts a year ahead, with maintenance begun.
//
// Nothing else moves: no other Node is cordoned, tainted or asked to
// drain; no pod but the honest node's (its repair) is deleted; Compute
// Engine is called for no VM but the honest node's report; the node takes
// no place under its pools' caps (the honest repair holds the only one).
func TestOneHostileNodeMovesNoOtherNode(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 8*time.Minute)
	const pool, tpuPool = "hn-a4", "hn-v5p"
	sb := gceemu.SubBlock{Reservation: "hn-res", Block: "block-8", SubBlock: "sub-8"}
	p, project, members, emus := runningSubBlock(t, ctx, sb, "hn", pool)
	honest := relayPool(t, ctx, p, pool, 1)
	const reported = pool + "-0"
	slice := newSliceOf(t, ctx, p, tpuPool, 4)
	moved := nodesMoved(t, ctx)
	deleted := firstSeen(t, ctx, podsOf(p.ns), podDeleted)
	configMap(t, p.ns, "pools:\n  "+pool+":\n    faults:\n      maxInRepair: \"1\"\n      repairRate: 1/168h\n      drainTimeout: 1m\n")
	addr := testworld.FreeAddrT(t)
	reservation := fmt.Sprintf("projects/%s/zones/%s/reservations/%s", emus[0].Config().Project, emus[0].Config().Zone, sb.Reservation)
	p.readingAggregator("agg-hostile", addr, project, "--reservation-groups", "subblock", "--reservations", reservation, "--reservation-interval", "1s",
		"--config-map", "maintenance-handler")
	world.WaitNodes(t, members, "read by the aggregator: in the sub-block", func(n *corev1.Node) bool {
		f, ok := protocol.ReadVMFacts(n)
		return ok && f.PhysicalBlock == sb.Block && f.PhysicalSubblock == sb.SubBlock
	})
	world.WaitNodes(t, slice.hosts, "read by the aggregator: TPU VMs", func(n *corev1.Node) bool {
		f, ok := protocol.ReadVMFacts(n)
		return ok && f.MachineType == v5pMachine
	})

	hostile, sibling := members[0], members[1]
	agent := hostileAgent(t, p, hostile)
	h := world.HostileNode(t, hostile)
	world.ShippedFences(t, h)
	original, err := world.Client.CoreV1().Nodes().Get(ctx, hostile, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Admission refuses every key the node does not write.
	for _, w := range []struct {
		who    string
		client kubernetes.Interface
		node   string
		patch  string
	}{
		{"the DaemonSet account", h.DaemonSet, sibling, labelPatch(protocol.LabelPerformMaintenance, protocol.TriggerValue)},
		{"the DaemonSet account", h.DaemonSet, hostile, annotationPatch(protocol.AnnotationFaultRepair, `{"behavior":"PERFORMANCE"}`)},
		{"the DaemonSet account", h.DaemonSet, hostile, annotationPatch(protocol.AnnotationVMFacts, `{"id":"x","machineType":"ct5p-hightpu-4t"}`)},
		{"the DaemonSet account", h.DaemonSet, sibling, annotationPatch(protocol.AnnotationReservationGroup, `{}`)},
		{"the kubelet", h.Kubelet, hostile, labelPatch(protocol.LabelNodePool, tpuPool)},
		{"the kubelet", h.Kubelet, hostile, labelPatch(protocol.LabelHealthPrediction, "false")},
		{"the agent", agent, sibling, labelPatch(protocol.LabelPerformMaintenance, protocol.TriggerValue)},
	} {
		_, err := w.client.CoreV1().Nodes().Patch(ctx, w.node, types.MergePatchType, []byte(w.patch), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s of %s patching %s with %s: %v, want refused", w.who, hostile, w.node, w.patch, err)
		}
	}

	// Its agent's token: its group's maintenance, for a manual
	// maintenance no one asked for.
	const id = "hostile-group-1"
	forge(t, agent, hostile, func(n *corev1.Node) {
		now := time.Now()
		protocol.WriteAgentState(n, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: now,
			Deadline: now.Add(time.Hour), RequestID: id, BootID: n.Status.NodeInfo.BootID, Drain: protocol.DrainDone})
		n.Annotations[protocol.AnnotationComputeCall] = protocol.Encode(protocol.ComputeCall{ID: id, Method: protocol.CallGroupMaintenance, SubBlock: true})
	})
	world.WaitNode(t, hostile, "answered not-vouched", func(n *corev1.Node) bool {
		a, ok := protocol.ReadComputeAnswer(n)
		return ok && a.ID == id && a.Outcome == protocol.CallNotVouched
	})

	// A fault repair under way on its word, and one that ended now: the
	// pool's one place in repair and its one repair a week stay free.
	forge(t, agent, hostile, func(n *corev1.Node) {
		now := time.Now().UTC()
		protocol.WriteAgentState(n, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonFault, Started: now,
			Deadline: now.Add(time.Hour), RepairCall: protocol.RepairReport, BootID: n.Status.NodeInfo.BootID})
		n.Annotations[protocol.AnnotationLastFaultRepair] = protocol.Encode(protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: now})
	})
	passes(t, ctx, addr, 2)
	setLabel(t, ctx, reported, protocol.LabelReportFaulty, protocol.BehaviorChipError)
	world.WaitEvent(t, reported, protocol.EventFaultRepairApproved)

	// Its Node goes away (a kubelet may not delete it: a person, or the
	// autoscaler, does), and its kubelet registers it again, into the TPU
	// slice.
	if err := h.Kubelet.CoreV1().Nodes().Delete(ctx, hostile, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the kubelet deleting its own Node: %v, want forbidden", err)
	}
	if err := world.Client.CoreV1().Nodes().Delete(ctx, hostile, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for k, v := range original.Labels {
		labels[k] = v
	}
	labels[protocol.LabelNodePool] = tpuPool
	labels[protocol.LabelTPUTopology] = "2x2x4"
	labels[protocol.LabelTPUAccelerator] = "tpu-v5p-slice"
	again := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: hostile, Labels: labels, Annotations: map[string]string{testworld.KwokNodeAnnotation: testworld.KwokNodeValue}},
		Spec: corev1.NodeSpec{ProviderID: original.Spec.ProviderID}}
	if _, err := h.Kubelet.CoreV1().Nodes().Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the kubelet registering its Node into the slice's pool: %v", err)
	}
	chips := fmt.Appendf(nil, `{"status":{"capacity":{%q:"4"},"allocatable":{%q:"4"}}}`, protocol.ResourceTPU, protocol.ResourceTPU)
	if _, err := h.Kubelet.CoreV1().Nodes().PatchStatus(ctx, hostile, chips); err != nil {
		t.Fatalf("the kubelet's patch of its capacity: %v", err)
	}
	reborn := world.HostileNode(t, hostile)
	ahead := time.Now().Add(365 * 24 * time.Hour).UTC().Truncate(time.Second)
	forge(t, reborn.Agent, hostile, func(n *corev1.Node) {
		protocol.WriteAgentState(n, protocol.AgentState{Phase: protocol.PhaseTerminating, Reason: protocol.ReasonPreemption, Started: ahead,
			Deadline: time.Now().Add(20 * time.Second).UTC(), Begun: true})
	})
	// Every agent of the slice steps on it (its slice watch wakes it); the
	// aggregator decides twice with it.
	passes(t, ctx, addr, 2)

	others := append([]string{sibling}, slice.hosts...)
	untouched(t, ctx, others...)
	for _, name := range others {
		if at := moved.at(name); !at.IsZero() {
			t.Errorf("%s was moved at %s", name, at.Format(time.RFC3339Nano))
		}
	}
	for _, pod := range []string{"rank-1", "job-0", "job-1", "job-2", "job-3"} {
		if at := deleted.at(pod); !at.IsZero() {
			t.Errorf("the pod %s was deleted at %s", pod, at.Format(time.RFC3339Nano))
		}
	}
	all := append([]*gceemu.Server{}, emus...)
	for _, v := range slice.vms {
		all = append(all, v.Emu)
	}
	for _, e := range all {
		if calls := e.Calls(); len(calls) != 0 {
			t.Errorf("Compute Engine calls for %s: %+v; want none", e.Config().Name, calls)
		}
	}
	for _, c := range honest[reported].Emu.Calls() {
		if c.Method != "reportHostAsFaulty" {
			t.Errorf("Compute Engine call for %s: %+v; want only the report a person asked for", reported, c)
		}
	}
	c, _ := clients(t)
	in, err := plugin.Read(ctx, c, time.Now(), plugin.ReadOptions{PoolLabel: protocol.LabelNodePool, ReservationGroups: protocol.ReservationGroupSubblock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The honest node's repair holds its pool's one place; the hostile
	// node holds none, in either pool.
	status := plugin.BuildStatus(in)
	want := map[string]int{pool: 1, tpuPool: 0}
	for _, ps := range status.Pools {
		if w, ok := want[ps.Pool]; ok && ps.Voluntary != w {
			t.Errorf("the pool %s has %d node(s) in voluntary maintenance or repair; want %d", ps.Pool, ps.Voluntary, w)
		}
	}
	if status.Cluster.Voluntary != 1 {
		t.Errorf("the cluster has %d node(s) in voluntary maintenance or repair; want 1, the honest repair", status.Cluster.Voluntary)
	}
}

// labelPatch is a merge patch setting a Node label.
func labelPatch(key, value string) string {
	return fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
}

// annotationPatch is a merge patch setting a Node annotation.
func annotationPatch(key, value string) string {
	return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
}
