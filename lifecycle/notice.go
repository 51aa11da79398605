package lifecycle

// The notice and the node conditions: the pending notice is mirrored on
// the Node (the scheduled-maintenance-time label and the notice
// annotation), and the state is said in the KEP-5683 node conditions.

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func (d *Decision) mirrorNotice(sig Signals) {
	prevTime := d.State.ScheduledTime
	// That notice is gone (a definite none; 503 "not yet" says nothing of
	// it), or another is served: another is another maintenance.
	if sig.NoticeKnown && (!sig.NoticePresent && !sig.NoticeNotYet || sig.NoticePresent && NoticeID(sig.Notice) != d.State.NoticeDone) {
		d.State.NoticeDone = ""
	}
	if d.State.NoticeForeign {
		// Another controller's (GKE's handler's): never the agent's to
		// remove; a notice of the agent's own replaces it.
		if !sig.NoticePresent {
			return
		}
		d.State.NoticeForeign, prevTime = false, ""
	}
	if !sig.NoticePresent {
		if d.State.Notice.Raw != "" || prevTime != "" {
			d.State.Notice, d.State.ScheduledTime = maintenance.Notice{}, ""
			if prevTime != "" && d.State.Phase == protocol.PhaseIdle {
				d.Events = append(d.Events, EventRecord{Reason: protocol.EventMaintenanceCancelled,
					Message: "The scheduled maintenance is no longer pending"})
			}
		}
		return
	}
	n := sig.Notice
	d.State.Notice = n
	if n.Status != maintenance.StatusPending {
		d.State.ScheduledTime = ""
		return
	}
	ts := strconv.FormatInt(n.WindowStart.Unix(), 10)
	if ts == prevTime {
		return
	}
	d.State.ScheduledTime = ts
	when := n.WindowStart.UTC().Format(time.RFC3339)
	if prevTime == "" {
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventMaintenanceScheduled,
			Message: fmt.Sprintf("Maintenance is scheduled for %s (can reschedule: %t)", when, n.CanReschedule)})
	} else {
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventMaintenanceRescheduled,
			Message: fmt.Sprintf("Maintenance was rescheduled to %s", when)})
	}
}

// NoticeID names a notice by its window start: a reboot does not change
// it, another maintenance does.
func NoticeID(n maintenance.Notice) string { return strconv.FormatInt(n.WindowStart.Unix(), 10) }

// NodeConditions are the conditions the agent's state st says, without
// their times: NodeConditionsChanged compares them with a Node's, and the
// agent stamps the ones it writes.
func NodeConditions(st protocol.AgentState) []corev1.NodeCondition {
	cond := func(t corev1.NodeConditionType, on bool, reason, message string) corev1.NodeCondition {
		status := corev1.ConditionFalse
		if on {
			status = corev1.ConditionTrue
		}
		return corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: message}
	}
	planned := cond(protocol.ConditionMaintenancePlanned, false, "NoMaintenanceScheduled", "Compute Engine has no maintenance pending for this VM")
	switch n := st.Notice; n.Status {
	case maintenance.StatusPending:
		planned = cond(protocol.ConditionMaintenancePlanned, true, "MaintenanceScheduled", fmt.Sprintf("Compute Engine scheduled a %s maintenance for the window starting %s%s (can reschedule: %t)",
			n.Type, n.WindowStart.UTC().Format(time.RFC3339), windowEnd(n), n.CanReschedule))
	case maintenance.StatusOngoing:
		// The window is open: still planned, and closer than ever (a GPU VM
		// runs until TERMINATE_ON_HOST_MAINTENANCE, then stops).
		planned = cond(protocol.ConditionMaintenancePlanned, true, "MaintenanceWindowOpen", fmt.Sprintf("Compute Engine's %s maintenance window starting %s%s is open: the VM may be stopped for it at any moment",
			n.Type, n.WindowStart.UTC().Format(time.RFC3339), windowEnd(n)))
	}
	if end := st.KnownEnd; !end.IsZero() && (st.Notice.Status == "" || st.Notice.Status == maintenance.StatusPending && end.Before(st.Notice.WindowStart)) {
		planned = cond(protocol.ConditionMaintenancePlanned, true, conditionReason(protocol.ReasonKnownEnd), fmt.Sprintf("The VM's run ends at %s: Compute Engine stops or deletes it then (a time limit)",
			end.UTC().Format(time.RFC3339)))
	}
	active := st.Active()
	inProgress := cond(protocol.ConditionMaintenanceInProgress, false, "NoMaintenance", "The node is in service")
	draining := cond(protocol.ConditionDrainInProgress, false, "NotDraining", "No drain runs")
	drained := cond(protocol.ConditionDrained, false, "NotDrained", "The node is not drained")
	if active {
		why := conditionReason(st.Reason)
		inProgress = cond(protocol.ConditionMaintenanceInProgress, true, why, fmt.Sprintf("%s: the VM is expected to stop by %s", st.Reason, st.Deadline.UTC().Format(time.RFC3339)))
		switch {
		case st.Phase == protocol.PhaseTerminating || st.Drain == protocol.DrainDone:
			drained = cond(protocol.ConditionDrained, true, why, "Every pod the drain stops is gone")
		case st.Drain == protocol.DrainIncomplete:
			drained = cond(protocol.ConditionDrained, false, "DrainIncomplete", "The voluntary drain reached its deadline with pods still on the node")
		case !st.LeftToGKE:
			draining = cond(protocol.ConditionDrainInProgress, true, why, fmt.Sprintf("Draining for %s by %s", st.Reason, st.Deadline.UTC().Format(time.RFC3339)))
		}
	}
	return []corev1.NodeCondition{planned, inProgress, draining, drained}
}

func windowEnd(n maintenance.Notice) string {
	if n.WindowEnd.IsZero() {
		return ""
	}
	return " and ending " + n.WindowEnd.UTC().Format(time.RFC3339)
}

// conditionReason is a maintenance's reason in a condition's CamelCase.
func conditionReason(r protocol.Reason) string {
	switch r {
	case protocol.ReasonHostMaintenance:
		return "HostMaintenance"
	case protocol.ReasonPreemption:
		return "Preemption"
	case protocol.ReasonManual:
		return "ManualMaintenance"
	case protocol.ReasonSlice:
		return "MultiHostSlice"
	case protocol.ReasonFault:
		return "HostRepair"
	case protocol.ReasonKnownEnd:
		return "KnownEnd"
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
