package agent_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestNodeWithoutAcceleratorsKeptBusyAndDrained: a VM without
// accelerators that stops for host maintenance (an H4D, say). Idle with
// no pods; a workload pod that asks for no accelerator keeps it busy (on a
// GPU node it would not); when Compute Engine maintains the host, the
// agent drains the pod with its grace and the node is terminating.
func TestNodeWithoutAcceleratorsKeptBusyAndDrained(t *testing.T) {
	testworld.Need(t)
	v := newVMOn(t, testworld.NodeSpec{Name: "agent-h4d-0", NoAccelerators: true}, gceemu.Config{})
	ns := world.Namespace(t)
	startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "idle", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationIdleSince] != "" })

	createPod(t, makePod(ns, "solver", v.name, 3, time.Second))
	world.WaitNode(t, v.name, "busy with the workload", func(n *corev1.Node) bool {
		return n.Annotations[protocol.AnnotationIdleSince] == "" && n.Annotations[protocol.AnnotationBusy] == protocol.BusyWorkload
	})

	stopped := world.PodSeen(t, ns, "solver", "asked to stop", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	if p := stopped(); p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 3 {
		t.Errorf("the solver was asked to stop with grace %v, want its 3 s", p.DeletionGracePeriodSeconds)
	}
	world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating && protocol.HasTaint(n)
	})
}
