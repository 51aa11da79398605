package agent_test

import (
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

func TestPreemptionDrainsWithin30sAndMigrationDoesNot(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-preempt-0")
	ns := world.Namespace(t)
	createPod(t, makePod(ns, "long-grace", v.name, 600, 600*time.Second))
	r := startAgent(t, v, lifecycle.DefaultConfig)

	v.emu.SetMaintenanceEvent(gceemu.EventMigrate)
	world.WaitEvent(t, v.name, protocol.EventMigrateOnHost)
	if n := getNode(t, v.name); protocol.HasTaint(n) || n.Labels[protocol.LabelActiveMaintenance] != "" {
		t.Errorf("live migration tainted or labelled the node")
	}
	if got := testworld.Settled(t, r.metrics.Migrations, 1); got != 1 {
		t.Errorf("live migrations = %v, want 1", got)
	}

	preemptUntilTerminating(t, v, ns, "long-grace")
	if got := testworld.Settled(t, r.metrics.Interruptions.WithLabelValues(protocol.Preemption.Labels()...), 1); got != 1 {
		t.Errorf("interruptions{PreemptionEvent,Eviction} = %v, want 1", got)
	}
}

// TestPreemptionMovesTheDeadlineOfTheDrainUnderWay: a host maintenance's
// drain is held by a PodDisruptionBudget (it would delete the pod only at
// its 60 min deadline minus the grace); the VM is then preempted, and the
// drain under way takes the 30 s deadline: the pod is deleted at that
// deadline minus its grace, and the node is terminating before the VM
// stops.
func TestPreemptionMovesTheDeadlineOfTheDrainUnderWay(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-preempt-1")
	ns := world.Namespace(t)
	p := makePod(ns, "guarded", v.name, 10, time.Second)
	p.Labels = map[string]string{"app": "guarded"}
	createPod(t, p)
	guard(t, p)
	startAgent(t, v, lifecycle.DefaultConfig)
	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitEvent(t, v.name, protocol.EventBlocked)

	preemptUntilTerminating(t, v, ns, "guarded")
	world.WaitEvent(t, v.name, protocol.EventEscalated)
}
