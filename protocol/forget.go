package protocol

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Forget removes from n every key the agent and the aggregator write, as
// an uninstall does, and reports whether it changed n: the agent's state
// and counts (every maintenance-handler.io/ annotation), its mirror of the
// notice (not a notice another controller wrote: GKE's handler writes the
// same keys), an opportunistic trigger with its maintenance state (not a
// person's perform-maintenance label), and the slice-down taint (under
// its old key too). The node lifecycle conditions live in the Node's
// status: ForgetConditions.
//
// While a maintenance is under way on n (ReadAgentState is Active), Forget
// changes nothing and says so: the cordon, the taint and the
// active-maintenance label keep new pods off a VM about to stop, and the
// drain's state is what a reinstalled agent resumes from.
func Forget(n *corev1.Node) (changed, underWay bool) {
	st := ReadAgentState(n)
	if st.Active() {
		return false, true
	}
	before := n.DeepCopy()
	if !st.NoticeForeign {
		delete(n.Labels, LabelScheduledMaintenanceTime)
		delete(n.Annotations, AnnotationUpcomingMaintenance)
	}
	if _, _, ms := ReadTrigger(n); ms.OpportunisticTriggered {
		ConsumeTrigger(n)
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, Prefix) {
			delete(n.Annotations, k)
		}
	}
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintSliceDown || RenamedTaints[t.Key] == TaintSliceDown })
	if len(n.Spec.Taints) == 0 {
		n.Spec.Taints = nil
	}
	return !equalKeys(before, n), false
}

// ForgetConditions lists the node lifecycle conditions the agent wrote on
// n (AgentConditionTypes), which an uninstall removes.
func ForgetConditions(n *corev1.Node) []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for _, c := range n.Status.Conditions {
		if slices.Contains(AgentConditionTypes, c.Type) {
			out = append(out, c.Type)
		}
	}
	return out
}

func equalKeys(a, b *corev1.Node) bool {
	return maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) && len(a.Spec.Taints) == len(b.Spec.Taints)
}
