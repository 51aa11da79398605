package agent

// The trigger sub-machine: how the agent answers the perform-maintenance
// label (protocol.TriggerCheck), drains, asks Compute Engine once, and
// waits for the maintenance to begin; and the failure memory of voluntary
// maintenance. Step calls it (state.go); the rules are in state.go's
// header.

import (
	"fmt"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// manual handles the perform-maintenance label and the performMaintenance
// call of a manual maintenance.
func (d *Decision) manual(cfg Config, obs Observation) {
	sig := obs.Signals
	st := d.State
	switch {
	case st.Phase == protocol.PhaseIdle:
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
	case st.RequestID == "":
		// A maintenance the label did not start.
		if obs.TriggerSet {
			answer := triggerCheck(cfg, st, obs).Answer()
			d.reject(answer.Outcome, answer.Message)
		}
	case st.LeftToGKE:
		// GKE's handler has the maintenance the label started: it drains
		// and calls; the label is its to consume.
	default: // a maintenance the label started
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
		if st.Requested.IsZero() && obs.Slice != "" && d.sliceWaits(cfg, obs) {
			return
		}
		switch r := obs.Perform; {
		case r != nil && r.RequestID == st.RequestID && r.Err == nil:
			d.accept(cfg, obs.Now, "operation "+r.Operation)
		case r != nil && r.RequestID == st.RequestID && underWay(sig):
			// No answer in time, or a refusal because Compute Engine had
			// already begun: the maintenance is starting either way, and
			// the node must not go back in service.
			d.accept(cfg, obs.Now, "the metadata server shows the maintenance starting")
		case r != nil && r.RequestID == st.RequestID:
			d.Manual = r.Outcome
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualFailed,
				Message: fmt.Sprintf("Compute Engine did not start the maintenance: %v. The node is back in service (taint, maintenance label and %s removed).", r.Err, protocol.LabelPerformMaintenance)})
			d.Uncordon = !st.CordonedBefore
			d.RemoveTrigger = true
			d.State = idleState(st)
		case !st.Requested.IsZero() && startedByCompute(sig):
			// Asked before (by this agent or one before it): the signals
			// show the request went through; never ask twice.
			d.accept(cfg, obs.Now, "the metadata server shows the maintenance starting")
		case st.Requested.IsZero() && sig.NoticeKnown && !(sig.NoticePresent && sig.Notice.Status == metadata.StatusPending && sig.Notice.CanReschedule):
			// Before asking: the notice is gone or can no longer be
			// started early, so there is nothing to ask for.
			d.Manual = protocol.ManualNotReschedulable
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualFailed,
				Message: fmt.Sprintf("The maintenance can no longer be started early (the notice is gone or no longer reschedulable); Compute Engine was not asked. The node is back in service (taint, maintenance label and %s removed).", protocol.LabelPerformMaintenance)})
			d.Uncordon = !st.CordonedBefore
			d.RemoveTrigger = true
			d.State = idleState(st)
		case obs.DrainDone && len(obs.DrainLeft) > 0 && st.Requested.IsZero() && !cfg.ManualDrainEscalate:
			// Voluntary: the budgets held to the end, or pods are stuck.
			what := "the node is"
			if obs.Slice != "" {
				what = fmt.Sprintf("it is given up on every host of the multi-host slice %s, and the slice is", obs.Slice)
			}
			d.giveUp(fmt.Sprintf("The drain could not finish by its deadline %s: %d pod(s) are still on the node (PodDisruptionBudgets that never allowed their eviction, or pods stuck terminating): %s. This maintenance is voluntary, so no pod was deleted and Compute Engine was not asked; %s back in service (taint, maintenance label and %s removed).",
				st.Deadline.UTC().Format(time.RFC3339), len(obs.DrainLeft), excerpt(obs.DrainLeft, 5), what, protocol.LabelPerformMaintenance))
		case obs.DrainDone && sig.EventKnown && sig.PreemptedKnown && sig.NoticeKnown:
			d.Perform = true
			if st.Requested.IsZero() {
				d.State.Requested = obs.Now
			}
		}
	}
}

// sliceWaits: a manual (or opportunistic) maintenance of a host of a
// multi-host slice, not yet asked for, waits for its slice; false when
// the maintenance goes on as any other (the caller, every other host
// drained). Starting maintenance on one instance of a slice starts it on
// every instance, so the slice makes one call (its caller's,
// protocol.SliceCaller), and only once every other host is drained: the
// others follow this host's maintenance (protocol.SliceAsks) and drain
// voluntarily by its deadline. A drain that could not finish on any host
// gives the maintenance up on every host: the caller goes back in
// service, which withdraws the slice's asks. A host with a manual
// maintenance that is not the caller (a person labelled two hosts)
// drains and waits for the slice's maintenance to begin on its own VM
// (maintenanceStarts), bounded by ManualStartTimeout past its deadline.
func (d *Decision) sliceWaits(cfg Config, obs Observation) bool {
	st := d.State
	if len(obs.SliceIncomplete) > 0 {
		d.giveUp(fmt.Sprintf("The drain of host(s) %s of the multi-host slice %s could not finish by the deadline %s (PodDisruptionBudgets that never allowed their eviction, or pods stuck terminating). A slice stops whole or not at all, and this maintenance is voluntary: it is given up on every host, no pod was deleted and Compute Engine was not asked; the slice is back in service (taint, maintenance label and %s removed).",
			excerpt(obs.SliceIncomplete, 5), obs.Slice, st.Deadline.UTC().Format(time.RFC3339), protocol.LabelPerformMaintenance))
		return true
	}
	if !obs.DrainDone {
		return !obs.SliceCaller
	}
	if len(obs.DrainLeft) > 0 {
		if obs.SliceCaller {
			return false // given up as on any node
		}
		// The caller gives the slice up when it reads this.
		if st.Drain != protocol.DrainIncomplete {
			d.State.Drain = protocol.DrainIncomplete
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualAbandoned,
				Message: fmt.Sprintf("The drain could not finish by its deadline %s: %d pod(s) are still on the node: %s. No pod was deleted; the maintenance of the multi-host slice %s is given up on every host.",
					st.Deadline.UTC().Format(time.RFC3339), len(obs.DrainLeft), excerpt(obs.DrainLeft, 5), obs.Slice)})
		}
		return true
	}
	d.State.Drain = protocol.DrainDone
	switch {
	case !obs.SliceCaller:
		if startBy := st.Deadline.Add(cfg.ManualStartTimeout); obs.Now.Before(startBy) {
			d.wakeAt(startBy)
			return true
		}
		d.giveUp(fmt.Sprintf("The maintenance of the multi-host slice %s, which another host of it asks for, has not begun %s after this host's deadline %s. The node is back in service (taint, maintenance label and %s removed).",
			obs.Slice, cfg.ManualStartTimeout, st.Deadline.UTC().Format(time.RFC3339), protocol.LabelPerformMaintenance))
	case len(obs.SliceWaiting) == 0:
		return false // every host is drained: ask
	case obs.Now.Before(st.Deadline):
		d.wakeAt(st.Deadline) // the hosts still draining wake the loop
	default:
		d.giveUp(fmt.Sprintf("Host(s) %s of the multi-host slice %s had not finished draining by the deadline %s. A slice stops whole or not at all, and this maintenance is voluntary: it is given up on every host and Compute Engine was not asked; the slice is back in service (taint, maintenance label and %s removed).",
			excerpt(obs.SliceWaiting, 5), obs.Slice, st.Deadline.UTC().Format(time.RFC3339), protocol.LabelPerformMaintenance))
	}
	return true
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

// triggerCheck is what the agent knows of the trigger, for
// protocol.TriggerCheck.Answer.
func triggerCheck(cfg Config, st State, obs Observation) protocol.TriggerCheck {
	return protocol.TriggerCheck{Value: obs.Trigger, State: st, Notice: obs.Signals.Notice, NoticePresent: obs.Signals.NoticePresent,
		Opportunistic: obs.Opportunistic, TriggeredAt: obs.TriggeredAt, TriggerFor: obs.TriggerFor, PodsKnown: obs.PodsKnown,
		Idle: obs.Idle, Busy: obs.Busy, MaxAge: cfg.TriggerMaxAge, Now: obs.Now, Blocked: obs.ManualBlocked, BlockedDetail: obs.ManualBlockedDetail}
}

// awaitStart: Compute Engine accepted the call and the maintenance has not
// begun. If the call's operation failed, or the maintenance has not begun
// ManualStartTimeout after the acceptance, the node goes back in service;
// otherwise the loop wakes at that bound. The acceptance time is the
// deadline accept set, less HostMaintenanceDeadline.
func (d *Decision) awaitStart(cfg Config, obs Observation) {
	st := d.State
	r := obs.Perform
	startBy := st.Deadline.Add(cfg.ManualStartTimeout - cfg.HostMaintenanceDeadline)
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
	return sig.EventKnown && sig.Event == metadata.EventTerminate ||
		sig.NoticeKnown && sig.NoticePresent && sig.Notice.Status == metadata.StatusOngoing
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

// excerpt joins at most n names, saying how many more there are.
func excerpt(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// voluntaryFailure: the outcome is a voluntary maintenance that Compute
// Engine did not start or the drain gave up, which the aggregator should
// not try again at once (a rejected label is not one).
func voluntaryFailure(outcome string) bool {
	switch outcome {
	case protocol.ManualFailed, protocol.ManualPermissionDenied, protocol.ManualRefused, protocol.ManualNotStarted, protocol.ManualAbandoned:
		return true
	}
	return false
}

// nextFailures is f with one more failure at now: the cool-down doubles
// with each failure in a row, from FailureCooldown to MaxFailureCooldown.
func nextFailures(cfg Config, f protocol.Failures, outcome string, now time.Time) protocol.Failures {
	f.Count++
	f.Reason, f.Last = outcome, now
	wait := cfg.FailureCooldown
	for i := 1; i < f.Count && wait < cfg.MaxFailureCooldown; i++ {
		wait *= 2
	}
	f.RetryAfter = now.Add(min(wait, cfg.MaxFailureCooldown))
	return f
}

// rememberFailure: a voluntary maintenance that failed is remembered, for
// the aggregator's cool-down; one that happened (manualHappened) clears
// the record. Compute Engine's acceptance alone does neither.
func (d *Decision) rememberFailure(cfg Config, now time.Time) {
	if voluntaryFailure(d.Manual) {
		d.State.Failures = nextFailures(cfg, d.State.Failures, d.Manual, now)
	}
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
