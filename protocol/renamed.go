package protocol

import corev1 "k8s.io/api/core/v1"

// RenamedTaints maps the keys earlier releases wrote the aggregator's
// taints under to their keys now. The aggregator renames each it finds
// (RenameTaints), same effect and value; nothing else reads the old keys.
var RenamedTaints = map[string]string{
	"maintenance-handler.io/faulty":     TaintFaulty,
	"maintenance-handler.io/slice-down": TaintSliceDown,
}

// RenameTaints gives n's taints under an old key (RenamedTaints) their key
// now, and reports whether it changed n. A taint already under the new key
// wins: the old one is then dropped.
func RenameTaints(n *corev1.Node) bool {
	changed := false
	taints := n.Spec.Taints[:0:0]
	for _, t := range n.Spec.Taints {
		if now, ok := RenamedTaints[t.Key]; ok {
			changed = true
			if HasTaintKey(n, now) {
				continue
			}
			t.Key = now
		}
		taints = append(taints, t)
	}
	if changed {
		n.Spec.Taints = taints
	}
	return changed
}

// HasRenamedTaint: n has a taint under an old key (RenamedTaints).
func HasRenamedTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if _, ok := RenamedTaints[t.Key]; ok {
			return true
		}
	}
	return false
}
