package protocol

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Unreadable lists, sorted, the keys on n that the product reads and
// whose values it cannot read: a value that does not parse, or that names
// a phase, reason or value this version does not know. Where they are
// used (ReadAgentState, ReadTrigger, ReadSliceAsk, ...) such values read as
// absent, so that nothing acts on them; Unreadable says which they were,
// for the aggregator's Warning and the plugin.
//
// Every key listed is one the agent may write on its own Node (the
// admission policy's), so a node whose agent is broken or compromised
// shows here; what it writes in a form this version can read is its own
// claim about itself, and is believed as such.
func Unreadable(n *corev1.Node) []string {
	return unreadable(n, func(v string) bool { _, unreadable := readNotice(v); return !unreadable })
}

// unreadable is Unreadable, with noticeReadable telling whether the
// upcoming-maintenance annotation, which is there, can be read.
func unreadable(n *corev1.Node, noticeReadable func(string) bool) []string {
	a := n.Annotations
	var out []string
	check := func(key string, readable func(string) bool) {
		if v, ok := a[key]; ok && !readable(v) {
			out = append(out, key)
		}
	}
	oneOf := func(values ...string) func(string) bool {
		return func(v string) bool { return slices.Contains(values, v) }
	}
	boolean := oneOf("true", "false")
	isTime := func(v string) bool { return !readTime(v).IsZero() }
	isJSON := func(into func() any) func(string) bool {
		return func(v string) bool { return json.Unmarshal([]byte(v), into()) == nil }
	}

	check(AnnotationPhase, oneOf(string(PhaseIdle), string(PhaseDraining), string(PhaseTerminating)))
	check(AnnotationReason, oneOf(string(ReasonHostMaintenance), string(ReasonPreemption), string(ReasonManual), string(ReasonSlice), string(ReasonFault)))
	for _, key := range []string{AnnotationStarted, AnnotationDeadline, AnnotationRequested, AnnotationIdleSince} {
		check(key, isTime)
	}
	for _, key := range []string{AnnotationCordonedBefore, AnnotationBegun, AnnotationNoticeMirrored, AnnotationLeftToGKE} {
		check(key, boolean)
	}
	check(AnnotationBusy, oneOf(BusyAccelerators, BusySafeToEvict, BusyWorkload))
	check(AnnotationDrain, oneOf(string(DrainDone), string(DrainIncomplete)))
	check(AnnotationInterruptions, func(v string) bool {
		var c Counts
		if json.Unmarshal([]byte(v), &c) != nil {
			return false
		}
		all := len(c)
		return len(c.readable()) == all
	})
	check(AnnotationVoluntaryFailures, isJSON(func() any { return &Failures{} }))
	check(AnnotationRepairs, isJSON(func() any { return &Repairs{} }))
	check(AnnotationMaintenanceState, isJSON(func() any { return &MaintenanceState{} }))
	check(AnnotationSliceMaintenance, func(string) bool { _, ok := ReadSliceAsk(n); return ok })
	check(AnnotationFaultRepair, func(v string) bool { _, ok := decodeRepairApproval(v); return ok })
	check(AnnotationRepairCall, func(v string) bool { return readRepairCall(v) != "" })
	check(AnnotationLastFaultRepair, func(v string) bool { return decodeLastFaultRepair(v).Outcome != "" })
	check(AnnotationUpcomingMaintenance, noticeReadable)
	check(AnnotationComputeCall, func(string) bool { _, ok := ReadComputeCall(n); return ok })
	check(AnnotationPodGroups, func(v string) bool { _, err := DecodePodGroups(v); return err == nil })
	slices.Sort(out)
	return out
}
