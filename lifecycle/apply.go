package lifecycle

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Apply writes d onto n: the state and its consequences (package
// protocol), the trigger consumed when d says so, and the cordon. It
// reports whether n changed.
func (d Decision) Apply(n *corev1.Node) bool {
	before := n.DeepCopy()
	protocol.WriteAgentState(n, d.State)
	if d.RemoveTrigger {
		protocol.ConsumeTrigger(n)
	}
	if d.RemoveRepair {
		protocol.ConsumeRepairApproval(n)
	}
	if d.RemoveReport {
		protocol.ConsumeReportFaulty(n)
	}
	if d.FaultBehavior != "" {
		n.Labels[protocol.LabelFaultBehavior] = d.FaultBehavior
	}
	if d.RemoveFaultBehavior {
		delete(n.Labels, protocol.LabelFaultBehavior)
	}
	if d.Cordon {
		n.Spec.Unschedulable = true
	}
	if d.Uncordon {
		n.Spec.Unschedulable = false
	}
	return !equalNode(before, n)
}

func equalNode(a, b *corev1.Node) bool {
	if a.Spec.Unschedulable != b.Spec.Unschedulable || len(a.Spec.Taints) != len(b.Spec.Taints) {
		return false
	}
	for i := range a.Spec.Taints {
		if a.Spec.Taints[i].Key != b.Spec.Taints[i].Key || a.Spec.Taints[i].Effect != b.Spec.Taints[i].Effect {
			return false
		}
	}
	return equalMap(a.Labels, b.Labels) && equalMap(a.Annotations, b.Annotations)
}

func equalMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
