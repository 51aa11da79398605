package aggregator

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestVouch: the leader makes a call a node asks for only for the
// maintenance under way on it, on its own VM, and as far as what the node
// cannot write allows.
func TestVouch(t *testing.T) {
	started := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	node := func(reason protocol.Reason, call protocol.RepairCall, approved bool, change func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{}, Annotations: map[string]string{}},
			Spec: corev1.NodeSpec{ProviderID: "gce://p1/us-central1-a/gpu-0"}}
		protocol.WriteAgentState(n, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: reason, Started: started, Deadline: started.Add(time.Hour),
			RequestID: "req-1", RepairCall: call})
		if approved {
			protocol.WriteRepairApproval(n, protocol.RepairApproval{Behavior: protocol.BehaviorUnrecoverableGPUError, Source: "condition",
				Approved: started, DrainTimeout: protocol.Duration(time.Minute), Request: "req-1"})
		}
		if reason == protocol.ReasonManual {
			n.Labels[protocol.LabelPerformMaintenance] = protocol.TriggerValue
		}
		if change != nil {
			change(n)
		}
		return n
	}
	perform := protocol.ComputeCall{ID: "req-1", Method: protocol.CallPerformMaintenance}
	report := protocol.ComputeCall{ID: "req-1", Method: protocol.CallReportHostAsFaulty, Behavior: protocol.BehaviorUnrecoverableGPUError}
	group := protocol.ComputeCall{ID: "req-1", Method: protocol.CallGroupMaintenance, SubBlock: true}
	// inSubBlock labels n into a sub-block, with the leader's read of its
	// VM proving it runs there.
	inSubBlock := func(n *corev1.Node) {
		n.Labels[protocol.LabelTopologyBlock], n.Labels[protocol.LabelTopologySubblock] = "block-7", "sub-3"
		n.Annotations[protocol.AnnotationVMFacts] = protocol.Encode(protocol.VMFacts{ID: "read-1", Block: "projects/p1/zones/us-central1-a/reservations/r/reservationBlocks/block-7",
			PhysicalBlock: "block-7", PhysicalSubblock: "sub-3"})
	}
	// labelledIn labels n into the sub-block, with no read of its VM.
	labelledIn := func(n *corev1.Node) {
		n.Labels[protocol.LabelTopologyBlock], n.Labels[protocol.LabelTopologySubblock] = "block-7", "sub-3"
	}
	subBlocks := protocol.Grouping{PoolLabel: protocol.LabelNodePool, Reservation: protocol.ReservationGroupSubblock}
	// sibling is another member of the sub-block, in the state st says.
	sibling := func(name string, st protocol.AgentState) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		inSubBlock(n)
		protocol.WriteAgentState(n, st)
		return n
	}
	drained := protocol.AgentState{Phase: protocol.PhaseTerminating, Reason: protocol.ReasonSlice, Started: started, Deadline: started.Add(time.Hour)}
	draining := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonSlice, Started: started, Deadline: started.Add(time.Hour)}
	caller := node(protocol.ReasonManual, "", false, inSubBlock)
	for _, tc := range []struct {
		name  string
		n     *corev1.Node
		c     protocol.ComputeCall
		g     protocol.Grouping
		group []*corev1.Node
		home  *Home  // nil: p1, us-central1 and europe-north1
		zone  string // the VM's zone when vouched ("": us-central1-a)
		why   string // "" when vouched
	}{
		{name: "a manual maintenance's call", n: node(protocol.ReasonManual, "", false, nil), c: perform},
		{name: "a report of the approved behavior", n: node(protocol.ReasonFault, protocol.RepairReport, true, nil), c: report},
		{name: "a repair's booked performMaintenance", n: node(protocol.ReasonFault, protocol.RepairPerformMaintenance, true, nil), c: perform},
		{name: "a group call in a sub-block", n: caller, c: group, g: subBlocks, group: []*corev1.Node{caller, sibling("gpu-1", drained)}},
		{name: "a group call, every other member drained", n: caller, c: group, g: subBlocks,
			group: []*corev1.Node{caller, sibling("gpu-1", drained), sibling("gpu-2", drained)}},
		{name: "a manual maintenance no one asked for (the node's own word)", c: perform,
			n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { delete(n.Labels, protocol.LabelPerformMaintenance) }), why: "no one asked"},
		{name: "a perform-maintenance label of another value", c: perform,
			n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { n.Labels[protocol.LabelPerformMaintenance] = "yes" }), why: "no one asked"},
		{name: "a group call no one asked for", c: group, g: subBlocks, why: "no one asked",
			n:     node(protocol.ReasonManual, "", false, func(n *corev1.Node) { inSubBlock(n); delete(n.Labels, protocol.LabelPerformMaintenance) }),
			group: []*corev1.Node{caller, sibling("gpu-1", drained)}},
		{name: "a group call while a member runs its workload", n: caller, c: group, g: subBlocks,
			group: []*corev1.Node{caller, sibling("gpu-1", drained), sibling("gpu-2", protocol.AgentState{})}, why: "gpu-2 is not drained"},
		{name: "a group call from a node labelled into the sub-block", c: group, g: subBlocks, why: "not proven",
			n: node(protocol.ReasonManual, "", false, labelledIn), group: []*corev1.Node{caller, sibling("gpu-1", drained)}},
		{name: "a group call while a member still drains", n: caller, c: group, g: subBlocks,
			group: []*corev1.Node{caller, sibling("gpu-1", draining)}, why: errGroupDraining.Error()},
		{name: "a group call after a member's drain left pods", n: caller, c: group, g: subBlocks, why: "pods still on it",
			group: []*corev1.Node{caller, sibling("gpu-1", protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonSlice, Started: started,
				Deadline: started.Add(time.Hour), Drain: protocol.DrainIncomplete})}},
		{name: "a report for another request than the approval's", n: node(protocol.ReasonFault, protocol.RepairReport, true, func(n *corev1.Node) {
			a, _ := protocol.ReadRepairApproval(n)
			a.Request = "req-0"
			protocol.WriteRepairApproval(n, a)
		}), c: report, why: "for request \"req-0\""},
		{name: "a report with an approval that names no request", n: node(protocol.ReasonFault, protocol.RepairReport, true, func(n *corev1.Node) {
			a, _ := protocol.ReadRepairApproval(n)
			a.Request = ""
			protocol.WriteRepairApproval(n, a)
		}), c: report, why: "not \"req-1\""},
		{name: "another request ID", n: node(protocol.ReasonManual, "", false, nil), c: protocol.ComputeCall{ID: "forged", Method: protocol.CallPerformMaintenance},
			why: "not the one asked for"},
		{name: "no maintenance under way", n: node("", "", false, func(n *corev1.Node) { protocol.WriteAgentState(n, protocol.AgentState{}) }), c: perform,
			why: "not the one asked for"},
		{name: "a report with no approval", n: node(protocol.ReasonFault, protocol.RepairReport, false, nil), c: report, why: "no repair"},
		{name: "a report of another behavior", n: node(protocol.ReasonFault, protocol.RepairReport, true, nil),
			c: protocol.ComputeCall{ID: "req-1", Method: protocol.CallReportHostAsFaulty, Behavior: protocol.BehaviorChipError}, why: "no repair"},
		{name: "a repair's performMaintenance with no approval", n: node(protocol.ReasonFault, protocol.RepairPerformMaintenance, false, nil), c: perform, why: "no repair"},
		{name: "a report for a host maintenance", n: node(protocol.ReasonHostMaintenance, "", true, nil), c: report, why: "does not ask for"},
		{name: "a performMaintenance for a preemption", n: node(protocol.ReasonPreemption, "", false, nil), c: perform, why: "does not ask for"},
		{name: "a group call for the whole block where the leader groups by sub-block", n: caller, g: subBlocks, why: "its reservation group is its sub-block",
			c: protocol.ComputeCall{ID: "req-1", Method: protocol.CallGroupMaintenance}, group: []*corev1.Node{caller, sibling("gpu-1", drained)}},
		{name: "a group call outside any group", n: node(protocol.ReasonManual, "", false, nil), c: group, g: subBlocks, why: "no reservation group"},
		{name: "another VM's providerID", n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { n.Spec.ProviderID = "gce://p1/us-central1-a/gpu-9" }),
			c: perform, why: "not its own"},
		{name: "no providerID", n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { n.Spec.ProviderID = "" }), c: perform, why: "providerID"},
		{name: "a VM of its name in another zone of the region", n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { n.Spec.ProviderID = "gce://p1/us-central1-f/gpu-0" }),
			c: perform, zone: "us-central1-f"},
		{name: "a VM of its name in another project", n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { n.Spec.ProviderID = "gce://p2/us-central1-a/gpu-0" }),
			c: perform, why: "not the cluster's p1"},
		{name: "a VM of its name in another region", n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { n.Spec.ProviderID = "gce://p1/europe-west4-b/gpu-0" }),
			c: perform, why: "in none of the cluster's regions"},
		{name: "a VM of its name in a zone with no region", n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { n.Spec.ProviderID = "gce://p1/us-central1/gpu-0" }),
			c: perform, why: "in none of the cluster's regions"},
		{name: "an aggregator that knows no home", n: node(protocol.ReasonManual, "", false, nil), c: perform, home: &Home{}, why: "knows no project"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := Home{Project: "p1", Regions: []string{"us-central1", "europe-north1"}}
			if tc.home != nil {
				home = *tc.home
			}
			zone := "us-central1-a"
			if tc.zone != "" {
				zone = tc.zone
			}
			inst, err := vouch(tc.n, tc.c, tc.g, tc.group, home, started.Add(time.Minute))
			switch {
			case tc.why == "" && err != nil:
				t.Fatalf("not vouched: %v", err)
			case tc.why == "" && (inst.Name != "gpu-0" || inst.Zone != zone || inst.Project != "p1"):
				t.Fatalf("the call is made on %+v; want the node's own VM", inst)
			case tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)):
				t.Fatalf("vouch said %v; want it refused: %q", err, tc.why)
			}
		})
	}
}

// TestRelayBuckets: each node has a bucket per kind of its own: a burst of
// relayBurst at once, then one every hour/rate, on the injected clock; one
// node spending its own leaves every other node's, and its other kind's,
// whole.
func TestRelayBuckets(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	b := newRelayBuckets(clk, 60)
	var waits []time.Duration
	for range relayBurst + 2 {
		d, _ := b.take("rotating", relayCall)
		waits = append(waits, d)
	}
	want := make([]time.Duration, relayBurst+2)
	want[relayBurst], want[relayBurst+1] = time.Minute, 2*time.Minute
	if d := cmp.Diff(want, waits); d != "" {
		t.Errorf("waits of one node's calls (-want +got):\n%s", d)
	}
	if d, _ := b.take("rotating", relayRead); d != 0 {
		t.Errorf("its first read waits %s; want none", d)
	}
	if d, _ := b.take("other", relayCall); d != 0 {
		t.Errorf("another node's first call waits %s; want none", d)
	}
	clk.Step(3 * time.Minute)
	if d, _ := b.take("rotating", relayCall); d != 0 {
		t.Errorf("a call after the waits were served waits %s; want none", d)
	}
	// A token taken for work not done (a group call that waits for its
	// members) is given back.
	d, refund := b.take("rotating", relayCall)
	refund()
	if again, _ := b.take("rotating", relayCall); d != time.Minute || again != d {
		t.Errorf("waits %s, then %s after a refund; want a minute both times", d, again)
	}
}

// TestRegionOf: a zone's region is its name less the dash and letter that
// end it; a name that does not end so (a region's own) has none.
func TestRegionOf(t *testing.T) {
	got := map[string]string{}
	for _, z := range []string{"us-central1-a", "europe-west4-b", "us-east5-c", "us-central1", "us-central1-A", "zone", "us-", ""} {
		got[z] = RegionOf(z)
	}
	want := map[string]string{"us-central1-a": "us-central1", "europe-west4-b": "europe-west4", "us-east5-c": "us-east5",
		"us-central1": "", "us-central1-A": "", "zone": "", "us-": "", "": ""}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("regions (-want +got):\n%s", d)
	}
}
