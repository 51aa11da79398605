package lifecycle

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestMaintenanceLeftToGKE: while a maintenance is left to GKE's handler,
// the agent writes neither the active-maintenance label nor the taint, and
// back in service it removes neither; GKEHandling tells GKE's keys from the
// agent's own.
func TestMaintenanceLeftToGKE(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{protocol.LabelActiveMaintenance: "passthrough"}}}
	n.Spec.Taints = []corev1.Taint{{Key: protocol.TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule}}
	if got := GKEHandling(n, protocol.AgentState{Phase: protocol.PhaseIdle}); got != "label "+protocol.LabelActiveMaintenance+"=passthrough" {
		t.Errorf("idle agent, GKE's label: GKEHandling %q", got)
	}
	if got := GKEHandling(n, protocol.AgentState{Phase: protocol.PhaseDraining}); got == "" {
		t.Error("draining agent, GKE's passthrough over its ONGOING: not seen")
	}
	left := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, LeftToGKE: true}
	protocol.WriteAgentState(n, left)
	if n.Labels[protocol.LabelActiveMaintenance] != "passthrough" || !protocol.HasTaint(n) || !protocol.ReadAgentState(n).LeftToGKE {
		t.Errorf("left to GKE: labels %v, taints %v, state %+v", n.Labels, n.Spec.Taints, protocol.ReadAgentState(n))
	}
	protocol.WriteAgentState(n, protocol.AgentState{Phase: protocol.PhaseIdle})
	if n.Labels[protocol.LabelActiveMaintenance] != "passthrough" || !protocol.HasTaint(n) || n.Annotations[protocol.AnnotationLeftToGKE] != "" {
		t.Errorf("back from a maintenance left to GKE, the agent removed GKE's keys: labels %v, taints %v, annotations %v", n.Labels, n.Spec.Taints, n.Annotations)
	}
	ours := &corev1.Node{}
	protocol.WriteAgentState(ours, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance})
	if got := GKEHandling(ours, protocol.ReadAgentState(ours)); got != "" {
		t.Errorf("the agent's own maintenance taken for GKE's: %q", got)
	}
	ours.Spec.Taints = append(ours.Spec.Taints, corev1.Taint{Key: protocol.TaintMaintenanceWindowStarted, Effect: corev1.TaintEffectPreferNoSchedule})
	if got := GKEHandling(ours, protocol.ReadAgentState(ours)); got != "taint "+protocol.TaintMaintenanceWindowStarted {
		t.Errorf("GKE's window taint: GKEHandling %q", got)
	}
}
