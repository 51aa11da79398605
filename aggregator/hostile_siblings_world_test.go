package aggregator_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestHostileMemberDrainsNoSibling: one proven member of a two-VM
// reservation sub-block (real agents, --reservation-groups subblock, VMs
// the aggregator reads through Compute Engine, a pod on each) writes with
// its agent's token, on its own Node, a manual maintenance under way with
// a deadline 20 hours on. No one asked for it (no perform-maintenance
// label, no call of the aggregator's): after the aggregator's passes, the
// sibling carries no ask, no taint, no cordon, and its pod runs. A
// person's label on the member then drains the sibling, and it began to
// drain only after.
func TestHostileMemberDrainsNoSibling(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	sb := gceemu.SubBlock{Reservation: "sibling-res", Block: "block-6", SubBlock: "sub-6"}
	p, project, hosts, emus := runningSubBlock(t, ctx, sb, "hs", "a4s")
	draining := nodesMoved(t, ctx)
	deleted := firstSeen(t, ctx, podsOf(p.ns), podDeleted)
	addr := readSubBlock(t, p, project, emus, sb, hosts, "agg-siblings")

	member, sibling := hosts[0], hosts[1]
	h := hostileAgent(t, p, member)
	now := time.Now().UTC().Truncate(time.Second)
	writeState(t, ctx, h, member, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: now,
		Deadline: now.Add(20 * time.Hour), RequestID: "forged-sibling-1"})

	// The sibling's agent steps on the forged state (its group watch wakes
	// it); the aggregator decides twice with it.
	passes(t, ctx, addr, 2)
	untouched(t, ctx, sibling)
	if at := deleted.at("rank-1"); !at.IsZero() {
		t.Errorf("the sibling's pod rank-1 deleted at %s, for a maintenance no one asked for", at.Format(time.RFC3339Nano))
	}

	asked := time.Now()
	setLabel(t, ctx, member, protocol.LabelPerformMaintenance, protocol.TriggerValue)
	world.WaitNodes(t, []string{sibling}, "drained with its group, for the person's request", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Reason == protocol.ReasonSlice && protocol.HasTaint(n) && protocol.HasTaintKey(n, protocol.TaintSliceDown)
	})
	world.WaitEvent(t, sibling, protocol.EventSliceDrain, "Host "+member)
	if at := draining.at(sibling); at.IsZero() || at.Before(asked) {
		t.Errorf("%s began to drain at %s; want after the person asked (%s)", sibling, at.Format(time.RFC3339Nano), asked.Format(time.RFC3339Nano))
	}
	if at := deleted.at("rank-1"); !at.IsZero() && at.Before(asked) {
		t.Errorf("rank-1 deleted at %s, before the person asked (%s)", at.Format(time.RFC3339Nano), asked.Format(time.RFC3339Nano))
	}
}
