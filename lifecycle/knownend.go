package lifecycle

// A known end: Compute Engine stops or deletes the VM at a time it knows
// in advance (a time limit: maxRunDuration or terminationTime, as
// flex-start VMs have). The end is mirrored on the Node
// (protocol.LabelKnownEnd) and told to the pods as a pending maintenance
// whose window opens at the end. The node drains by force so that every
// grace ends before it, as for a host maintenance, from as long before
// the end as its pods need (KnownEndView.Need, plus KnownEndSlack), never
// earlier than KnownEndLead: a VM whose whole run is shorter than the
// lead still runs its pods until they must stop.

import (
	"fmt"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// knownEndRule: started by the clock, it ends when the end is known to
// be gone or later than the drain's deadline (or the VM stops), is
// counted when it starts, yields to nothing (a preemption still shortens
// its deadline), and its drain is forced: the end does not wait for a
// budget.
var knownEndRule = reasonRule{over: knownEndMoved, counted: alwaysCounted, yields: neverYields, voluntary: forced}

// KnownEndView is what the agent learned of the VM's end.
type KnownEndView struct {
	// KnownEnd is the VM's end (zero: it has none), once KnownEndKnown:
	// the agent learned it since it started. Until then nothing is
	// decided on it, whatever the Node's label says (it may be a
	// previous run's).
	KnownEnd      time.Time
	KnownEndKnown bool
	// KnownEndCause says where the end comes from, for the Events (such
	// as "maxRunDuration 86400s; Compute Engine deletes the VM then").
	KnownEndCause string
	// KnownEndNeed is how long the node's pods need from the drain's
	// start to stop, each with its checkpoint lead and whole grace
	// (drain.Need); zero: not known, and the drain starts KnownEndLead
	// before the end.
	KnownEndNeed time.Duration
}

// KnownEndSlack is what a known end's drain keeps besides what the pods
// need: the time to begin it (the taint, the first evictions) on a loaded
// API server, and to see the pods go.
const KnownEndSlack = time.Minute

// knownEndLead is how long before the VM's end its drain starts: what its
// pods need and KnownEndSlack, at most cfg.KnownEndLead.
func knownEndLead(cfg Config, obs Observation) time.Duration {
	if obs.KnownEndNeed <= 0 {
		return cfg.KnownEndLead
	}
	return min(cfg.KnownEndLead, obs.KnownEndNeed+KnownEndSlack)
}

// knownEndMoved: the VM's end is known to be gone, or moved so far that
// its drain is not due yet, by the whole KnownEndLead (an end moved later
// within it moves the drain's deadline instead: knownEnd). Not by what the
// pods need: that shrinks as the drain stops them.
func knownEndMoved(cfg Config, _ State, obs Observation) bool {
	return obs.KnownEndKnown && (obs.KnownEnd.IsZero() || obs.Now.Before(obs.KnownEnd.Add(-cfg.KnownEndLead)))
}

// knownEnd mirrors the VM's known end, starts its drain its lead before
// it (knownEndLead: on an idle node, or over a maintenance that yields to
// it), and moves a later deadline of a maintenance under way to it.
func (d *Decision) knownEnd(cfg Config, obs Observation) {
	if !obs.KnownEndKnown {
		return
	}
	d.mirrorKnownEnd(cfg, obs)
	end := obs.KnownEnd
	if end.IsZero() {
		return
	}
	drainFrom := end.Add(-knownEndLead(cfg, obs))
	idle, rule := d.State.Phase == protocol.PhaseIdle, ruleOf(d.State.Reason)
	switch {
	case obs.Now.Before(drainFrom):
		d.wakeAt(drainFrom)
		if !idle {
			d.endFirst(obs, end)
		}
	case idle || d.State.Reason != protocol.ReasonKnownEnd && rule.yields(d.State, protocol.ReasonKnownEnd):
		// On an idle node, or over a maintenance that yields to the VM's
		// own (a manual one not yet asked for, a slice's drain), as a host
		// maintenance does.
		deadline, how := end, ""
		if !end.After(obs.Now) {
			deadline, how = obs.Now.Add(cfg.PreemptionDeadline), " (the end is past and the VM still runs: it may stop at any moment)"
		}
		if idle {
			d.start(obs, protocol.ReasonKnownEnd, deadline)
		} else {
			d.State.Reason = protocol.ReasonKnownEnd
			d.State.Deadline = minTime(d.State.Deadline, deadline)
		}
		if idle || !rule.counted(d.State) {
			d.Interruption = countedAs(protocol.ReasonKnownEnd)
		}
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventKnownEndDrain,
			Message: fmt.Sprintf("The VM reaches its known end at %s (%s); draining so that every pod has stopped before %s%s",
				end.UTC().Format(time.RFC3339), obs.KnownEndCause, d.State.Deadline.UTC().Format(time.RFC3339), how)})
	case d.State.Reason == protocol.ReasonKnownEnd && end.After(d.State.Deadline) && d.State.Deadline.After(obs.Now):
		d.State.Deadline = end
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventKnownEndDrain,
			Message: fmt.Sprintf("The VM's known end moved to %s; so does the drain deadline", end.UTC().Format(time.RFC3339))})
	default:
		d.endFirst(obs, end)
	}
}

// endFirst moves the deadline of the maintenance under way to the VM's
// end where the end comes first.
func (d *Decision) endFirst(obs Observation, end time.Time) {
	if end.Before(d.State.Deadline) && end.After(obs.Now) {
		d.State.Deadline = end
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventKnownEndDrain,
			Message: fmt.Sprintf("The VM reaches its known end at %s, before the %s under way would have stopped it; the drain deadline moves to the end", end.UTC().Format(time.RFC3339), d.State.Reason)})
	}
}

// mirrorKnownEnd keeps the state's known end as learned, and says so
// when it changes.
func (d *Decision) mirrorKnownEnd(cfg Config, obs Observation) {
	was, now := d.State.KnownEnd, obs.KnownEnd
	if was.Unix() == now.Unix() {
		return
	}
	d.State.KnownEnd = now
	msg := fmt.Sprintf("The VM's run ends at %s (%s): its pods are told now, and it drains from %s (as its pods now need, at most --known-end-lead before)",
		now.UTC().Format(time.RFC3339), obs.KnownEndCause, now.Add(-knownEndLead(cfg, obs)).UTC().Format(time.RFC3339))
	switch {
	case now.IsZero():
		msg = "The VM no longer has a known end"
	case !was.IsZero():
		msg = fmt.Sprintf("The VM's known end moved to %s (%s)", now.UTC().Format(time.RFC3339), obs.KnownEndCause)
	}
	d.Events = append(d.Events, EventRecord{Reason: protocol.EventKnownEndScheduled, Message: msg})
}

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
