package lifecycle

// Preemption: a Spot or preemptible VM is told it is preempted (preempted
// TRUE) and stops about 30 s later, or, for a Spot VM with a preemption
// notice, that notice and 30 s later. It takes over any maintenance under
// way, and shortens its deadline.

import (
	"fmt"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// preemptionRule: announced by the metadata server, it ends when the
// server withdraws it (or the VM stops), is counted when it starts, yields
// to nothing, and its drain is forced.
var preemptionRule = reasonRule{over: signalsWithdrawn, counted: alwaysCounted, yields: neverYields, voluntary: forced}

// preemption: the VM is preempted (it reports whether it is): on an idle
// node the drain starts by the preemption's deadline; over a maintenance
// under way, the preemption takes it over where that maintenance yields
// to it, and shortens its deadline in any case.
func (d *Decision) preemption(cfg Config, obs Observation) bool {
	sig := obs.Signals
	if !sig.PreemptedKnown || !sig.Preempted {
		return false
	}
	now, idle, rule := obs.Now, d.State.Phase == protocol.PhaseIdle, ruleOf(d.State.Reason)
	deadline, how := stopAt(cfg, now, preemptionBudget(cfg, obs), sig.PreemptedSince, time.Time{}, time.Time{})
	if idle {
		d.start(obs, protocol.ReasonPreemption, deadline)
		d.Interruption = countedAs(protocol.ReasonPreemption)
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventPreempted,
			Message: fmt.Sprintf("The VM was preempted; draining before it stops at %s%s", deadline.UTC().Format(time.RFC3339), how)})
		return true
	}
	if d.State.Reason == protocol.ReasonPreemption || !deadline.Before(d.State.Deadline) && !rule.yields(d.State, protocol.ReasonPreemption) {
		return true
	}
	if !rule.counted(d.State) {
		d.Interruption = countedAs(protocol.ReasonPreemption)
	}
	d.State.Reason = protocol.ReasonPreemption
	if deadline.Before(d.State.Deadline) {
		d.State.Deadline = deadline
	}
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventPreempted,
		Message: fmt.Sprintf("The VM was preempted during maintenance; the drain deadline moves to %s", d.State.Deadline.UTC().Format(time.RFC3339))})
	return true
}

// SpotSoftOff is the time from a Spot VM's soft-off (ACPI G2) to its hard
// stop.
const SpotSoftOff = 30 * time.Second

// preemptionBudget is the time from preempted=TRUE to the VM's stop: a
// Spot VM with a preemption notice gets the notice and then the soft-off
// (MachineView.PreemptionNotice); any other, PreemptionDeadline.
func preemptionBudget(cfg Config, obs Observation) time.Duration {
	if obs.PreemptionNotice > 0 {
		return obs.PreemptionNotice + SpotSoftOff
	}
	return cfg.PreemptionDeadline
}
