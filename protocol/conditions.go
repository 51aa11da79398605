package protocol

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/metadata"
)

// The node lifecycle conditions the agent keeps on its own Node, of the
// types Kubernetes' node lifecycle conditions enhancement (KEP-5683)
// reserves: controllers and other node agents read maintenance from them.
// Each is True or False, never absent once the agent has run: a False
// condition says since when the node has not been in that state.
const (
	// ConditionMaintenancePlanned: a maintenance is pending (the notice,
	// with its window).
	ConditionMaintenancePlanned corev1.NodeConditionType = "MaintenancePlanned"
	// ConditionMaintenanceInProgress: from the drain's start until the
	// node is back in service.
	ConditionMaintenanceInProgress corev1.NodeConditionType = "MaintenanceInProgress"
	// ConditionDrainInProgress: the drain runs.
	ConditionDrainInProgress corev1.NodeConditionType = "DrainInProgress"
	// ConditionDrained: the drain is over and every pod it stops is gone.
	ConditionDrained corev1.NodeConditionType = "Drained"
)

// NodeConditionTypes lists them, in the order NodeConditions gives them.
var NodeConditionTypes = []corev1.NodeConditionType{ConditionMaintenancePlanned, ConditionMaintenanceInProgress, ConditionDrainInProgress, ConditionDrained}

// NodeConditions are the conditions the agent's state st says, without
// their times: NodeConditionsChanged compares them with a Node's, and the
// agent stamps the ones it writes.
func NodeConditions(st AgentState) []corev1.NodeCondition {
	cond := func(t corev1.NodeConditionType, on bool, reason, message string) corev1.NodeCondition {
		status := corev1.ConditionFalse
		if on {
			status = corev1.ConditionTrue
		}
		return corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: message}
	}
	planned := cond(ConditionMaintenancePlanned, false, "NoMaintenanceScheduled", "Compute Engine has no maintenance pending for this VM")
	if n, present, err := metadata.ParseNotice(st.Notice); err == nil && present && n.Status == metadata.StatusPending {
		planned = cond(ConditionMaintenancePlanned, true, "MaintenanceScheduled", fmt.Sprintf("Compute Engine scheduled a %s maintenance for the window starting %s%s (can reschedule: %t)",
			n.Type, n.WindowStart.UTC().Format(time.RFC3339), windowEnd(n), n.CanReschedule))
	}
	active := st.Active()
	inProgress := cond(ConditionMaintenanceInProgress, false, "NoMaintenance", "The node is in service")
	draining := cond(ConditionDrainInProgress, false, "NotDraining", "No drain runs")
	drained := cond(ConditionDrained, false, "NotDrained", "The node is not drained")
	if active {
		why := conditionReason(st.Reason)
		inProgress = cond(ConditionMaintenanceInProgress, true, why, fmt.Sprintf("%s: the VM is expected to stop by %s", st.Reason, st.Deadline.UTC().Format(time.RFC3339)))
		switch {
		case st.Phase == PhaseTerminating || st.Drain == DrainDone:
			drained = cond(ConditionDrained, true, why, "Every pod the drain stops is gone")
		case st.Drain == DrainIncomplete:
			drained = cond(ConditionDrained, false, "DrainIncomplete", "The voluntary drain reached its deadline with pods still on the node")
		case !st.LeftToGKE:
			draining = cond(ConditionDrainInProgress, true, why, fmt.Sprintf("Draining for %s by %s", st.Reason, st.Deadline.UTC().Format(time.RFC3339)))
		}
	}
	return []corev1.NodeCondition{planned, inProgress, draining, drained}
}

func windowEnd(n metadata.Notice) string {
	if n.WindowEnd.IsZero() {
		return ""
	}
	return " and ending " + n.WindowEnd.UTC().Format(time.RFC3339)
}

// conditionReason is a maintenance's reason in a condition's CamelCase.
func conditionReason(r Reason) string {
	switch r {
	case ReasonHostMaintenance:
		return "HostMaintenance"
	case ReasonPreemption:
		return "Preemption"
	case ReasonManual:
		return "ManualMaintenance"
	case ReasonSlice:
		return "MultiHostSlice"
	}
	return "Maintenance"
}

// NodeConditionsChanged is the conditions of want that n does not carry as
// they are (type, status, reason, message), stamped at now: the last
// transition time is now where the status changes, else n's.
func NodeConditionsChanged(n *corev1.Node, want []corev1.NodeCondition, now time.Time) []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, w := range want {
		var have *corev1.NodeCondition
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == w.Type {
				have = &n.Status.Conditions[i]
			}
		}
		if have != nil && have.Status == w.Status && have.Reason == w.Reason && have.Message == w.Message {
			continue
		}
		w.LastHeartbeatTime = metav1.NewTime(now)
		w.LastTransitionTime = metav1.NewTime(now)
		if have != nil && have.Status == w.Status {
			w.LastTransitionTime = have.LastTransitionTime
		}
		out = append(out, w)
	}
	return out
}
