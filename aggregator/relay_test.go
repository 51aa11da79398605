package aggregator

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
				Approved: started, DrainTimeout: protocol.Duration(time.Minute)})
		}
		if change != nil {
			change(n)
		}
		return n
	}
	perform := protocol.ComputeCall{ID: "req-1", Method: protocol.CallPerformMaintenance}
	report := protocol.ComputeCall{ID: "req-1", Method: protocol.CallReportHostAsFaulty, Behavior: protocol.BehaviorUnrecoverableGPUError}
	group := protocol.ComputeCall{ID: "req-1", Method: protocol.CallGroupMaintenance, SubBlock: true}
	inSubBlock := func(n *corev1.Node) {
		n.Labels[protocol.LabelTopologyBlock], n.Labels[protocol.LabelTopologySubblock] = "block-7", "sub-3"
	}
	subBlocks := protocol.Grouping{PoolLabel: protocol.LabelNodePool, Reservation: protocol.ReservationGroupSubblock}
	for _, tc := range []struct {
		name string
		n    *corev1.Node
		c    protocol.ComputeCall
		g    protocol.Grouping
		why  string // "" when vouched
	}{
		{name: "a manual maintenance's call", n: node(protocol.ReasonManual, "", false, nil), c: perform},
		{name: "a report of the approved behavior", n: node(protocol.ReasonFault, protocol.RepairReport, true, nil), c: report},
		{name: "a repair's booked performMaintenance", n: node(protocol.ReasonFault, protocol.RepairPerformMaintenance, true, nil), c: perform},
		{name: "a group call in a sub-block", n: node(protocol.ReasonManual, "", false, inSubBlock), c: group, g: subBlocks},
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
		{name: "a group call outside any group", n: node(protocol.ReasonManual, "", false, nil), c: group, g: subBlocks, why: "no reservation group"},
		{name: "another VM's providerID", n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { n.Spec.ProviderID = "gce://p1/us-central1-a/gpu-9" }),
			c: perform, why: "not its own"},
		{name: "no providerID", n: node(protocol.ReasonManual, "", false, func(n *corev1.Node) { n.Spec.ProviderID = "" }), c: perform, why: "providerID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst, err := vouch(tc.n, tc.c, tc.g)
			switch {
			case tc.why == "" && err != nil:
				t.Fatalf("not vouched: %v", err)
			case tc.why == "" && (inst.Name != "gpu-0" || inst.Zone != "us-central1-a" || inst.Project != "p1"):
				t.Fatalf("the call is made on %+v; want the node's own VM", inst)
			case tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)):
				t.Fatalf("vouch said %v; want it refused: %q", err, tc.why)
			}
		})
	}
}
