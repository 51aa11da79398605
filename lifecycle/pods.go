package lifecycle

// Whether the node's pods keep it busy: the rule an opportunistic
// maintenance and the agent's idle-since follow.

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Idleness tells whether a node with pods is idle. No pod on it is
// annotated safe-to-evict "false", and no pod on it other than DaemonSet
// and mirror pods and pods that have finished does the node's work: on a
// node with accelerators (accelerated), a pod that requests one of
// resources or holds an accelerator through its ResourceClaims (claimed);
// on a node without (a VM that cannot live-migrate for another reason,
// such as H4D or bare metal), any pod outside kube-system. When it is not
// idle, busy says why (protocol.BusySafeToEvict first).
func Idleness(pods []*corev1.Pod, accelerated bool, resources []corev1.ResourceName, claimed func(*corev1.Pod) bool) (idle bool, busy string) {
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Annotations[protocol.PodAnnotationSafeToEvict] == "false" {
			return false, protocol.BusySafeToEvict
		}
		kind := KindOf(p)
		switch {
		case busy != "" || kind == PodDaemonSet || kind == PodNone:
		case accelerated && (requestsAny(p, resources) || claimed(p)):
			busy = protocol.BusyAccelerators
		case !accelerated && kind == PodWorkload:
			busy = protocol.BusyWorkload
		}
	}
	return busy == "", busy
}

// PodKind is what a pod is to its node's maintenance: the drain's groups
// (drain.GroupOf) and idleness both read it.
type PodKind int

const (
	// PodNone: a mirror (static) pod or a finished one, which the drain
	// never touches and which is no work.
	PodNone PodKind = iota
	// PodWorkload: a pod in any namespace but kube-system.
	PodWorkload
	// PodSystem: a pod of kube-system.
	PodSystem
	// PodDaemonSet: a pod a DaemonSet controls.
	PodDaemonSet
)

// KindOf says what p is to its node's maintenance.
func KindOf(p *corev1.Pod) PodKind {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return PodNone
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return PodNone
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		return PodDaemonSet
	}
	if p.Namespace == metav1.NamespaceSystem {
		return PodSystem
	}
	return PodWorkload
}

func requestsAny(p *corev1.Pod, resources []corev1.ResourceName) bool {
	containers := append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...)
	for _, c := range containers {
		for _, r := range resources {
			if q, ok := c.Resources.Requests[r]; ok && !q.IsZero() {
				return true
			}
			if q, ok := c.Resources.Limits[r]; ok && !q.IsZero() {
				return true
			}
		}
	}
	return false
}

// PodGroupsOf are the pod groups of the pods that run (not finished, not
// going, not mirror pods, which the node itself writes), one pod of each
// (protocol.OnePerGroup).
func PodGroupsOf(pods []*corev1.Pod) []protocol.PodGroupClaim {
	var out []protocol.PodGroupClaim
	for _, p := range pods {
		if c, ok := protocol.PodGroupOf(p); ok && KindOf(p) != PodNone && p.DeletionTimestamp == nil {
			out = append(out, c)
		}
	}
	return protocol.OnePerGroup(out)
}

// idleness, for the aggregator: since when no workload runs, or what runs,
// and the pod groups it runs pods of.
func (d *Decision) idleness(obs Observation) {
	if !obs.PodsKnown {
		return
	}
	d.State.PodGroups = obs.PodGroups
	if obs.Idle {
		if d.State.IdleSince.IsZero() {
			d.State.IdleSince = obs.Now
		}
		d.State.Busy = ""
		return
	}
	d.State.IdleSince, d.State.Busy = time.Time{}, obs.Busy
}
