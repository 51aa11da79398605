package agent

import (
	"encoding/json"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/metadata"
)

// annotationLastEvent is the last maintenance-event value acted on.
const annotationLastEvent = Prefix + "last-event"

// StateFromNode reads the agent's state from a Node.
func StateFromNode(n *corev1.Node) State {
	a := n.Annotations
	st := State{
		Phase:          Phase(a[AnnotationPhase]),
		Reason:         Reason(a[AnnotationReason]),
		BootID:         a[AnnotationBootID],
		CordonedBefore: a[AnnotationCordonedBefore] == "true",
		ScheduledTime:  n.Labels[LabelScheduledMaintenanceTime],
		Notice:         a[AnnotationUpcomingMaintenance],
		LastEvent:      metadata.Event(a[annotationLastEvent]),
		RequestID:      a[AnnotationRequestID],
		Busy:           a[AnnotationBusy],
	}
	switch st.Phase {
	case PhaseDraining, PhaseTerminating:
	default:
		st.Phase = PhaseIdle
	}
	st.Started, _ = time.Parse(time.RFC3339Nano, a[AnnotationStarted])
	st.Deadline, _ = time.Parse(time.RFC3339Nano, a[AnnotationDeadline])
	st.Requested, _ = time.Parse(time.RFC3339Nano, a[AnnotationRequested])
	st.IdleSince, _ = time.Parse(time.RFC3339Nano, a[AnnotationIdleSince])
	st.LastBootID, st.LastKubelet = a[AnnotationLastBootID], a[AnnotationKubeletVersion]
	st.Interruptions = InterruptionsFromNode(n)
	return st
}

// InterruptionsFromNode reads the node's interruption counts (nil when
// there are none, or they cannot be read).
func InterruptionsFromNode(n *corev1.Node) map[string]int {
	raw := n.Annotations[AnnotationInterruptions]
	if raw == "" {
		return nil
	}
	var counts map[string]int
	if json.Unmarshal([]byte(raw), &counts) != nil {
		return nil
	}
	return counts
}

// OpportunisticFromNode reports whether the aggregator set the trigger: the
// maintenance-state annotation says "opportunistic-triggered": true.
func OpportunisticFromNode(n *corev1.Node) bool {
	var ms struct {
		Opportunistic bool `json:"opportunistic-triggered"`
	}
	raw := n.Annotations[AnnotationMaintenanceState]
	return raw != "" && json.Unmarshal([]byte(raw), &ms) == nil && ms.Opportunistic
}

// TriggerFromNode reads the perform-maintenance label.
func TriggerFromNode(n *corev1.Node) (value string, set bool) {
	value, set = n.Labels[LabelPerformMaintenance]
	return value, set
}

// ApplyState writes st and its consequences (the active-maintenance label,
// the taint) onto n, and cordons or uncordons as d says. It reports
// whether n changed.
func ApplyState(n *corev1.Node, d Decision) bool {
	st := d.State
	before := n.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	set := func(m map[string]string, k, v string) {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	active := st.Phase != PhaseIdle
	timeStr := func(t time.Time) string {
		if !active || t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	phase := string(st.Phase)
	if !active {
		phase = ""
	}
	// The maintenance annotations exist only while maintenance is under way.
	whileActive := func(v string) string {
		if !active {
			return ""
		}
		return v
	}
	set(n.Annotations, AnnotationPhase, phase)
	set(n.Annotations, AnnotationReason, whileActive(string(st.Reason)))
	set(n.Annotations, AnnotationStarted, timeStr(st.Started))
	set(n.Annotations, AnnotationDeadline, timeStr(st.Deadline))
	set(n.Annotations, AnnotationBootID, whileActive(st.BootID))
	set(n.Annotations, AnnotationCordonedBefore, whileActive(strconv.FormatBool(st.CordonedBefore)))
	set(n.Annotations, AnnotationRequestID, whileActive(st.RequestID))
	set(n.Annotations, AnnotationRequested, timeStr(st.Requested))
	set(n.Annotations, annotationLastEvent, string(st.LastEvent))
	set(n.Annotations, AnnotationUpcomingMaintenance, st.Notice)
	set(n.Labels, LabelScheduledMaintenanceTime, st.ScheduledTime)
	switch st.Phase {
	case PhaseDraining:
		n.Labels[LabelActiveMaintenance] = ValueOngoing
	case PhaseTerminating:
		n.Labels[LabelActiveMaintenance] = ValueTerminating
	default:
		delete(n.Labels, LabelActiveMaintenance)
	}
	idleSince := ""
	if !st.IdleSince.IsZero() {
		idleSince = st.IdleSince.UTC().Format(time.RFC3339Nano)
	}
	set(n.Annotations, AnnotationIdleSince, idleSince)
	set(n.Annotations, AnnotationLastBootID, st.LastBootID)
	set(n.Annotations, AnnotationKubeletVersion, st.LastKubelet)
	counts := ""
	if len(st.Interruptions) > 0 {
		b, _ := json.Marshal(st.Interruptions) // keys sorted: stable
		counts = string(b)
	}
	set(n.Annotations, AnnotationInterruptions, counts)
	set(n.Annotations, AnnotationBusy, st.Busy)
	if d.RemoveTrigger {
		delete(n.Labels, LabelPerformMaintenance)
		delete(n.Annotations, AnnotationMaintenanceState)
	}
	setTaint(n, active)
	if d.Cordon {
		n.Spec.Unschedulable = true
	}
	if d.Uncordon {
		n.Spec.Unschedulable = false
	}
	return !equalNode(before, n)
}

func setTaint(n *corev1.Node, on bool) {
	taints := n.Spec.Taints[:0:0]
	found := false
	for _, t := range n.Spec.Taints {
		if t.Key == TaintImpendingTermination && t.Effect == corev1.TaintEffectNoSchedule {
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

// HasTaint reports whether the impending-termination taint is on n.
func HasTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == TaintImpendingTermination && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
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
