package main

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestLiveMigratingVMIsNotDrained: the agent binary on a VM whose metadata
// server says on-host-maintenance MIGRATE (a node without accelerators,
// labelled by mistake). It says so in an Event, mirrors the notice as
// ever, refuses perform-maintenance=true with the reason (no Compute
// Engine call, the workload untouched, the refusal counted), and records
// MIGRATE_ON_HOST_MAINTENANCE without draining.
func TestLiveMigratingVMIsNotDrained(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	ns := world.Namespace(t)
	const name = "bin-migrate-0"
	world.NodeT(t, testworld.NodeSpec{Name: name, NoAccelerators: true})
	emu := gceemu.StartT(t, gceemu.Config{Name: name, LiveMigrates: true, MachineType: "c3-standard-8", ProvisioningModel: "STANDARD"})
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(2*time.Hour), 4*time.Hour))
	grace := int64(5)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "server"},
		Spec: corev1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/server:1"}}}}
	if _, err := world.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	world.WaitPod(t, ns, "server", "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	proc := runAgent(t, name, emu, "--compute-endpoint", emu.ComputeEndpoint())
	world.WaitEvent(t, name, protocol.EventLiveMigrates, "MIGRATE")
	world.WaitNode(t, name, "the notice mirrored", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })

	patch := `{"metadata":{"labels":{"` + protocol.LabelPerformMaintenance + `":"true"}}}`
	if _, err := world.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	world.WaitEvent(t, name, protocol.EventManualRejected, "live-migrates on host maintenance")
	n := world.WaitNode(t, name, "the trigger removed", func(n *corev1.Node) bool {
		_, set := n.Labels[protocol.LabelPerformMaintenance]
		return !set
	})
	if n.Spec.Unschedulable || protocol.HasTaint(n) || protocol.ReadAgentState(n).Active() {
		t.Errorf("refused, yet cordoned %t, taints %v, state %+v", n.Spec.Unschedulable, n.Spec.Taints, protocol.ReadAgentState(n))
	}
	if calls := emu.Calls(); len(calls) != 0 {
		t.Errorf("Compute Engine was called: %+v", calls)
	}
	// instances.get answered MIGRATE too, held to the API's description
	// (StartT fails the test on a problem with any exchange).
	if !slices.ContainsFunc(emu.Exchanges(), func(ex gceemu.Exchange) bool { return ex.MethodID == "compute.instances.get" }) {
		t.Error("the agent never read instances.get: its answer of MIGRATE was not checked against the API's description")
	}
	poll(t, "the refusal counted", time.Minute, func() bool {
		_, m := proc.get("/metrics")
		return metricValue(t, m, "maintenance_handler_agent_manual_triggers_total", map[string]string{"outcome": protocol.ManualLiveMigrates}) == 1
	})

	emu.SetMaintenanceEvent(gceemu.EventMigrate)
	world.WaitEvent(t, name, protocol.EventMigrateOnHost)
	if n := getNodeNow(t, name); n.Spec.Unschedulable || protocol.HasTaint(n) {
		t.Errorf("a live migration cordoned (%t) or tainted (%v) the node", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if p, err := world.Client.CoreV1().Pods(ns).Get(ctx, "server", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the workload was asked to stop: %v", err)
	}
}

func getNodeNow(t testing.TB, name string) *corev1.Node {
	t.Helper()
	n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
