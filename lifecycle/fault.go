package lifecycle

// A fault's repair: the aggregator approved the repair of a node found
// faulty (protocol.AnnotationFaultRepair). The node drains as for a
// forced maintenance, by the pool's drain timeout; then the agent asks
// Compute Engine, once, for the repair the platform offers: a repair
// Compute Engine already booked (a FAILURE_* maintenance that can be
// rescheduled) is pulled forward with performMaintenance, any other fault
// is reported with reportHostAsFaulty. The method is chosen and written
// with the request ID before the call, so that an agent restarted at any
// point repeats the same request, which Compute Engine answers as the
// same. The VM then stops; when it comes back the repair is over.

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// faultRule: started by the aggregator's approval, it is counted when the
// VM comes back from the repair it asked for, yields to the VM's own
// maintenance until Compute Engine is asked (to a preemption always), is
// drained by force (a faulty node is not kept for a budget), and, drained,
// asks Compute Engine. It ends when the VM stops and comes back, or when
// the approval is withdrawn before the call (fault).
var faultRule = reasonRule{over: never, counted: neverCounted, yields: faultYields, voluntary: forced, asksCompute: true}

// FaultView is the aggregator's approval of the node's repair.
type FaultView struct {
	// Repair is the approval; RepairSet whether one the agent can read is
	// on the Node.
	Repair    protocol.RepairApproval
	RepairSet bool
}

func never(Config, State, Observation) bool { return false }

// faultYields: a preemption takes a repair over in any phase; a host
// maintenance only while Compute Engine has not been asked.
func faultYields(st State, to protocol.Reason) bool {
	return to == protocol.ReasonPreemption || st.Phase == protocol.PhaseDraining && st.Requested.IsZero()
}

// fault starts an approved repair on a node in service, and carries one
// under way to its call.
func (d *Decision) fault(cfg Config, obs Observation) {
	st := d.State
	switch {
	case st.Phase == protocol.PhaseIdle && obs.RepairSet && !d.RemoveRepair && obs.ReportableKnown && obs.NotReportable != "" && repairCallFor(obs) == protocol.RepairReport:
		d.notReportable(obs)
		return
	case st.Phase == protocol.PhaseIdle && obs.RepairSet && !d.RemoveRepair:
		d.startRepair(obs)
		return
	case st.Reason != protocol.ReasonFault:
		return
	case st.Phase == protocol.PhaseTerminating:
		d.awaitRepairStop(cfg, obs)
	case !obs.RepairSet && st.Requested.IsZero():
		d.endRepair(protocol.RepairCancelled, obs.Now, protocol.EventFaultRepairCanceled,
			"The approval of this node's repair was withdrawn before Compute Engine was asked; the node is back in service (taint removed)")
	default:
		d.askRepair(cfg, obs)
	}
	if d.State.Phase == protocol.PhaseIdle {
		// The repair ended without the VM stopping for it, while the VM's
		// own maintenance, which it did not yield to once asked for, may
		// be under way: that one starts now.
		d.maintenanceStarts(cfg, obs)
	}
}

// awaitRepairStop: Compute Engine took the repair, and the VM has not
// stopped. An operation that failed, GKE's flow ending in Error, or, for
// a call of the agent's own, no stop (nor the booked repair begun) by its
// bound (startBound; awaitReport's for a report), ends the repair with the
// node drained and still faulty; otherwise the loop wakes at that bound.
func (d *Decision) awaitRepairStop(cfg Config, obs Observation) {
	st, r := d.State, callResult(d.State, obs)
	stopBy := startBound(cfg, st)
	var why string
	switch {
	case st.RepairCall == protocol.RepairGKE && gkeStatusIs(obs.GKERepairStatus, protocol.GKEStatusError):
		d.RemoveFaultBehavior = true
		why = "GKE's report-and-replace flow ended in " + obs.GKERepairStatus + " (its label " + protocol.LabelReportAndReplaceStatus + ")"
	case st.RepairCall == protocol.RepairGKE && !obs.Now.Before(st.Deadline):
		d.RemoveFaultBehavior = true
		why = fmt.Sprintf("the VM has not stopped by %s (GKE's status %q)", st.Deadline.UTC().Format(time.RFC3339), obs.GKERepairStatus)
	case st.RepairCall == protocol.RepairGKE:
		d.wakeAt(st.Deadline)
		return // GKE's flow says when it is done, by the deadline
	case r != nil && r.OperationErr != nil:
		why = fmt.Sprintf("its operation failed: %v", r.OperationErr)
	case underWay(obs.Signals):
		return // the booked repair has begun: the VM stops within it
	case st.RepairCall == protocol.RepairReport:
		if why = d.awaitReport(cfg, obs.Now, r); why == "" {
			return
		}
	case !obs.Now.Before(stopBy):
		why = fmt.Sprintf("the VM has not stopped %s after Compute Engine took the repair", cfg.ManualStartTimeout)
	default:
		d.wakeAt(stopBy)
		return
	}
	// A report whose operation still runs is followed by the next
	// attempt, not sent again: the node's call outlives the repair
	// (call.go).
	d.endRepair(protocol.RepairFailed, obs.Now, protocol.EventFaultRepairFailed, fmt.Sprintf(
		"Compute Engine took the repair (%s), but %s. The node is drained and stays faulty; its repair is approved again after the pool's cool-down", st.RepairCall, why))
}

// awaitReport: Compute Engine took the report (r is what is known of its
// operation, nil for nothing yet), and the VM has not stopped. Google's
// "Report faulty host" keeps the VM RUNNING through the report's operation
// ("usually 10-12 minutes") and starts the host's repair, which stops the
// VM, within a minute after it ends. So the node stays drained while the
// operation runs, for up to ReportTimeout from the call, and once it is
// DONE, for up to ManualStartTimeout more. It says why the repair failed,
// or "" while it waits (the loop wakes at the bound).
func (d *Decision) awaitReport(cfg Config, now time.Time, r *PerformResult) string {
	st := d.State
	if r != nil && r.OperationDone {
		stopBy := r.OperationEnded.Add(cfg.ManualStartTimeout)
		if now.Before(stopBy) {
			d.wakeAt(stopBy)
			return ""
		}
		return fmt.Sprintf("the VM has not stopped %s after the report's operation %s ended (%s)", cfg.ManualStartTimeout, cmp.Or(st.Call.Operation, r.Operation), r.OperationEnded.UTC().Format(time.RFC3339))
	}
	if followTo := st.Requested.Add(cfg.ReportTimeout); now.Before(followTo) {
		d.wakeAt(followTo)
		return ""
	}
	if st.Call.Operation == "" {
		return fmt.Sprintf("the VM has not stopped %s after the report", cfg.ReportTimeout)
	}
	return fmt.Sprintf("the report's operation %s has not ended %s after the report (Google documents 10-12 minutes); the next attempt follows it rather than reporting again", st.Call.Operation, cfg.ReportTimeout)
}

// notReportable: the approved repair would be a report that Compute
// Engine refuses from this VM. Nothing is drained or asked: the node stays
// faulty (the aggregator's taint keeps new pods off it), the approval goes,
// and the aggregator approves it again after the pool's cool-down, when
// the VM may have become reportable. A booked FAILURE_* repair that can be
// pulled forward, and GKE's flow, keep their own rules (repairCallFor).
func (d *Decision) notReportable(obs Observation) {
	r := obs.Repair
	d.Repair = protocol.RepairNotReportable
	d.RemoveRepair = true
	d.State.LastRepair = protocol.LastFaultRepair{Outcome: protocol.RepairNotReportable, Ended: obs.Now}
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventFaultNotReportable,
		Message: fmt.Sprintf("The node is faulty (%s, seen by %s: %s) and its repair was approved, but %s: it is not drained for a report that cannot come. It stays tainted faulty; repair or replace the VM by other means, or its repair is approved again after the pool's cool-down",
			r.Behavior, r.Source, r.Signal, obs.NotReportable)})
}

// startRepair: the node drains for its repair, by the pool's drain timeout.
func (d *Decision) startRepair(obs Observation) {
	r := obs.Repair
	deadline := obs.Now.Add(time.Duration(r.DrainTimeout))
	d.start(obs, protocol.ReasonFault, deadline)
	// The approval names the request it buys a repair's call for (the
	// aggregator's relay makes no other); one that names none, the
	// agent's own.
	d.State.RequestID = cmp.Or(r.Request, obs.RequestID)
	d.Repair = protocol.RepairStarted
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventFaultRepairStarted,
		Message: fmt.Sprintf("The node is faulty (%s, seen by %s: %s) and its repair was approved: draining before %s, then asking Compute Engine to repair the host",
			r.Behavior, r.Source, r.Signal, deadline.UTC().Format(time.RFC3339))})
}

// askRepair: drained, the node asks Compute Engine for the repair, once;
// how the call ends decides what follows.
func (d *Decision) askRepair(cfg Config, obs Observation) {
	sig, st, r := obs.Signals, d.State, obs.Perform
	if st.RepairCall == protocol.RepairGKE {
		d.followGKERepair(cfg, obs, false)
		return
	}
	answered := r != nil && r.RequestID == st.RequestID
	switch {
	case answered && r.Err == nil:
		d.repairAccepted(cfg, obs.Now, fmt.Sprintf("%s, operation %s", st.RepairCall, r.Operation))
	case answered && st.RepairCall == protocol.RepairPerformMaintenance && underWay(sig):
		d.repairAccepted(cfg, obs.Now, "the metadata server shows the booked repair starting")
	case answered:
		outcome := protocol.RepairFailed
		switch r.Outcome {
		case protocol.ManualPermissionDenied:
			outcome = protocol.RepairPermissionDenied
		case protocol.ManualRefused:
			outcome = protocol.RepairRefused
		}
		d.endRepair(outcome, obs.Now, protocol.EventFaultRepairFailed, fmt.Sprintf(
			"Compute Engine did not take the repair (%s): %v. The node is drained and stays faulty; its repair is approved again after the pool's cool-down", st.RepairCall, r.Err))
	case !st.Requested.IsZero() && st.RepairCall == protocol.RepairPerformMaintenance && startedByCompute(sig):
		// Asked before (by this agent or one before it), and the signals
		// show the booked repair beginning: never ask twice.
		d.repairAccepted(cfg, obs.Now, "the metadata server shows the booked repair starting")
	case d.drainDone(cfg, obs) && st.Requested.IsZero() && d.sliceHoldsRepair(obs):
		// Wait for the slice's other hosts, whose pods its stop ends.
	case d.drainDone(cfg, obs) && sig.NoticeKnown:
		call := cmp.Or(st.RepairCall, repairCallFor(obs))
		if d.callBlocked(cfg, obs.Now) {
			// Compute Engine may still carry out the node's last call (a
			// report of an attempt before this one, or of a repair a
			// maintenance took over): no second one meanwhile. A report
			// whose operation is known is this attempt's to follow; else
			// it waits for that call's answer, or its bound.
			if c := st.Call; call == protocol.RepairReport && c.Method == protocol.RepairReport && c.Operation != "" {
				d.State.RepairCall, d.State.Requested = call, obs.Now
				d.repairAccepted(cfg, obs.Now, "the node's report "+c.RequestID+", whose operation "+c.Operation+" still runs: no second report is sent while it runs")
			}
			return
		}
		d.State.RepairCall = call
		if st.Requested.IsZero() {
			d.State.Requested = obs.Now
		}
		if d.State.RepairCall == protocol.RepairGKE {
			// GKE leaves its last attempt's status on the Node: what it
			// says now is not this attempt's.
			d.State.GKEStatusBefore = cmp.Or(obs.GKERepairStatus, protocol.GKEStatusNone)
			d.followGKERepair(cfg, obs, true)
			return
		}
		d.mayCall(cfg, obs.Now)
	}
}

// sliceHoldsRepair: on a host of a multi-host slice, the repair waits
// until every other host has drained (they drain by this host's deadline,
// the slice's ask) or the slice can be told, so that the VM's stop cuts no
// pod's grace on another host; never past the deadline, when it goes on.
func (d *Decision) sliceHoldsRepair(obs Observation) bool {
	if len(obs.SliceWaiting) == 0 && obs.SliceUnknown == "" || !obs.Now.Before(d.State.Deadline) {
		return false
	}
	d.wakeAt(d.State.Deadline)
	if !obs.SliceRecheck.IsZero() {
		d.wakeAt(obs.SliceRecheck)
	}
	return true
}

// repairCallFor is how a drained faulty node asks: a repair Compute Engine
// booked already, pending and reschedulable, is pulled forward; any other
// fault goes through GKE's own flow where GKE runs it and the approval
// allows it, else it is reported.
func repairCallFor(obs Observation) protocol.RepairCall {
	sig, with := obs.Signals, obs.Repair.With
	switch {
	case sig.NoticePresent && sig.Notice.Reschedulable() && BookedRepair(sig.Notice):
		return protocol.RepairPerformMaintenance
	case with == protocol.RepairWithGKE || with == protocol.RepairWithAuto && obs.GKEReportsFaults:
		return protocol.RepairGKE
	}
	return protocol.RepairReport
}

// followGKERepair: the drained node asks GKE's report-and-replace flow for
// its repair (the fault-behavior label, put on once, in the step that asks:
// first) and follows GKE's status, as GKE's page describes it. Only a
// status other than the one on the Node when the agent asked is this
// attempt's (GKE leaves its last attempt's; State.GKEStatusBefore), and
// statuses are compared without regard to case (the page writes both
// Error and ERROR). The report under way (OperationRUNNING, or
// OperationDone) is Compute Engine taking the repair. Error fails it. GKE
// removing its label without either (as it does on an error) fails it too,
// and the label is not put back in this attempt. No answer within
// GKERepairTimeout fails it, and the label is removed, so that GKE does not
// act on it later.
func (d *Decision) followGKERepair(cfg Config, obs Observation, first bool) {
	st := d.State
	giveUpAt := st.Requested.Add(cfg.GKERepairTimeout)
	status := obs.GKERepairStatus
	fresh := status != "" && (st.GKEStatusBefore == "" || !strings.EqualFold(status, st.GKEStatusBefore))
	// The agent wrote the label with the state that records the status
	// before; its absence in a later step means someone removed it.
	removed := !first && st.GKEStatusBefore != "" && !obs.GKEFaultBehavior
	switch {
	case fresh && (gkeStatusIs(status, protocol.GKEStatusOperationRunning) || gkeStatusIs(status, protocol.GKEStatusOperationDone)):
		d.repairAccepted(cfg, obs.Now, "GKE's report-and-replace flow reports the host: "+status)
	case gkeStatusIs(status, protocol.GKEStatusError) && (fresh || removed):
		d.RemoveFaultBehavior = true
		d.endRepair(protocol.RepairFailed, obs.Now, protocol.EventFaultRepairFailed,
			"GKE's report-and-replace flow ended in "+status+" (its label "+protocol.LabelReportAndReplaceStatus+"); the node is drained and stays faulty; its repair is approved again after the pool's cool-down")
	case removed:
		d.RemoveFaultBehavior = true // gone already, but so that none is put back
		d.endRepair(protocol.RepairFailed, obs.Now, protocol.EventFaultRepairFailed, fmt.Sprintf(
			"GKE's label %s was removed before GKE's flow reported the host (its status %q); it is not put back: the node is drained and stays faulty; its repair is approved again after the pool's cool-down",
			protocol.LabelFaultBehavior, status))
	case !obs.Now.Before(giveUpAt):
		d.RemoveFaultBehavior = true
		d.endRepair(protocol.RepairFailed, obs.Now, protocol.EventFaultRepairFailed, fmt.Sprintf(
			"GKE's report-and-replace flow did not report the host within %s of the label %s; the label is removed, the node is drained and stays faulty; its repair is approved again after the pool's cool-down",
			cfg.GKERepairTimeout, protocol.LabelFaultBehavior))
	default:
		if first || st.GKEStatusBefore == "" && obs.RepairSet {
			// Put on once (by an agent that recorded nothing before, as
			// it always did).
			d.FaultBehavior = protocol.GKEBehavior(obs.Repair.Behavior)
		}
		d.wakeAt(giveUpAt)
	}
}

// gkeStatusIs: GKE's status s is want, whatever its case.
func gkeStatusIs(s, want string) bool { return strings.EqualFold(s, want) }

// BookedRepair: the notice is a repair Compute Engine booked (one of its
// reasons is a FAILURE_* one).
func BookedRepair(n maintenance.Notice) bool {
	for _, r := range n.Reasons {
		if strings.HasPrefix(r, "FAILURE_") {
			return true
		}
	}
	return false
}

// repairAccepted: Compute Engine took the repair; the drained node waits
// for the VM to stop.
func (d *Decision) repairAccepted(cfg Config, now time.Time, how string) {
	d.State.Phase = protocol.PhaseTerminating
	d.State.Deadline = now.Add(cfg.HostMaintenanceDeadline)
	d.Drained = true
	d.Repair = protocol.RepairAccepted
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventFaultReported,
		Message: fmt.Sprintf("Compute Engine took the host's repair (%s); the node is drained, awaiting the VM's stop", how)})
}

// endRepair ends a repair with outcome, the node back in service but for
// the aggregator's faulty taint, which stays while the node is faulty.
func (d *Decision) endRepair(outcome string, now time.Time, reason, msg string) {
	d.Repair = outcome
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: reason, Message: msg})
	d.Uncordon = !d.State.CordonedBefore
	d.RemoveRepair = true
	d.State = idleState(d.State)
	d.State.LastRepair = protocol.LastFaultRepair{Outcome: outcome, Ended: now}
}

// repairBack: the VM came back while a repair was under way, or a
// maintenance that took it over (backInService has put the node back in
// service): the repair is over. The approval goes either way: the VM
// stopped, and the aggregator looks at the node afresh. Asked for, the
// stop was the repair (a report disrupts at once and may stop the VM
// before its answer was written): done, and counted. Otherwise something
// else stopped the VM and the host was not repaired: overtaken, by what
// is recorded; the person's request stands.
func (d *Decision) repairBack(before State, obs Observation) {
	booted := obs.BootID != "" && before.BootID != "" && obs.BootID != before.BootID
	if !before.Active() || !booted || before.Reason != protocol.ReasonFault && !obs.RepairSet {
		return
	}
	d.RemoveRepair = true
	if before.Reason == protocol.ReasonFault && !before.Requested.IsZero() {
		d.RemoveReport = true
		d.Repair = protocol.RepairDone
		d.State.LastRepair = protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: obs.Now}
		d.Interruption = counted(protocol.FaultRepair)
		return
	}
	by := string(before.Reason)
	if before.Reason == protocol.ReasonFault {
		by = protocol.OvertakenByReboot
	}
	d.Repair = protocol.RepairOvertaken
	d.State.LastRepair = protocol.LastFaultRepair{Outcome: protocol.RepairOvertaken, Ended: obs.Now, By: by}
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventFaultRepairOvertaken,
		Message: fmt.Sprintf("The VM stopped for %s before its host's repair (boot ID %s): the host was not repaired; the node stays faulty, and its repair is approved again", by, obs.BootID)})
}
