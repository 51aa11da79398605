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
	// GKE's handler writing the very value the agent writes: only its
	// field manager tells.
	same := &corev1.Node{}
	protocol.WriteAgentState(same, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance})
	same.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: protocol.FieldManagerGKE, Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:` + protocol.LabelActiveMaintenance + `":{}}}}`)}}
	if got := GKEHandling(same, protocol.ReadAgentState(same)); got == "" {
		t.Error("GKE's handler wrote the agent's own value: not seen")
	}
}

// TestGKEHandlesHostMaintenance: GKE's kubelets of 1.33 and later run a
// handler that drains host maintenance itself; others do not.
func TestGKEHandlesHostMaintenance(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.33.2-gke.1240000": true, "v1.34.0-gke.100": true, "v2.0.0-gke.1": true,
		"v1.32.4-gke.1000": false, "v1.33.2": false, "1.33.2-gke.1": false, "v1.x-gke.1": false, "": false,
	} {
		if got := GKEHandlesHostMaintenance(v); got != want {
			t.Errorf("GKEHandlesHostMaintenance(%q) = %t, want %t", v, got, want)
		}
	}
}
