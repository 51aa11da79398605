package lifecycle

// The manual maintenance's sub-machine: how the agent answers the
// perform-maintenance label (TriggerCheck, manualcheck.go), drains, asks
// Compute Engine once, and waits for the maintenance to begin; and the
// failure memory of voluntary maintenance. The rules are in the package
// documentation.

import (
	"fmt"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// manualRule: started by the perform-maintenance label (a person's or the
// aggregator's), it is counted once Compute Engine begins it or the VM
// stops for it, yields to the VM's own maintenance until Compute Engine is
// asked (to a preemption always), drains voluntarily, and, drained, asks
// Compute Engine.
var manualRule = reasonRule{over: manualWithdrawn, counted: State.ManualBegun, yields: manualYields, voluntary: voluntary, asksCompute: true}

// manual handles the perform-maintenance label and the performMaintenance
// call of a manual maintenance.
func (d *Decision) manual(cfg Config, obs Observation) {
	st := d.State
	switch {
	case st.Phase == protocol.PhaseIdle:
		d.answerTrigger(cfg, obs)
	case st.RequestID == "":
		// A maintenance the label did not start.
		if obs.TriggerSet {
			answer := triggerCheck(cfg, st, obs).Answer()
			d.reject(answer.Outcome, answer.Message)
		}
	case st.LeftToGKE:
		// GKE's handler has the maintenance the label started: it drains
		// and calls; the label is its to consume.
	default:
		d.manualUnderWay(cfg, obs)
	}
}

// answerTrigger answers the label on a node in service: a manual
// maintenance starts, or the label is rejected, or the answer waits.
func (d *Decision) answerTrigger(cfg Config, obs Observation) {
	sig, st := obs.Signals, d.State
	if !obs.TriggerSet || d.RemoveTrigger {
		return
	}
	if obs.Trigger == protocol.TriggerValue && !sig.NoticeKnown {
		return // wait until the metadata server has answered
	}
	answer := triggerCheck(cfg, st, obs).Answer()
	switch {
	case answer.Wait:
		return // re-checked once the pods are known
	case !answer.Accepted():
		d.reject(answer.Outcome, answer.Message)
	default:
		n := sig.Notice
		deadline := obs.Now.Add(cfg.ManualDrainTimeout)
		d.start(obs, protocol.ReasonManual, deadline)
		d.State.RequestID = obs.RequestID
		d.Manual = protocol.ManualStarted
		who := protocol.LabelPerformMaintenance + "=true"
		if obs.Opportunistic {
			who = "Picked for opportunistic maintenance (" + who + ")"
		}
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualStarted,
			Message: fmt.Sprintf("%s: draining the node before %s, then asking Compute Engine to start the maintenance scheduled for %s now",
				who, deadline.UTC().Format(time.RFC3339), n.WindowStart.UTC().Format(time.RFC3339))})
	}
}

// manualUnderWay: a manual maintenance the label started is under way.
func (d *Decision) manualUnderWay(cfg Config, obs Observation) {
	sig, st := obs.Signals, d.State
	if obs.TriggerSet && obs.Trigger != protocol.TriggerValue {
		d.reject(protocol.ManualInvalidValue, fmt.Sprintf("The label %s=%q is not accepted: the only accepted value is %q. The manual maintenance already under way goes on.",
			protocol.LabelPerformMaintenance, obs.Trigger, protocol.TriggerValue))
	}
	if st.Reason == protocol.ReasonManual && st.Phase == protocol.PhaseTerminating && !underWay(sig) {
		d.awaitStart(cfg, obs)
		return
	}
	if st.Reason != protocol.ReasonManual || st.Phase != protocol.PhaseDraining {
		return
	}
	if st.Requested.IsZero() && obs.SliceUnknown != "" && d.sliceUnknownHolds(cfg, obs) {
		return
	}
	if st.Requested.IsZero() && obs.Slice != "" && d.sliceWaits(cfg, obs) {
		return
	}
	d.perform(cfg, obs, st)
}

// perform: a manual maintenance drains, then asks Compute Engine once;
// how the call ends decides what follows. st is the state the manual
// maintenance's step began with.
func (d *Decision) perform(cfg Config, obs Observation, st State) {
	sig := obs.Signals
	if r := obs.Perform; r != nil && r.RequestID == st.RequestID {
		d.answered(cfg, obs, st, r)
		return
	}
	switch {
	case !st.Requested.IsZero() && startedByCompute(sig):
		// Asked before (by this agent or one before it): the signals
		// show the request went through; never ask twice.
		d.accept(cfg, obs.Now, "the metadata server shows the maintenance starting")
	case st.Requested.IsZero() && sig.NoticeKnown && !(sig.NoticePresent && sig.Notice.Status == maintenance.StatusPending && sig.Notice.CanReschedule):
		// Before asking: the notice is gone or can no longer be
		// started early, so there is nothing to ask for.
		d.Manual = protocol.ManualNotReschedulable
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualFailed,
			Message: fmt.Sprintf("%s; Compute Engine was not asked. The node is back in service (taint, maintenance label and %s removed).", notReschedulable(sig), protocol.LabelPerformMaintenance)})
		d.Uncordon = !st.CordonedBefore
		d.RemoveTrigger = true
		d.State = idleState(st)
	case d.drainDone(cfg, obs) && len(obs.DrainLeft) > 0 && st.Requested.IsZero() && !cfg.ManualDrainEscalate:
		// Voluntary: the budgets held to the end, or pods are stuck.
		what := "the node is"
		if obs.Slice != "" {
			what = fmt.Sprintf("it is given up on every host of the multi-host slice %s, and the slice is", obs.Slice)
		}
		d.giveUp(fmt.Sprintf("The drain could not finish by its deadline %s: %d pod(s) are still on the node (PodDisruptionBudgets that never allowed their eviction, or pods stuck terminating): %s. This maintenance is voluntary, so no pod was deleted and Compute Engine was not asked; %s back in service (taint, maintenance label and %s removed).",
			st.Deadline.UTC().Format(time.RFC3339), len(obs.DrainLeft), Excerpt(obs.DrainLeft, 5), what, protocol.LabelPerformMaintenance))
	case d.drainDone(cfg, obs) && sig.EventKnown && sig.PreemptedKnown && sig.NoticeKnown:
		if !d.mayCall(cfg, obs.Now) {
			return // the node's last call may still be carried out: none meanwhile
		}
		if st.Requested.IsZero() {
			d.State.Requested = obs.Now
		}
	}
}

// answered: the call for st's request has ended with r.
func (d *Decision) answered(cfg Config, obs Observation, st State, r *PerformResult) {
	switch {
	case r.Err == nil:
		d.accept(cfg, obs.Now, "operation "+r.Operation)
	case underWay(obs.Signals):
		// No answer in time, or a refusal because Compute Engine had
		// already begun: the maintenance is starting either way, and
		// the node must not go back in service.
		d.accept(cfg, obs.Now, "the metadata server shows the maintenance starting")
	default:
		d.Manual = r.Outcome
		e := EventRecord{Warning: true, Reason: protocol.EventManualFailed,
			Message: fmt.Sprintf("Compute Engine did not start the maintenance: %v. The node is back in service (taint, maintenance label and %s removed).", r.Err, protocol.LabelPerformMaintenance)}
		if r.Outcome == protocol.ManualObserved {
			e = EventRecord{Reason: protocol.EventManualObserved,
				Message: fmt.Sprintf("Observe-only: the node would now be drained and Compute Engine asked to start the maintenance (request %s); no pod was evicted and no call made. The maintenance stays pending, and the node as it was.", st.RequestID)}
		}
		d.Events = append(d.Events, e)
		d.Uncordon = !st.CordonedBefore
		d.RemoveTrigger = true
		d.State = idleState(st)
	}
}

// notReschedulable says why a manual maintenance not yet asked for can no
// longer be started early. The window opening is one reason: on a VM that
// serves maintenance-event (a TPU VM's opened window is its host
// maintenance, which maintenanceStarts took over) the drain then comes
// with TERMINATE_ON_HOST_MAINTENANCE.
func notReschedulable(sig Signals) string {
	if sig.NoticePresent && sig.Notice.Status == maintenance.StatusOngoing {
		return fmt.Sprintf("The maintenance window opened (%s) before Compute Engine was asked: the maintenance now begins on Compute Engine's schedule, and on this VM its drain starts with TERMINATE_ON_HOST_MAINTENANCE, about an hour before the stop, as for any host maintenance",
			sig.Notice.WindowStart.UTC().Format(time.RFC3339))
	}
	return "The maintenance can no longer be started early (the notice is gone or no longer reschedulable)"
}

// triggerCheck is what the agent knows of the trigger, for
// TriggerCheck.Answer.
func triggerCheck(cfg Config, st State, obs Observation) TriggerCheck {
	return TriggerCheck{Value: obs.Trigger, State: st, Notice: obs.Signals.Notice, NoticePresent: obs.Signals.NoticePresent,
		Opportunistic: obs.Opportunistic, TriggeredAt: obs.TriggeredAt, TriggerFor: obs.TriggerFor, PodsKnown: obs.PodsKnown,
		Idle: obs.Idle, Busy: obs.Busy, MaxAge: cfg.TriggerMaxAge, Now: obs.Now, Blocked: obs.ManualBlocked, BlockedDetail: obs.ManualBlockedDetail,
		LiveMigrates: obs.LiveMigrates}
}

// awaitStart: Compute Engine accepted the call and the maintenance has not
// begun. If the call's operation failed, or the maintenance has not begun
// by startBound, the node goes back in service; otherwise the loop wakes
// at that bound.
func (d *Decision) awaitStart(cfg Config, obs Observation) {
	st := d.State
	r := obs.Perform
	startBy := startBound(cfg, st)
	var why string
	switch {
	case r != nil && r.RequestID == st.RequestID && r.OperationErr != nil:
		why = fmt.Sprintf("its operation failed: %v", r.OperationErr)
	case st.Deadline.IsZero():
		return
	case !obs.Now.Before(startBy):
		why = fmt.Sprintf("the maintenance has not begun %s after Compute Engine accepted the request", cfg.ManualStartTimeout)
	default:
		d.wakeAt(startBy)
		return
	}
	d.Manual = protocol.ManualNotStarted
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualNotStarted,
		Message: fmt.Sprintf("Compute Engine accepted the request to start the maintenance now, but %s. The node is back in service (taint, maintenance label and %s removed); the maintenance stays pending.", why, protocol.LabelPerformMaintenance)})
	d.Uncordon = !st.CordonedBefore
	d.RemoveTrigger = true
	d.State = idleState(st)
}

// startedByCompute: the signals show that Compute Engine has taken the
// maintenance in hand.
// A notice that is still PENDING but no longer reschedulable is taken as
// the answer to the agent's own request (which is how Compute Engine
// answers it first).
func startedByCompute(sig Signals) bool {
	return underWay(sig) || sig.NoticeKnown && sig.NoticePresent && !sig.Notice.CanReschedule
}

// underWay: the maintenance itself has begun.
func underWay(sig Signals) bool {
	return sig.EventKnown && sig.Event == maintenance.EventTerminate ||
		sig.NoticeKnown && sig.NoticePresent && sig.Notice.Status == maintenance.StatusOngoing
}

// accept: Compute Engine accepted the manual maintenance; the node is
// drained and waits for the VM to stop.
func (d *Decision) accept(cfg Config, now time.Time, how string) {
	d.State.Phase = protocol.PhaseTerminating
	d.State.Deadline = now.Add(cfg.HostMaintenanceDeadline)
	d.Drained = true
	d.Manual = protocol.ManualAccepted
	d.Events = append(d.Events, EventRecord{Reason: protocol.EventManualAccepted,
		Message: fmt.Sprintf("Compute Engine accepted the request to start the maintenance now (%s); the node is drained, awaiting node termination", how)})
}

// reject answers a perform-maintenance label the agent does not act on.
func (d *Decision) reject(outcome, msg string) {
	d.RemoveTrigger = true
	d.Manual = outcome
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualRejected,
		Message: msg + " The label was removed; nothing else changed."})
}

// giveUp ends a voluntary maintenance not asked for: the node goes back
// in service, and the failure is remembered.
func (d *Decision) giveUp(msg string) {
	d.Manual = protocol.ManualAbandoned
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualAbandoned, Message: msg})
	d.Uncordon = !d.State.CordonedBefore
	d.RemoveTrigger = true
	d.State = idleState(d.State)
}

// manualHappened counts a manual (or opportunistic) maintenance once, when
// it happens: when Compute Engine is seen to begin it
// (TERMINATE_ON_HOST_MAINTENANCE or the notice ONGOING after the call,
// recorded as Begun), or, where that was not seen, when the VM comes back
// from the stop. An accepted call whose operation fails or that never
// begins is a failure, not an interruption. It clears the failure memory.
func (d *Decision) manualHappened(before State, obs Observation) {
	booted := obs.BootID != "" && before.BootID != "" && obs.BootID != before.BootID
	// The VM stopped for a manual maintenance the agent had asked for, or
	// had left to GKE's handler, and had not seen begin.
	stoppedUnseen := booted && before.Reason == protocol.ReasonManual && (before.Phase == protocol.PhaseTerminating || before.LeftToGKE) && !before.Begun
	st := &d.State
	seen := st.Reason == protocol.ReasonManual && st.Phase == protocol.PhaseTerminating && !st.Begun && underWay(obs.Signals)
	if seen {
		st.Begun = true
	}
	if !stoppedUnseen && !seen {
		return
	}
	d.Interruption = countedAs(protocol.ReasonManual)
	d.State.Failures = protocol.Failures{}
}

// manualWithdrawn: once Compute Engine accepted the call, only a notice
// gone without the VM stopping means the maintenance was withdrawn;
// before, a quiet VM with a pending notice is what a manual maintenance
// looks like.
func manualWithdrawn(_ Config, st State, obs Observation) bool {
	sig := obs.Signals
	return st.Phase == protocol.PhaseTerminating && signalsQuiet(sig) && !sig.NoticePresent && !sig.NoticeNotYet
}

// manualYields: a preemption takes a manual maintenance over in any
// phase; a host maintenance only while Compute Engine has not been asked.
func manualYields(st State, to protocol.Reason) bool {
	return to == protocol.ReasonPreemption || st.Phase == protocol.PhaseDraining && st.Requested.IsZero()
}

// startBound is when a maintenance or repair Compute Engine accepted must
// have begun: ManualStartTimeout after the acceptance, which is the
// deadline accept (or repairAccepted) set, less HostMaintenanceDeadline.
func startBound(cfg Config, st State) time.Time {
	return st.Deadline.Add(cfg.ManualStartTimeout - cfg.HostMaintenanceDeadline)
}
