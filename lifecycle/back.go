package lifecycle

// Back in service and counting: the VM stopped and came back (another
// boot ID), or its maintenance was withdrawn; a reboot nothing announced
// is counted as a host error or a node upgrade.

import (
	"fmt"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// unannouncedReboot: the agent was idle and the node came back with
// another boot ID, nothing announced: a node upgrade when the kubelet's
// version changed, a host error otherwise.
func (d *Decision) unannouncedReboot(before State, obs Observation) {
	st := d.State
	if st.Phase != protocol.PhaseIdle || st.LastBootID == "" || obs.BootID == "" || obs.BootID == st.LastBootID {
		return
	}
	if c := before.Call; c.Method == protocol.RepairReport && c.Operation != "" && !c.Failed {
		op := c.Operation
		// The report the last repair gave up following went through
		// after all: this stop is the host's repair.
		d.Unannounced, d.RemoveReport = counted(protocol.FaultRepair), true
		d.State.LastRepair = protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: obs.Now}
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventFaultRepaired,
			Message: fmt.Sprintf("The VM rebooted (boot ID %s) after the report whose operation %s the node's last repair stopped following: counted as the host's repair", obs.BootID, op)})
		return
	}
	if obs.KubeletVersion != "" && st.LastKubelet != "" && obs.KubeletVersion != st.LastKubelet {
		d.Unannounced = counted(protocol.Upgrade)
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventNodeUpgraded,
			Message: fmt.Sprintf("The node rebooted into kubelet %s (was %s): counted as a node upgrade", obs.KubeletVersion, st.LastKubelet)})
		return
	}
	d.Unannounced = counted(protocol.UnannouncedReboot)
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventUnexpectedReboot,
		Message: fmt.Sprintf("The VM rebooted with no maintenance notice or preemption before it (boot ID %s, was %s): counted as a host error", obs.BootID, st.LastBootID)})
}

// backInService: the VM stopped and came back (another boot ID), or the
// maintenance is over without a stop (reasonRule.over): the node goes
// back in service.
func (d *Decision) backInService(cfg Config, obs Observation) {
	st := d.State
	if st.Phase == protocol.PhaseIdle {
		return
	}
	booted := obs.BootID != "" && st.BootID != "" && obs.BootID != st.BootID
	// A maintenance left to GKE's handler is also over when GKE's handler
	// let go of the node with nothing under way.
	gkeLetGo := st.LeftToGKE && obs.GKEHandling == "" && signalsWithdrawn(cfg, st, obs)
	if !booted && !ruleOf(st.Reason).over(cfg, st, obs) && !gkeLetGo {
		return
	}
	reason, msg, warning := protocol.EventMaintenanceCleared, fmt.Sprintf("Node is back from %s (boot ID %s); removing the taint and the maintenance label", st.Reason, obs.BootID), false
	switch {
	case !booted && st.Reason == protocol.ReasonSlice && obs.SliceAskExpired:
		reason, msg, warning = protocol.EventSliceBack, fmt.Sprintf("A host of the multi-host slice %s has been down for %s, the longest a host drains for its slice; this host goes back in service, though its slice is not whole", obs.SliceAsk.Slice, SliceDrainLimit), true
	case !booted && st.Reason == protocol.ReasonSlice:
		reason, msg = protocol.EventSliceBack, "The multi-host slice is back in service (no host of it is in a maintenance of its own, and the aggregator asks nothing); so is this host"
	case booted && st.Reason == protocol.ReasonFault:
		reason, msg = protocol.EventFaultRepaired, fmt.Sprintf("The VM is back from its host's repair (boot ID %s); removing the taint and the maintenance label", obs.BootID)
	case !booted:
		reason, msg, warning = protocol.EventMaintenanceAborted, fmt.Sprintf("The %s was withdrawn before the VM stopped; putting the node back in service", st.Reason), true
	}
	d.Events = append(d.Events, EventRecord{Warning: warning, Reason: reason, Message: msg})
	d.Uncordon = !st.CordonedBefore
	d.RemoveTrigger = st.RequestID != "" && st.Reason != protocol.ReasonFault
	d.State = idleState(st)
	if !booted && st.Reason != protocol.ReasonFault && st.RepairCall != "" {
		// What took over a repair Compute Engine was asked for (a
		// preemption: nothing else may) was withdrawn: the repair was
		// overtaken; the next one, approved again at once, follows a
		// report's operation that still runs (the node's call, call.go)
		// rather than report again.
		d.State.LastRepair = protocol.LastFaultRepair{Outcome: protocol.RepairOvertaken, Ended: obs.Now, By: string(st.Reason)}
	}
	if booted {
		// The maintenance that took the VM down is over, and so is its
		// notice; a value still served after the reboot is a new one (a
		// notice still pending is mirrored again later in the step), but
		// for the ONGOING notice of the maintenance that stopped it, which
		// a TPU VM may serve for a while after: that one is done.
		if n := st.Notice; n.Status == maintenance.StatusOngoing {
			d.State.NoticeDone = NoticeID(n)
		}
		d.State.LastEvent = maintenance.EventNone
		if !d.State.NoticeForeign {
			d.State.ScheduledTime, d.State.Notice = "", maintenance.Notice{}
		}
	}
}

// count records what the node runs (boot ID, kubelet version) and adds
// this step's interruptions to the node's counts.
func (d *Decision) count(obs Observation) {
	if obs.BootID != "" {
		d.State.LastBootID = obs.BootID
	}
	if obs.KubeletVersion != "" {
		d.State.LastKubelet = obs.KubeletVersion
	}
	for _, i := range []*protocol.Interruption{d.Unannounced, d.Interruption} {
		if i != nil {
			d.State.Interruptions = d.State.Interruptions.Add(*i, 1)
		}
	}
}
