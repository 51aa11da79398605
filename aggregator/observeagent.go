package aggregator

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// showAgent is n with the changes of an observed node's agent shadow s
// (read from a Lease the node's own identities write) that its agent may
// make on a Node (agentWrites); n itself when s is nil. Every other key
// (the node's pool and TPU labels, the aggregator's vm-facts, approvals
// and answers, a person's triggers) is shown as the Node holds it: a
// shadow is the node's word about itself, never about what others write
// of it. The cordon is the agent's to change (it drains its node).
func showAgent(n *corev1.Node, s *protocol.Shadow) *corev1.Node {
	if s == nil {
		return n
	}
	shown := n.DeepCopy()
	s.Overlay(shown)
	shown.Labels = agentMapOnly(protocol.Label, n.Labels, shown.Labels)
	shown.Annotations = agentMapOnly(protocol.Annotation, n.Annotations, shown.Annotations)
	shown.Spec.Taints = agentTaintsOnly(n.Spec.Taints, shown.Spec.Taints)
	return shown
}

// agentWrite is what a node's agent may do to one key on its own Node.
type agentWrite struct{ set, remove bool }

// agentWrites are, by kind and name, the keys an agent may set or remove
// on its own Node, from protocol.Keys' writer table (Setters, Removers):
// its own keys, and those it shares with GKE's handler as the node's word.
var agentWrites = func() map[protocol.Kind]map[string]agentWrite {
	out := map[protocol.Kind]map[string]agentWrite{}
	agent := func(who []protocol.Who) bool {
		return slices.Contains(who, protocol.WhoAgent) || slices.Contains(who, protocol.WhoOwnNode)
	}
	for _, k := range protocol.NodeKeys() {
		w := agentWrite{set: agent(k.Setters()), remove: agent(k.Removers())}
		if !w.set && !w.remove {
			continue
		}
		if out[k.Kind] == nil {
			out[k.Kind] = map[string]agentWrite{}
		}
		out[k.Kind][k.Name] = w
	}
	return out
}()

// agentMay reports whether the agent may leave key of kind present (or
// absent) on its Node where the Node holds something else.
func agentMay(kind protocol.Kind, key string, present bool) bool {
	w := agentWrites[kind][key]
	return present && w.set || !present && w.remove
}

// agentMapOnly is shown (n's labels or annotations with a shadow's
// changes) with each change the agent may not make put back as real has
// it.
func agentMapOnly(kind protocol.Kind, real, shown map[string]string) map[string]string {
	out := maps.Clone(shown)
	keys := slices.Concat(slices.Collect(maps.Keys(real)), slices.Collect(maps.Keys(shown)))
	for _, k := range keys {
		rv, inReal := real[k]
		sv, inShown := shown[k]
		if rv == sv && inReal == inShown || agentMay(kind, k, inShown) {
			continue
		}
		if inReal {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = rv
		} else {
			delete(out, k)
		}
	}
	return out
}

// agentTaintsOnly is shown (n's taints with a shadow's changes) with the
// taints of each key whose change the agent may not make as real has them.
func agentTaintsOnly(real, shown []corev1.Taint) []corev1.Taint {
	byKey := func(ts []corev1.Taint) map[string][]corev1.Taint {
		m := map[string][]corev1.Taint{}
		for _, t := range ts {
			m[t.Key] = append(m[t.Key], t)
		}
		return m
	}
	r, s := byKey(real), byKey(shown)
	keep := func(key string) bool {
		return slices.EqualFunc(r[key], s[key], sameTaint) || agentMay(protocol.Taint, key, len(s[key]) > 0)
	}
	var out []corev1.Taint
	for _, t := range shown {
		if keep(t.Key) {
			out = append(out, t)
		}
	}
	for _, t := range real {
		if !keep(t.Key) {
			out = append(out, t)
		}
	}
	return out
}
