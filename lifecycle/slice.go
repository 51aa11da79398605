package lifecycle

// A host of a multi-host slice drains with its slice: the ask (another
// host stops) is followed by the earlier deadline, expires after
// SliceDrainLimit, and a voluntary maintenance of the slice waits for
// every host before its one call (sliceWaits). The rules the agent and
// the aggregator share (which hosts are a slice, who asks, who calls) are
// slicehosts.go.

import (
	"fmt"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// sliceRule: a host's drain with its multi-host slice follows the slice's
// ask and ends when the ask is withdrawn; it is never counted (the host
// that stops counts itself), yields to the VM's own maintenance, and
// drains as its cause does: voluntarily for a manual or opportunistic
// maintenance.
var sliceRule = reasonRule{over: sliceAskWithdrawn, counted: neverCounted, yields: alwaysYields, voluntary: causeVoluntary}

// sliceAskLimit: while the ask is followed, the step wakes when it
// expires (settle), so that the host goes back in service then, and says
// why.
func (d *Decision) sliceAskLimit(obs Observation) {
	if obs.SliceAskSet {
		d.wakeAt(obs.SliceAsk.Started.Add(SliceDrainLimit))
	}
}

// followSlice: another host of the node's multi-host slice stops (the
// ask): drain with it, or by its earlier deadline. It comes after the
// trigger, so that a host whose own pending maintenance is taken with the
// slice's starts that maintenance instead. An ask whose deadline has
// passed (the agent read it late: it was down, or just started) gives the
// drain what a preemption gives: the cause's host may be gone already,
// and a drain by a past deadline would give every pod a second.
func (d *Decision) followSlice(cfg Config, obs Observation) {
	ask := obs.SliceAsk
	if !obs.SliceAskSet {
		return
	}
	deadline, late := ask.Deadline, ""
	if !deadline.After(obs.Now) {
		deadline = obs.Now.Add(cfg.PreemptionDeadline)
		late = fmt.Sprintf(" (its deadline %s has passed: drained as for a preemption)", ask.Deadline.UTC().Format(time.RFC3339))
	}
	switch {
	case d.State.Phase == protocol.PhaseIdle:
		d.start(obs, protocol.ReasonSlice, deadline)
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventSliceDrain,
			Message: fmt.Sprintf("Host %s of the multi-host slice %s stops (%s); its job cannot run without it, so this host drains with it, before %s%s",
				ask.Cause, ask.Slice, ask.Reason, deadline.UTC().Format(time.RFC3339), late)})
	case deadline.Before(d.State.Deadline):
		d.State.Deadline = deadline
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventSliceDeadline,
			Message: fmt.Sprintf("Host %s of the multi-host slice %s stops first (%s); this host's drain deadline moves to %s%s",
				ask.Cause, ask.Slice, ask.Reason, deadline.UTC().Format(time.RFC3339), late)})
	}
}

// sliceTurnsForced: the slice's ask has a forced cause (another host is
// preempted, or its own host maintenance begins) while this host drains for
// a manual or opportunistic maintenance not yet asked of Compute Engine
// (the slice's caller, or a second host a person labelled). The slice
// stops by force whatever this host does, so this host's maintenance
// becomes the slice's: it drains as the cause does, forced, by the ask's
// deadline (followSlice), and goes back in service with the slice; it is
// not a failure, and Compute Engine is not asked. The label is removed
// when it ends (its request ID is kept for that).
func (d *Decision) sliceTurnsForced(obs Observation) {
	st := d.State
	if !obs.SliceAskSet || causeVoluntary(obs) || st.Phase != protocol.PhaseDraining || st.Reason != protocol.ReasonManual || !st.Requested.IsZero() || st.LeftToGKE {
		return
	}
	d.State.Reason, d.State.Drain = protocol.ReasonSlice, ""
	ask := obs.SliceAsk
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventSliceDrain,
		Message: fmt.Sprintf("Host %s of the multi-host slice %s stops by force (%s) while this host drains for a manual maintenance: the slice goes down whatever this host does, so this host drains with it, forced (PodDisruptionBudgets no longer hold, each pod's grace is kept), and Compute Engine is not asked; the label %s is removed when the slice is back",
			ask.Cause, ask.Slice, ask.Reason, protocol.LabelPerformMaintenance)})
}

// drained: the drain finished, and the node waits for the VM to stop. A
// maintenance that asks Compute Engine (reasonRule.asksCompute) is
// finished when Compute Engine accepts it (trigger.go).
func (d *Decision) drained(cfg Config, obs Observation) {
	if d.State.Phase != protocol.PhaseDraining || ruleOf(d.State.Reason).asksCompute || !d.drainDone(cfg, obs) {
		return
	}
	if d.State.Reason == protocol.ReasonSlice && len(obs.DrainLeft) > 0 && voluntaryDrain(cfg, d.State, obs) {
		// A voluntary maintenance of the slice: the host that asks for it
		// reads this and gives the slice up, which withdraws the ask.
		if d.State.Drain != protocol.DrainIncomplete {
			d.State.Drain = protocol.DrainIncomplete
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualAbandoned,
				Message: fmt.Sprintf("The drain for the multi-host slice %s could not finish by its deadline %s: %d pod(s) are still on the node (PodDisruptionBudgets that never allowed their eviction, or pods stuck terminating): %s. The slice's maintenance is voluntary, so no pod was deleted; it is given up on every host.",
					obs.SliceAsk.Slice, d.State.Deadline.UTC().Format(time.RFC3339), len(obs.DrainLeft), Excerpt(obs.DrainLeft, 5))})
		}
		return
	}
	d.State.Phase = protocol.PhaseTerminating
	d.Drained = true
	waits := fmt.Sprintf("the node is ready for the VM to stop (deadline %s)", d.State.Deadline.UTC().Format(time.RFC3339))
	if d.State.Reason == protocol.ReasonSlice {
		waits = "the host waits for its multi-host slice to come back"
	}
	if len(obs.DrainLeft) > 0 {
		// Pods stuck terminating past the deadline: never "all stopped".
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventEvictionIncomplete,
			Message: fmt.Sprintf("The drain ended by its deadline with %d pod(s) still on the node: %s; %s", len(obs.DrainLeft), Excerpt(obs.DrainLeft, 5), waits)})
		return
	}
	d.Events = append(d.Events, EventRecord{Reason: protocol.EventEvictionComplete, Message: "All pods were stopped; " + waits})
}

// sliceWaits: a manual (or opportunistic) maintenance of a host of a
// multi-host slice, not yet asked for, waits for its slice; false when
// the maintenance goes on as any other (the caller, every other host
// drained). Starting maintenance on one instance of a slice starts it on
// every instance, so the slice makes one call (its caller's,
// SliceCaller), and only once every other host is drained: the
// others follow this host's maintenance (SliceAsks) and drain
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
			Excerpt(obs.SliceIncomplete, 5), obs.Slice, st.Deadline.UTC().Format(time.RFC3339), protocol.LabelPerformMaintenance))
		return true
	}
	if !d.drainDone(cfg, obs) {
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
					st.Deadline.UTC().Format(time.RFC3339), len(obs.DrainLeft), Excerpt(obs.DrainLeft, 5), obs.Slice)})
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
		if !obs.SliceRecheck.IsZero() {
			d.wakeAt(obs.SliceRecheck) // a NotReady host's bound
		}
	default:
		d.giveUp(fmt.Sprintf("Host(s) %s of the multi-host slice %s had not finished draining by the deadline %s. A slice stops whole or not at all, and this maintenance is voluntary: it is given up on every host and Compute Engine was not asked; the slice is back in service (taint, maintenance label and %s removed).",
			Excerpt(obs.SliceWaiting, 5), obs.Slice, st.Deadline.UTC().Format(time.RFC3339), protocol.LabelPerformMaintenance))
	}
	return true
}

// sliceUnknownHolds: a manual (or opportunistic) maintenance, drained,
// on a node whose multi-host slice or its size cannot be told yet (its
// TPU chips not registered: SliceView.SliceUnknown) holds its call:
// starting maintenance on one host of a slice stops every host of it,
// whose pods may be mid-grace. It says why once, when the drain is done,
// and waits for the Node to say more (every change of it steps again) or
// for the deadline, when the maintenance is given up. A drain that left
// pods is given up as on any node (perform).
func (d *Decision) sliceUnknownHolds(cfg Config, obs Observation) bool {
	st := d.State
	if !d.drainDone(cfg, obs) || len(obs.DrainLeft) > 0 {
		return false
	}
	if obs.Now.Before(st.Deadline) {
		if st.Drain != protocol.DrainDone {
			d.State.Drain = protocol.DrainDone
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventSliceUnknown,
				Message: fmt.Sprintf("The node is drained, but Compute Engine is not asked yet: %s. Starting maintenance on one host of a multi-host slice stops every host of it, so the call waits until the Node says (it is read again on every change), or until the deadline %s, when the maintenance is given up",
					obs.SliceUnknown, st.Deadline.UTC().Format(time.RFC3339))})
		}
		d.wakeAt(st.Deadline)
		return true
	}
	d.giveUp(fmt.Sprintf("By the deadline %s the node's slice could still not be told (%s). Starting maintenance on one host of a multi-host slice stops every host of it, so Compute Engine was not asked; the node is back in service (taint, maintenance label and %s removed).",
		st.Deadline.UTC().Format(time.RFC3339), obs.SliceUnknown, protocol.LabelPerformMaintenance))
	return true
}

// Excerpt joins at most n names, saying how many more there are.
func Excerpt(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// causeVoluntary: the slice's ask is for a manual or opportunistic
// maintenance of another host.
func causeVoluntary(obs Observation) bool { return obs.SliceAsk.Reason == protocol.ReasonManual }

// sliceAskWithdrawn: the aggregator withdrew the ask (every host of the
// slice that stopped is back).
func sliceAskWithdrawn(_ Config, _ State, obs Observation) bool { return !obs.SliceAskSet }
