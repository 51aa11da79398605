package protocol

// The agent's taint on its Node, and what the taints on a Node say.

import corev1 "k8s.io/api/core/v1"

// setTaint puts the impending-termination taint on n, or takes it off.
func setTaint(n *corev1.Node, on bool) {
	taints := n.Spec.Taints[:0:0]
	found := false
	for _, t := range n.Spec.Taints {
		if isOurTaint(t) {
			found = true
			if !on {
				continue
			}
		}
		taints = append(taints, t)
	}
	if on && !found {
		taints = append(taints, corev1.Taint{Key: TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule})
	}
	if len(taints) == 0 {
		taints = nil
	}
	n.Spec.Taints = taints
}

func isOurTaint(t corev1.Taint) bool {
	return t.Key == TaintImpendingTermination && t.Effect == corev1.TaintEffectNoSchedule
}

// HasTaint reports whether the impending-termination taint is on n.
func HasTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if isOurTaint(t) {
			return true
		}
	}
	return false
}

// HasTaintKey reports whether a taint with key is on n, whatever its
// effect.
func HasTaintKey(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// InMaintenance: a maintenance is under way on n or asked for (the
// active-maintenance label, the perform-maintenance label, or the
// impending-termination taint).
func InMaintenance(n *corev1.Node) bool {
	_, active := n.Labels[LabelActiveMaintenance]
	_, asked := n.Labels[LabelPerformMaintenance]
	return active || asked || HasTaint(n)
}
