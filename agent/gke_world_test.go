package agent_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestAgentLeavesKeysItDidNotWrite: on a GKE node whose own maintenance
// handler has labelled and tainted it, an idle agent that writes its Node
// (a notice to mirror) leaves GKE's label and taint as they are.
func TestAgentLeavesKeysItDidNotWrite(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-gke-keys-0")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, v.name)
		n.Labels[protocol.LabelActiveMaintenance] = protocol.ValueOngoing
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: protocol.TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule})
		_, err := world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{FieldManager: "gke-maintenance-handler"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 24, 3, 0, 0, 0, time.UTC), 4*time.Hour))
	startAgent(t, v, lifecycle.DefaultConfig)
	// The agent's write: the label of the notice, in the same update that
	// would have stripped the rest.
	n := world.WaitNode(t, v.name, "scheduled label", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	if n.Labels[protocol.LabelActiveMaintenance] != protocol.ValueOngoing || !protocol.HasTaint(n) {
		t.Errorf("the idle agent removed GKE's keys: labels %v, taints %v", n.Labels, n.Spec.Taints)
	}
}

// TestONGOINGDrainsOnlyWhereMaintenanceEventIsNotServed: where the VM
// serves maintenance-event (GPU VMs), a notice turning ONGOING only drops
// the scheduled label, and the drain starts on TERMINATE_ON_HOST_MAINTENANCE,
// as GKE 1.33 does; where it does not (TPU VMs), ONGOING is the signal and
// starts the drain, and the missing key is not a warning.
func TestONGOINGDrainsOnlyWhereMaintenanceEventIsNotServed(t *testing.T) {
	testworld.Need(t)
	start := time.Date(2026, 12, 24, 3, 0, 0, 0, time.UTC)
	gpu := newVM(t, "agent-ongoing-gpu")
	gpu.emu.ScheduleNotice(gceemu.ScheduledNotice(start, 4*time.Hour))
	startAgent(t, gpu, lifecycle.DefaultConfig)
	world.WaitNode(t, gpu.name, "scheduled label", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	gpu.emu.SetNoticeStatus(gceemu.StatusOngoing)
	// The agent's write for ONGOING: the scheduled label goes, nothing else.
	n := world.WaitNode(t, gpu.name, "scheduled label dropped", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] == "" })
	if protocol.HasTaint(n) || n.Labels[protocol.LabelActiveMaintenance] != "" || n.Spec.Unschedulable {
		t.Fatalf("ONGOING drained a VM that serves maintenance-event: labels %v", n.Labels)
	}
	gpu.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitNode(t, gpu.name, "drained on TERMINATE", func(n *corev1.Node) bool {
		return protocol.HasTaint(n) && n.Annotations[protocol.AnnotationReason] == string(protocol.ReasonHostMaintenance)
	})

	tpu := newVMWith(t, "agent-ongoing-tpu", gceemu.Config{NoMaintenanceEvent: true})
	tpu.emu.ScheduleNotice(gceemu.ScheduledNotice(start, 4*time.Hour))
	startAgent(t, tpu, lifecycle.DefaultConfig)
	world.WaitNode(t, tpu.name, "scheduled label", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	tpu.emu.SetNoticeStatus(gceemu.StatusOngoing)
	world.WaitNode(t, tpu.name, "drained on ONGOING", func(n *corev1.Node) bool {
		return protocol.HasTaint(n) && n.Labels[protocol.LabelActiveMaintenance] != ""
	})
	// Events are recorded in order: once the drain's is there, a warning
	// about the missing key (emitted when it was first read) would be too.
	world.WaitEvent(t, tpu.name, protocol.EventMaintenanceStarted)
	if got := nodeEvents(t, tpu.name)[protocol.EventUnrecognizedValue]; got != 0 {
		t.Errorf("%d %s Events for a key the VM does not serve", got, protocol.EventUnrecognizedValue)
	}
}

// TestAgentMigratesAnOlderAgentsNotice: notice keys an agent of an older
// version mirrored (written under the agent's field manager, without the
// record this version keeps) are the agent's own, not another
// controller's: when the VM no longer serves that notice, the upgraded
// agent removes them once and says so, so the aggregator no longer sees a
// pending maintenance there. GKE's keys stay (TestAgentLeavesGKEsMaintenanceToIt).
func TestAgentMigratesAnOlderAgentsNotice(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-migrate-0")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, v.name)
		n.Labels[protocol.LabelScheduledMaintenanceTime] = "1798081200"
		n.Annotations[protocol.AnnotationUpcomingMaintenance] = `{"maintenance_status":"PENDING","type":"SCHEDULED","can_reschedule":true,"window_start_time":"2026-12-24T03:00:00+00:00"}`
		_, err := world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{FieldManager: protocol.FieldManagerAgent})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "the older agent's notice removed", func(n *corev1.Node) bool {
		_, label := n.Labels[protocol.LabelScheduledMaintenanceTime]
		_, annotation := n.Annotations[protocol.AnnotationUpcomingMaintenance]
		return !label && !annotation && n.Annotations[protocol.AnnotationLastBootID] != ""
	})
	world.WaitEvent(t, v.name, protocol.EventMaintenanceCancelled)
}

// gkeWrites changes node as GKE's handler does: an update under its field
// manager.
func gkeWrites(t *testing.T, node string, change func(n *corev1.Node)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, node)
		change(n)
		_, err := world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{FieldManager: protocol.FieldManagerGKE})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAgentLeavesGKEsMaintenanceToIt: on a GKE node whose own handler
// mirrors the notice and handles the maintenance, an agent whose VM does
// not serve the notice (404) leaves GKE's notice keys alone and says
// nothing was cancelled; when TERMINATE_ON_HOST_MAINTENANCE comes while
// GKE's handler holds the node (its passthrough label and taint), the
// agent leaves the maintenance to it: no pod is evicted, GKE's keys stay,
// and the interruption is counted once, when the VM comes back as well.
func TestAgentLeavesGKEsMaintenanceToIt(t *testing.T) {
	testworld.Need(t)
	v := newVMWith(t, "agent-gke-defer-0", gceemu.Config{Absence: gceemu.AbsentNotFound})
	const notice = `{"maintenance_status":"PENDING","type":"SCHEDULED","window_start_time":"2026-12-24T03:00:00+00:00"}`
	gkeWrites(t, v.name, func(n *corev1.Node) {
		n.Labels[protocol.LabelScheduledMaintenanceTime] = "1798081200"
		n.Annotations[protocol.AnnotationUpcomingMaintenance] = notice
	})
	ns := world.Namespace(t)
	createPod(t, makePod(ns, "trainer", v.name, 5, time.Second))
	world.WaitRunning(t, v.name, 1)
	pod := watchPod(t, ns, "trainer")
	r := startAgent(t, v, lifecycle.DefaultConfig)
	// The agent's first write (what the VM runs): it would have removed
	// GKE's notice in the same update.
	n := world.WaitNode(t, v.name, "the agent's first write", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationLastBootID] != "" })
	if n.Labels[protocol.LabelScheduledMaintenanceTime] != "1798081200" || n.Annotations[protocol.AnnotationUpcomingMaintenance] != notice {
		t.Errorf("an agent with no notice of its own removed GKE's: labels %v, annotations %v", n.Labels, n.Annotations)
	}

	gkeWrites(t, v.name, func(n *corev1.Node) {
		n.Labels[protocol.LabelActiveMaintenance] = "passthrough"
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: protocol.TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule})
	})
	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitEvent(t, v.name, protocol.EventLeftToGKE)
	n = world.WaitNode(t, v.name, "the maintenance recorded as GKE's", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationLeftToGKE] == "true" })
	if n.Spec.Unschedulable || n.Labels[protocol.LabelActiveMaintenance] != "passthrough" {
		t.Errorf("left to GKE, yet cordoned %t, label %q", n.Spec.Unschedulable, n.Labels[protocol.LabelActiveMaintenance])
	}

	reboot(t, v, r)
	n = world.WaitNode(t, v.name, "back in service", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationPhase] == "" })
	if n.Labels[protocol.LabelActiveMaintenance] != "passthrough" || !protocol.HasTaint(n) {
		t.Errorf("back in service, the agent removed GKE's keys: labels %v, taints %v", n.Labels, n.Spec.Taints)
	}
	if got := protocol.ReadAgentState(n).Interruptions; len(got) != 1 || got[protocol.HostMaintenance.Key()] != 1 {
		t.Errorf("interruptions %v, want one host maintenance", got)
	}
	if podGone(t, ns, "trainer") {
		t.Errorf("the agent evicted a pod of a maintenance it left to GKE's handler")
	}
	select {
	case end := <-pod.end:
		t.Errorf("the pod ended: %+v", end)
	default:
	}
	if got := nodeEvents(t, v.name)[protocol.EventMaintenanceCancelled]; got != 0 {
		t.Errorf("%d %s Events for a notice the agent never had", got, protocol.EventMaintenanceCancelled)
	}
}

// TestAgentLeavesHostMaintenanceToGKEsHandler: GKE's handler of 1.33 and
// later drains host maintenance itself and writes the very label and taint
// the agent writes, so their values cannot tell who wrote them. On a node
// whose kubelet is GKE's 1.33, the agent leaves a host maintenance to
// GKE's handler from TERMINATE on, before that handler writes anything,
// and its later writes change nothing. On a node whose kubelet does not
// say so, the agent drains, and GKE's handler applying the same value
// after the agent is told by its field manager: the drain stops there.
func TestAgentLeavesHostMaintenanceToGKEsHandler(t *testing.T) {
	testworld.Need(t)
	backUntouched := func(t *testing.T, v *vm, r *running, ns string) {
		t.Helper()
		reboot(t, v, r)
		n := world.WaitNode(t, v.name, "back in service", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationPhase] == "" })
		if n.Labels[protocol.LabelActiveMaintenance] != protocol.ValueOngoing || n.Spec.Unschedulable {
			t.Errorf("back in service: label %q (GKE's, to stay), cordoned %t", n.Labels[protocol.LabelActiveMaintenance], n.Spec.Unschedulable)
		}
		if got := protocol.ReadAgentState(n).Interruptions; len(got) != 1 || got[protocol.HostMaintenance.Key()] != 1 {
			t.Errorf("interruptions %v, want one host maintenance", got)
		}
		if podGone(t, ns, "trainer") {
			t.Error("the agent evicted a pod of a maintenance it left to GKE's handler")
		}
	}

	t.Run("GKE 1.33: left to GKE's handler from TERMINATE", func(t *testing.T) {
		v := newVMOn(t, testworld.NodeSpec{Name: "agent-gke133-0", KubeletVersion: "v1.33.2-gke.1240000"}, gceemu.Config{})
		ns := world.Namespace(t)
		createPod(t, makePod(ns, "trainer", v.name, 5, time.Second))
		world.WaitRunning(t, v.name, 1)
		r := startAgent(t, v, lifecycle.DefaultConfig)
		v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
		world.WaitEvent(t, v.name, protocol.EventLeftToGKE)
		n := world.WaitNode(t, v.name, "the maintenance recorded as GKE's", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationLeftToGKE] == "true" })
		if n.Spec.Unschedulable || n.Labels[protocol.LabelActiveMaintenance] != "" || protocol.HasTaint(n) {
			t.Errorf("left to GKE, yet the agent cordoned (%t), labelled (%q) or tainted (%v)", n.Spec.Unschedulable, n.Labels[protocol.LabelActiveMaintenance], n.Spec.Taints)
		}
		// GKE's handler writes what the agent would have written.
		gkeWrites(t, v.name, func(n *corev1.Node) {
			n.Labels[protocol.LabelActiveMaintenance] = protocol.ValueOngoing
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: protocol.TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule})
		})
		backUntouched(t, v, r, ns)
	})

	t.Run("the agent first, GKE's handler the same value after", func(t *testing.T) {
		v := newVM(t, "agent-gke-after-0")
		ns := world.Namespace(t)
		p := makePod(ns, "trainer", v.name, 5, time.Second)
		p.Labels = map[string]string{"app": "trainer"}
		createPod(t, p)
		guard(t, p)
		r := startAgent(t, v, lifecycle.DefaultConfig)
		v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
		world.WaitEvent(t, v.name, protocol.EventBlocked)
		if n := getNode(t, v.name); n.Labels[protocol.LabelActiveMaintenance] != protocol.ValueOngoing || !protocol.HasTaint(n) {
			t.Fatalf("draining: label %q, taints %v", n.Labels[protocol.LabelActiveMaintenance], n.Spec.Taints)
		}
		// Server-side apply records GKE's handler as an owner of the label
		// though its value does not change (an update of the same value
		// records nothing).
		apply := corev1ac.Node(v.name).WithLabels(map[string]string{protocol.LabelActiveMaintenance: protocol.ValueOngoing})
		if _, err := world.Client.CoreV1().Nodes().Apply(testworld.Ctx(t, 10*time.Second), apply, metav1.ApplyOptions{FieldManager: protocol.FieldManagerGKE}); err != nil {
			t.Fatal(err)
		}
		world.WaitEvent(t, v.name, protocol.EventLeftToGKE)
		world.WaitNode(t, v.name, "the maintenance recorded as GKE's", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationLeftToGKE] == "true" })
		backUntouched(t, v, r, ns)
	})
}

// TestAgentRepeatsNoEventOfGKEsHandler: on a node whose kubelet is GKE's
// 1.35, GKE's handler writes the host maintenance Events itself (source
// NodeTerminationHandler). The agent records none of those reasons for a
// notice and its TERMINATE, and records its own, the hand-over to GKE's
// handler, with its own source. Its Events are written in the order
// recorded, so the hand-over, recorded last, comes after any of the others.
func TestAgentRepeatsNoEventOfGKEsHandler(t *testing.T) {
	testworld.Need(t)
	v := newVMOn(t, testworld.NodeSpec{Name: "agent-gke135-0", KubeletVersion: "v1.35.0-gke.2232000"}, gceemu.Config{})
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(time.Hour), time.Hour))
	startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "the notice mirrored", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	if e := world.WaitEvent(t, v.name, protocol.EventLeftToGKE); e.Source.Component != protocol.EventSourceAgent {
		t.Errorf("the hand-over's source is %q, want %q", e.Source.Component, protocol.EventSourceAgent)
	}
	events, err := world.Client.CoreV1().Events("").List(testworld.Ctx(t, 10*time.Second),
		metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + v.name})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Source.Component == protocol.EventSourceAgent && protocol.IsGKEEventReason(e.Reason) {
			t.Errorf("the agent recorded %s (%q), which GKE's handler writes itself", e.Reason, e.Message)
		}
	}
}
