package lifecycle

// Host maintenance: Compute Engine stops the VM to maintain its host.
// The drain starts on TERMINATE_ON_HOST_MAINTENANCE where maintenance-event
// is served, or when the notice turns ONGOING (the window opens) where it
// is not (TPU VMs); either way the deadline counts the platform's notice
// from when the signal appeared (stopAt). Live migration is recorded and
// changes nothing else.

import (
	"fmt"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// hostMaintenanceRule: announced by the metadata server, it ends when the
// server withdraws it (or the VM stops), is counted when it starts, yields
// to nothing (a preemption still shortens its deadline), and its drain is
// forced: budget-held pods are deleted in time for their grace.
var hostMaintenanceRule = reasonRule{over: signalsWithdrawn, counted: alwaysCounted, yields: neverYields, voluntary: forced}

// maintenanceStarts: the VM's own maintenance or preemption begins, on an
// idle node or over a maintenance that yields to it (reasonRule.yields),
// or a preemption shortens a drain under way.
func (d *Decision) maintenanceStarts(cfg Config, obs Observation) {
	if d.preemption(cfg, obs) { // preemption.go
		return
	}
	sig, now := obs.Signals, obs.Now
	idle, rule := d.State.Phase == protocol.PhaseIdle, ruleOf(d.State.Reason)
	switch {
	case (idle || rule.yields(d.State, protocol.ReasonHostMaintenance)) && sig.EventKnown && sig.Event == maintenance.EventTerminate:
		deadline, how := terminateStop(cfg, sig, now)
		d.hostMaintenance(obs, deadline, protocol.EventTerminateOnHost, "Host maintenance will stop the VM; draining before %s"+how)
	case d.State.Reason == protocol.ReasonHostMaintenance && sig.EventKnown && sig.Event == maintenance.EventTerminate:
		// Under way: the metadata server's keys answer in any order, so
		// the window that bounds the stop may come after the signal.
		if deadline, how := terminateStop(cfg, sig, now); deadline.Before(d.State.Deadline) {
			d.State.Deadline = deadline
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventTerminateOnHost,
				Message: fmt.Sprintf("The drain deadline moves to %s%s", deadline.UTC().Format(time.RFC3339), how)})
		}
	case (sig.EventNotServed || obs.TPU) && (idle || rule.yields(d.State, protocol.ReasonHostMaintenance)) &&
		sig.NoticeKnown && sig.NoticePresent && sig.Notice.Status == maintenance.StatusOngoing && NoticeID(sig.Notice) != d.State.NoticeDone:
		// Where maintenance-event is served, the drain starts on
		// TERMINATE_ON_HOST_MAINTENANCE (as GKE 1.33 does), not at the
		// window's start, and a drain under way goes on as it was until
		// then. On TPU VMs (maintenance-event not served, or the Node says
		// TPU whatever it answers), the window's opening is the signal,
		// and the platform says when it was.
		deadline, how := stopAt(cfg, now, cfg.OngoingDeadline, time.Time{}, sig.Notice.WindowStart, sig.Notice.WindowEnd)
		d.hostMaintenance(obs, deadline, protocol.EventMaintenanceStarted, "The maintenance window has started; draining before %s"+how)
	}
}

// terminateStop is when the VM stops after TERMINATE_ON_HOST_MAINTENANCE
// (stopAt): it comes inside the window, so an open window bounds when it
// appeared, and its end when the VM stops.
func terminateStop(cfg Config, sig Signals, now time.Time) (time.Time, string) {
	after, closes := sig.EventSince, time.Time{}
	if n := sig.Notice; sig.NoticeKnown && sig.NoticePresent && n.Status == maintenance.StatusOngoing {
		if n.WindowStart.After(after) && !n.WindowStart.After(now) {
			after = n.WindowStart
		}
		closes = n.WindowEnd
	}
	return stopAt(cfg, now, cfg.HostMaintenanceDeadline, after, time.Time{}, closes)
}

// stopAt is when the VM stops after a signal that the platform gives
// notice ahead of the stop, and how it was found, for the Event. It counts
// the notice from when the signal appeared, so that a drain never plans
// with time the VM does not have: at opened where the platform says when
// (the window's start, for a notice turning ONGOING), otherwise at the
// earliest moment it may have: after the watcher's last other answer or
// the platform's bound (after), but no earlier than notice ago (it would
// have stopped by now): a bound older than the notice says the VM may stop
// at any moment. When nothing says more than that (the agent was not
// watching when the signal appeared: it just started), the notice counts
// from now, and the Event says so. The stop comes no later than
// closes (the window's end) while that is ahead. An estimate already past
// (the VM outlived what the platform documents) becomes what a preemption
// gets: it may stop at any moment.
func stopAt(cfg Config, now time.Time, notice time.Duration, after, opened, closes time.Time) (time.Time, string) {
	appeared, how := now, "; the agent did not see the signal appear, so its notice counts from now"
	switch {
	case !opened.IsZero() && !opened.After(now):
		appeared, how = opened, ""
		if now.Sub(opened) > time.Second {
			how = fmt.Sprintf("; the window opened at %s, and the %s the VM is given counts from then", opened.UTC().Format(time.RFC3339), notice)
		}
	case after.After(now.Add(-notice)) && !after.After(now):
		appeared, how = after, ""
		if now.Sub(after) > time.Second {
			how = fmt.Sprintf("; the signal came at %s or later (the agent was not watching then), and its notice of %s counts from then", after.UTC().Format(time.RFC3339), notice)
		}
	case !after.IsZero() && !after.After(now):
		// The signal may have come more than its notice ago: the VM, still
		// running, is within its notice, and may stop at any moment.
		return now.Add(cfg.PreemptionDeadline), fmt.Sprintf("; the signal came at %s or later (the agent was not watching then), more than its notice of %s ago, so the VM may stop at any moment: drained as for a preemption",
			after.UTC().Format(time.RFC3339), notice)
	}
	deadline := appeared.Add(notice)
	if closes.After(now) && closes.Before(deadline) {
		deadline, how = closes, "; the maintenance window closes then"
	}
	if !deadline.After(now) {
		deadline, how = now.Add(cfg.PreemptionDeadline), fmt.Sprintf("; the VM outlived the %s the platform gives from %s, so it may stop at any moment: drained as for a preemption", notice, appeared.UTC().Format(time.RFC3339))
	}
	return deadline, how
}

// hostMaintenance starts a host maintenance on an idle node, or over a
// maintenance that yields to it (keeping the earlier deadline).
//
// On a host of a multi-host slice that drains for a voluntary maintenance
// of its slice that another host asks for, the host maintenance that
// begins is that one: starting maintenance on one instance of a slice
// starts it on every instance. It is counted once, by the host that asked
// (manualHappened), not again here.
func (d *Decision) hostMaintenance(obs Observation, deadline time.Time, reason, format string) {
	ofSlice := obs.SliceVoluntary && !obs.SliceCaller && d.State.Active() &&
		(d.State.Reason == protocol.ReasonSlice || d.State.Reason == protocol.ReasonManual && d.State.Requested.IsZero())
	if d.State.Phase == protocol.PhaseIdle {
		d.start(obs, protocol.ReasonHostMaintenance, deadline)
	} else {
		d.State.Reason = protocol.ReasonHostMaintenance
		if deadline.Before(d.State.Deadline) {
			d.State.Deadline = deadline
		}
	}
	msg := fmt.Sprintf(format, d.State.Deadline.UTC().Format(time.RFC3339))
	if ofSlice {
		// Begun marks it the slice's voluntary maintenance, begun: it
		// counts against the voluntary caps until this host is back too.
		d.State.Begun = true
		msg += fmt.Sprintf(". It is the maintenance of the multi-host slice %s, which another host of it asked for: counted once, by that host", obs.Slice)
	} else {
		d.Interruption = countedAs(protocol.ReasonHostMaintenance)
	}
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: reason, Message: msg})
}

// migration: live migration is recorded, once per announcement, and
// changes nothing else.
func (d *Decision) migration(sig Signals) {
	if !sig.EventKnown {
		return
	}
	if sig.Event == maintenance.EventMigrate && d.State.LastEvent != maintenance.EventMigrate {
		d.Migration = true
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventMigrateOnHost,
			Message: "Compute Engine will live-migrate the VM; nothing to drain"})
	}
	d.State.LastEvent = sig.Event
}

// signalsWithdrawn: every signal is known and quiet, and the notice is
// gone or pending again (503 "not yet" proves nothing).
func signalsWithdrawn(_ Config, _ State, obs Observation) bool {
	sig := obs.Signals
	return signalsQuiet(sig) && (!sig.NoticePresent && !sig.NoticeNotYet || sig.Notice.Status == maintenance.StatusPending)
}

// signalsQuiet: no maintenance-event, no preemption, and the notice answered.
func signalsQuiet(sig Signals) bool {
	return sig.EventKnown && sig.Event == maintenance.EventNone && sig.PreemptedKnown && !sig.Preempted && sig.NoticeKnown
}
