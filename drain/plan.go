package drain

// The drain's plan, as pure functions of the pods, the clock and the
// deadline: which pods it stops (member, GroupOf), in which groups and by
// when (GroupDeadlines), when each is asked to stop (EvictAt) with which
// grace (CappedGrace), and, round by round, which calls are due
// (planRound). Plan lists the whole of it ahead, for a preview (kubectl
// maintenance trigger); the Drainer (drain.go) executes it.

import (
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Group is one ordered step of a drain.
type Group string

const (
	GroupWorkload  Group = "workload"  // every namespace but kube-system
	GroupSystem    Group = "system"    // kube-system
	GroupDaemonSet Group = "daemonset" // pods owned by a DaemonSet
)

// Groups is the drain order.
var Groups = []Group{GroupWorkload, GroupSystem, GroupDaemonSet}

// GroupOf tells which drain group a pod belongs to, and false for pods the
// drain never touches: mirror (static) pods and finished pods.
func GroupOf(p *corev1.Pod) (Group, bool) {
	switch lifecycle.KindOf(p) {
	case lifecycle.PodDaemonSet:
		return GroupDaemonSet, true
	case lifecycle.PodSystem:
		return GroupSystem, true
	case lifecycle.PodWorkload:
		return GroupWorkload, true
	}
	return "", false
}

// member tells the group of a pod the drain waits for, and false for a pod
// it leaves alone: the agent itself, mirror and finished pods, and pods
// that were not on the node when the drain began (began holds their UIDs)
// and tolerate the taint or belong to a DaemonSet.
func member(p *corev1.Pod, began map[types.UID]bool, skip types.NamespacedName, taintKey string) (Group, bool) {
	if p.Namespace == skip.Namespace && p.Name == skip.Name {
		return "", false
	}
	g, ok := GroupOf(p)
	if !ok {
		return "", false
	}
	if !began[p.UID] && (g == GroupDaemonSet || toleratesTaint(p, taintKey)) {
		// Would come back after every eviction: a DaemonSet's
		// replacement, or a pod that tolerates the taint.
		return "", false
	}
	return g, true
}

// toleratesTaint: the pod tolerates key:NoSchedule (a taint with no value).
func toleratesTaint(p *corev1.Pod, key string) bool {
	if key == "" {
		return false
	}
	for _, t := range p.Spec.Tolerations {
		keyMatches := t.Key == key || t.Key == "" && t.Operator == corev1.TolerationOpExists
		effectMatches := t.Effect == "" || t.Effect == corev1.TaintEffectNoSchedule
		valueMatches := t.Operator == corev1.TolerationOpExists || t.Value == "" // the taint has no value
		if keyMatches && effectMatches && valueMatches {
			return true
		}
	}
	return false
}

// Timing is how a drain spends the time to its deadline.
type Timing struct {
	// Reserve bounds the time kept, at the end of the deadline, for the
	// system and DaemonSet groups: the workload group must end by
	// deadline - reserve, the system group by deadline minus the DaemonSet
	// group's share. The reserve is what the later groups need (the
	// longest grace in each), at most Reserve and at most half the time to
	// the deadline, split between them in proportion to their needs, as
	// the kubelet's graceful node shutdown keeps
	// shutdownGracePeriodCriticalPods for critical pods. Zero (or less)
	// keeps no reserve.
	Reserve time.Duration
	// Margin is kept before the deadline: every pod is planned to end by
	// deadline - Margin, so that its whole grace ends before the VM stops
	// although SIGTERM reaches it a moment after the API call. Zero (or
	// less) keeps none.
	Margin time.Duration
}

// DefaultTiming is the Timing of a drain whose options name none.
var DefaultTiming = Timing{Reserve: DefaultReserve, Margin: DefaultMargin}

// TimingOr is *t, or DefaultTiming where t is nil; a negative reserve or
// margin is none.
func TimingOr(t *Timing) Timing {
	if t == nil {
		return DefaultTiming
	}
	return Timing{Reserve: max(t.Reserve, 0), Margin: max(t.Margin, 0)}
}

// GroupDeadlines splits the time from now to deadline minus the margin
// between the groups of a drain of pods (those it will stop), in Groups'
// order, keeping at most the reserve for the system and DaemonSet groups
// (see Timing).
func GroupDeadlines(pods []*corev1.Pod, timing Timing, now, deadline time.Time) []time.Time {
	deadline = deadline.Add(-timing.Margin)
	var needSystem, needDaemonSet time.Duration
	for _, p := range pods {
		g, ok := GroupOf(p)
		switch {
		case !ok:
		case g == GroupSystem:
			needSystem = max(needSystem, PodGrace(p))
		case g == GroupDaemonSet:
			needDaemonSet = max(needDaemonSet, PodGrace(p))
		}
	}
	need := needSystem + needDaemonSet
	reserve := min(timing.Reserve, need, deadline.Sub(now)/2)
	if reserve <= 0 {
		return []time.Time{deadline, deadline, deadline}
	}
	daemonSetShare := time.Duration(float64(reserve) * float64(needDaemonSet) / float64(need)).Round(time.Second)
	return []time.Time{deadline.Add(-reserve), deadline.Add(-min(daemonSetShare, reserve)), deadline}
}

// Need is how long a drain of pods (but skip, the agent itself) needs
// from its start so that every pod it stops gets its checkpoint lead and
// its whole grace, in Groups' order, as GroupDeadlines and EvictAt plan
// them: the longest lead and grace of a workload pod, the reserve kept
// for the system and DaemonSet pods after it (or their own need, where
// longer), and the margin.
func Need(pods []*corev1.Pod, skip types.NamespacedName, timing Timing) time.Duration {
	var workload, system, daemonSet time.Duration
	for _, p := range pods {
		g, ok := GroupOf(p)
		if !ok || p.Namespace == skip.Namespace && p.Name == skip.Name {
			continue
		}
		switch g {
		case GroupSystem:
			system = max(system, PodGrace(p))
		case GroupDaemonSet:
			daemonSet = max(daemonSet, PodGrace(p))
		default:
			lead, ok, err := protocol.CheckpointLead(p.Annotations)
			if !ok || err != nil {
				lead = 0
			}
			workload = max(workload, lead+PodGrace(p))
		}
	}
	rest := system + daemonSet
	return max(workload+min(timing.Reserve, rest), rest) + timing.Margin
}

// EvictAt is when a drain that began at start asks pod p to stop: at
// once, or, for a pod annotated with a checkpoint lead
// (protocol.PodAnnotationCheckpointLead), that lead later, but no later
// than leaves it its whole grace period before deadline. A later time is a
// whole second (the lead's end rounded up, or the latest rounded down), so
// that the pod, told it in whole seconds, is asked to stop at the very
// time it was told.
func EvictAt(p *corev1.Pod, start, deadline time.Time) time.Time {
	lead, ok, err := protocol.CheckpointLead(p.Annotations)
	if !ok || err != nil {
		return start
	}
	at := start.Add(lead)
	if whole := at.Truncate(time.Second); whole.Before(at) {
		at = whole.Add(time.Second)
	}
	if latest := deadline.Add(-PodGrace(p)); latest.Before(at) {
		at = latest.Truncate(time.Second)
	}
	if at.Before(start) {
		at = start
	}
	return at
}

// CappedGrace is the grace period a pod whose own is grace gets when it is
// asked to stop at now: what is left to deadline, rounded down to whole
// seconds (the API takes whole seconds, and a grace rounded up would end
// past the deadline), never more than grace, never less than GraceFloor.
func CappedGrace(grace time.Duration, now, deadline time.Time) time.Duration {
	return max(min(grace, deadline.Sub(now).Truncate(time.Second)), GraceFloor)
}

// EscalationLead is how long before deadline - grace a pod whose eviction
// is still refused is deleted instead: a delete sent a moment after its
// time, as every timer fires, still leaves the pod its whole grace in
// whole seconds (CappedGrace rounds down).
const EscalationLead = time.Second

// EscalateAt is when a drain with deadline deletes pod p whose eviction is
// still refused, leaving it its whole grace (EscalationLead).
func EscalateAt(p *corev1.Pod, deadline time.Time) time.Time {
	return deadline.Add(-PodGrace(p) - EscalationLead)
}

// PodGrace is the pod's terminationGracePeriodSeconds (30 s if unset).
func PodGrace(p *corev1.Pod) time.Duration {
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

// planRound is one round of a group's drain, a pure function of now, the
// drain's start, the group's deadline, its pods and what the drain
// remembers of them (states, to which it adds the pods it meets first):
// the calls due now, the longest grace first (those decide when the node
// is empty), and when to plan again though nothing changes: the earliest
// moment a pod not due now will be (its checkpoint lead over, its next
// try), at the latest the group's end (deadline + EndSlack).
func planRound(now, start, deadline time.Time, escalate, requests bool, pods []*corev1.Pod, states map[types.UID]*podState) (due []*action, wake time.Time) {
	wake = deadline.Add(EndSlack)
	if !now.Before(wake) {
		wake = now.Add(time.Hour) // past it: only returning calls matter
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue // stopping: wait for it to go
		}
		st := states[p.UID]
		if st == nil {
			st = &podState{}
			states[p.UID] = st
		}
		if st.evicted || st.inFlight {
			continue
		}
		if at := EvictAt(p, start, deadline); now.Before(at) {
			wake = earliest(wake, at) // told, and checkpointing
			continue
		}
		grace := PodGrace(p)
		a := &action{pod: p, st: st, grace: CappedGrace(grace, now, deadline), escalateAt: EscalateAt(p, deadline), at: now, voluntary: !escalate, deadline: deadline}
		switch {
		case requests && !st.requested && !st.noRequest && NamesResponders(p):
			a.request = true
		case escalate && st.refused() && !now.Before(a.escalateAt):
			a.escalate = true
		case now.Before(st.nextTry):
			wake = earliest(wake, st.nextTry)
			if escalate && st.refused() {
				wake = earliest(wake, a.escalateAt)
			}
			continue
		}
		due = append(due, a)
	}
	sort.SliceStable(due, func(i, j int) bool { return due[i].grace > due[j].grace })
	return due, wake
}

// PlannedPod is one pod a drain asks to stop.
type PlannedPod struct {
	Pod   *corev1.Pod
	Group Group
	// Grace is the grace period it is asked to stop with: its own, capped
	// to its group's deadline (CappedGrace at NotBefore).
	Grace time.Duration
	// NotBefore is the earliest it is asked to stop (EvictAt: the drain's
	// start, or its checkpoint lead later); pods of a later group are asked
	// once the earlier groups are gone, or their share of the deadline ran
	// out.
	NotBefore time.Time
	// GroupDeadline is when its group's share of the deadline ends.
	GroupDeadline time.Time
}

// Plan lists, in the order a drain that begins at start with deadline asks
// them to stop, the pods of a node that it stops: group by group, in a
// group by NotBefore, then the longest grace first (those decide when the
// node is empty), then by namespace/name. skip is a pod never stopped (the
// agent itself); timing is the Drainer's (Options.Timing, TimingOr). It is the plan
// the Drainer executes when every eviction is accepted at once and each pod
// goes as soon as it is asked to. A pod with a checkpoint lead is told its
// NotBefore (the agent's workload notice).
func Plan(pods []*corev1.Pod, skip types.NamespacedName, timing Timing, start, deadline time.Time) []PlannedPod {
	began := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		began[p.UID] = true
	}
	var members []*corev1.Pod
	for _, p := range pods {
		if _, ok := member(p, began, skip, ""); ok {
			members = append(members, p)
		}
	}
	deadlines := GroupDeadlines(members, timing, start, deadline)
	order := map[Group]int{}
	for i, g := range Groups {
		order[g] = i
	}
	out := make([]PlannedPod, 0, len(members))
	for _, p := range members {
		g, _ := GroupOf(p)
		gd := deadlines[order[g]]
		at := EvictAt(p, start, gd)
		out = append(out, PlannedPod{Pod: p, Group: g, Grace: CappedGrace(PodGrace(p), at, gd), NotBefore: at, GroupDeadline: gd})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.Group != b.Group:
			return order[a.Group] < order[b.Group]
		case !a.NotBefore.Equal(b.NotBefore):
			return a.NotBefore.Before(b.NotBefore)
		case a.Grace != b.Grace:
			return a.Grace > b.Grace
		}
		return klogRef(a.Pod) < klogRef(b.Pod)
	})
	return out
}
