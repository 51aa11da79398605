package agent

// What the VM's own clock says: a Spot VM's preemption notice, and the
// VM's known end (a time limit). The agent learns it once at start (a
// VM's time limit is set when it starts running, and the agent starts
// again with the VM).

import (
	"context"
	"errors"
	"time"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Schedule is what the agent learned of the VM's clock.
type Schedule struct {
	// PreemptionNotice is a Spot VM's preemption notice (zero: none, or
	// not known).
	PreemptionNotice time.Duration
	// NoticeWanted: the VM is preemptible and its notice was to be read;
	// a refused read is then said in a Warning Event (otherwise only in
	// the log and the metric: most VMs have neither a notice nor an end).
	NoticeWanted bool
	// End is the VM's known end (zero: none) once EndKnown, and EndCause
	// says where it comes from.
	End      time.Time
	EndKnown bool
	EndCause string
	// Reportable says whether Compute Engine would take a report of the
	// VM's host, where its instances.get was read.
	Reportable lifecycle.ReportableView
	// LiveMigrates: the metadata server says the VM's host maintenance
	// policy is MIGRATE (instance/scheduling/on-host-maintenance), which
	// no VM with accelerators has: host maintenance moves it without a
	// stop. It is read from the metadata server alone, and kept where
	// instances.get is refused.
	LiveMigrates bool
}

// knownEnd is what a step reads of s.
func (s Schedule) knownEnd() lifecycle.KnownEndView {
	return lifecycle.KnownEndView{KnownEnd: s.End, KnownEndKnown: s.EndKnown, KnownEndCause: s.EndCause}
}

// learnSchedule asks for the VM's schedule once (again with backoff
// after an error, but for a missing permission, which is said), and
// wakes the loop when it is known.
func (a *Agent) learnSchedule(ctx context.Context) {
	if a.opts.Schedule == nil {
		return
	}
	for attempt := 1; ; attempt++ {
		sched, err := a.opts.Schedule(ctx)
		switch {
		case err == nil:
			a.learned(sched)
			if sched.PreemptionNotice > 0 {
				a.log.Info("the VM has a preemption notice", "notice", sched.PreemptionNotice)
			}
			if !sched.End.IsZero() {
				a.log.Info("the VM has a known end", "end", sched.End, "cause", sched.EndCause)
			}
			a.poke()
			return
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrObserveOnly):
			// Asked through the aggregator, which an observed node does
			// not ask: tried again, in case the mode changes.
			a.log.Info("the VM's schedule is not asked for while the node is observed only", "retry_in", backoff.Default.Max)
			if backoff.Wait(ctx, a.opts.Clock, backoff.Default.Max) != nil {
				return
			}
			continue
		case errors.Is(err, compute.ErrPermissionDenied) && sched.NoticeWanted:
			a.learned(sched)
			a.log.Warn("the VM's schedule cannot be read", "err", err)
			a.permissionDenied(compute.GetPermission, err)
			return
		case errors.Is(err, compute.ErrPermissionDenied):
			a.learned(sched)
			a.log.Info("the VM's known end cannot be read; a time limit is not drained for (grant compute.instances.get, or set --known-end=none)", "err", err)
			a.opts.Metrics.PermissionDenied(compute.GetPermission)
			return
		}
		delay := backoff.Default.Delay(attempt)
		a.log.Warn("the VM's schedule not read; retrying", "err", err, "retry_in", delay)
		if backoff.Wait(ctx, a.opts.Clock, delay) != nil {
			return
		}
	}
}

// learned keeps what the agent learned of the VM's schedule (what it could
// read, where instances.get was refused), and says once that the VM
// live-migrates, where it does.
func (a *Agent) learned(sched Schedule) {
	a.mu.Lock()
	a.schedule = sched
	a.mu.Unlock()
	if sched.LiveMigrates {
		a.opts.Events.NodeEvent(false, protocol.EventLiveMigrates, "This VM live-migrates on host maintenance (its instance/scheduling/on-host-maintenance is MIGRATE): "+
			"a host maintenance does not stop it, so the agent drains for none, and refuses "+protocol.LabelPerformMaintenance+"=true; "+
			"a preemption, a fault's repair and a known end are handled as on any VM.")
		a.log.Info("the VM live-migrates on host maintenance: no host maintenance is drained for")
	}
}
