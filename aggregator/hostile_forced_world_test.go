package aggregator_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestProvenMemberForcesNoSibling plays the attack review's forced
// maintenance: a four-host TPU slice (real agents that ask the aggregator
// for every Compute call, TPU VMs the aggregator reads through Compute
// Engine and so proves members, a pod on each host) and one proven host,
// v5p-1, whose agent token writes a preemption under way, then a host
// maintenance, then a repair with a report long over left on its Node,
// while its VM runs with nothing scheduled. The aggregator
// reads the VM, refuses each once (Warning GroupCauseUnconfirmed, counted
// by reason), and no other host is tainted, cordoned or asked to drain,
// nor its pod stopped, watched from the start. Then Compute Engine really
// preempts v5p-2: the leader reads its VM stopping, and the other hosts
// with an agent drain with it, by its deadline.
func TestProvenMemberForcesNoSibling(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	s, _, addr := readSlice(t, ctx, "agg-forced")
	moved := nodesMoved(t, ctx)

	h := hostileAgent(t, s.p, "v5p-1")
	const series = "maintenance_handler_aggregator_unconfirmed_group_causes_total"
	for _, reason := range []protocol.Reason{protocol.ReasonPreemption, protocol.ReasonHostMaintenance} {
		now := time.Now().UTC().Truncate(time.Second)
		writeState(t, ctx, h, "v5p-1", protocol.AgentState{Phase: protocol.PhaseDraining, Reason: reason, Started: now, Deadline: now.Add(20 * time.Second)})
		// The leader read the VM and refused: work done, counted once.
		waitMetric(t, ctx, addr, series+`{reason="`+string(reason)+`",why="unconfirmed"}`, 1)
		world.WaitEvent(t, "v5p-1", protocol.EventCauseUnconfirmed, "its "+string(reason)+" is under way", "its VM is RUNNING")
		// The other hosts' agents step on the forged state (their slice
		// watch wakes them); the aggregator decides twice with it.
		passes(t, ctx, addr, 2)
	}
	// A repair, with what a report long ago left on the Node (written by
	// the test's admin, for the aggregator then): its faulty taint and its
	// accepted answer for the request, in the boot the kubelet says, its
	// place long over. A stale report confirms nothing.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, "v5p-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "r-old", Operation: "op-old", Boot: n.Status.NodeInfo.BootID,
			Until: now.Add(-4 * time.Hour), Done: true, Ended: now.Add(-10 * time.Hour)})
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: protocol.TaintFaulty, Effect: corev1.TaintEffectNoSchedule})
		_, err = world.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	writeState(t, ctx, h, "v5p-1", protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonFault, Started: now, Deadline: now.Add(20 * time.Second), RequestID: "r-old"})
	waitMetric(t, ctx, addr, series+`{reason="fault",why="unconfirmed"}`, 1)
	passes(t, ctx, addr, 2)
	others := []string{"v5p-0", "v5p-2", "v5p-3"}
	untouched(t, ctx, others...)
	for _, host := range others {
		if at := moved.at(host); !at.IsZero() {
			t.Errorf("%s moved at %s, for a forced maintenance only its member's agent said", host, at.Format(time.RFC3339Nano))
		}
	}
	s.mu.Lock()
	for _, pod := range []string{"job-0", "job-2", "job-3"} {
		if st, ok := s.stopped[pod]; ok {
			t.Errorf("%s stopped %+v, for a forced maintenance only v5p-1's agent said", pod, st)
		}
	}
	s.mu.Unlock()

	// A real preemption, which the leader reads from Compute Engine.
	preempted := time.Now()
	deadline := s.preempt(t, ctx, "v5p-2")
	s.drainedWith(t, ctx, deadline, []string{"v5p-0", "v5p-3"}, []string{"job-0", "job-2", "job-3"})
	world.WaitEvent(t, "v5p-0", protocol.EventSliceDrain, "Host v5p-2 of the multi-host slice v5p stops (preemption)")
	t.Logf("v5p-2 moved (its agent, on its preemption) to v5p-0 moved (the leader's read, then its ask): %s", moved.at("v5p-0").Sub(moved.at("v5p-2")))
	for _, host := range []string{"v5p-0", "v5p-3"} {
		if at := moved.at(host); at.Before(preempted) {
			t.Errorf("%s moved at %s, before v5p-2 was preempted at %s", host, at.Format(time.RFC3339Nano), preempted.Format(time.RFC3339Nano))
		}
	}
}

// TestProvenMemberMovesItsSliceOncePerStart: a proven host whose VM
// Compute Engine really stops (v5p-1, preempted) moves its slice once:
// the other hosts drain with it, and go back in service when its agent
// token says it is back. Its token then says a preemption began again,
// while the VM is still in the start that moved the slice: refused
// (Warning GroupCauseUnconfirmed, why="bound"), and no other host is asked
// to drain again.
func TestProvenMemberMovesItsSliceOncePerStart(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	s, _, addr := readSlice(t, ctx, "agg-bound")
	others := []string{"v5p-0", "v5p-2", "v5p-3"}

	h := hostileAgent(t, s.p, "v5p-1")
	s.vms["v5p-1"].Emu.SetPreempted(true)
	first := time.Now().UTC().Truncate(time.Second)
	writeState(t, ctx, h, "v5p-1", protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: first, Deadline: first.Add(30 * time.Second)})
	world.WaitNodes(t, others, "asked to drain with v5p-1, its VM stopping", func(n *corev1.Node) bool {
		ask, ok := protocol.ReadSliceAsk(n)
		return ok && ask.Cause == "v5p-1"
	})
	writeState(t, ctx, h, "v5p-1", protocol.AgentState{Phase: protocol.PhaseIdle})
	world.WaitNodes(t, others, "back in service", func(n *corev1.Node) bool {
		_, asked := protocol.ReadSliceAsk(n)
		return !asked && !protocol.HasTaint(n) && !protocol.HasTaintKey(n, protocol.TaintSliceDown) && !n.Spec.Unschedulable && !protocol.ReadAgentState(n).Active()
	})

	again := first.Add(-time.Minute) // another maintenance, in the VM's same start
	writeState(t, ctx, h, "v5p-1", protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: again, Deadline: time.Now().Add(30 * time.Second).UTC()})
	waitMetric(t, ctx, addr, `maintenance_handler_aggregator_unconfirmed_group_causes_total{reason="preemption",why="bound"}`, 1)
	world.WaitEvent(t, "v5p-1", protocol.EventCauseUnconfirmed, "already moved its group once")
	passes(t, ctx, addr, 2)
	untouched(t, ctx, others...)
}
