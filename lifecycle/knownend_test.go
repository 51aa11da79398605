package lifecycle

import (
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func knownEnd(o Observation, end time.Time) Observation {
	o.KnownEnd, o.KnownEndKnown, o.KnownEndCause = end, true, "maxRunDuration 86400s; Compute Engine deletes the VM then"
	return o
}

// TestStepKnownEndTold: an end more than the lead away is mirrored,
// told to the pods as a pending window that opens at the end, said in
// the conditions and an Event, and the loop wakes when the drain is due;
// nothing drains yet.
func TestStepKnownEndTold(t *testing.T) {
	end := t0.Add(3 * time.Hour)
	d := stepChecked(t, cfg, State{}, knownEnd(obs(quiet()), end))
	if !d.State.KnownEnd.Equal(end) || d.State.Phase != protocol.PhaseIdle || !d.Drain.IsZero() || d.Interruption != nil {
		t.Fatalf("known end %s: state %+v, drain %+v, interruption %v; want it mirrored, idle, no drain, nothing counted", end, d.State, d.Drain, d.Interruption)
	}
	if !d.WakeAt.Equal(end.Add(-cfg.KnownEndLead)) {
		t.Errorf("wake at %s; want %s, the lead before the end", d.WakeAt, end.Add(-cfg.KnownEndLead))
	}
	if len(d.Events) != 1 || d.Events[0].Reason != protocol.EventKnownEndScheduled || d.Events[0].Warning {
		t.Errorf("events %+v; want one Normal %s", d.Events, protocol.EventKnownEndScheduled)
	}
	if w := WorkloadTargetOf(d.State, time.Time{}); w.Phase != protocol.NoticePending || !w.WindowStart.Equal(end) {
		t.Errorf("pods are told %+v; want pending with the end as the window", w)
	}
	if c := NodeConditions(d.State)[0]; c.Status != "True" || c.Reason != "KnownEnd" {
		t.Errorf("MaintenancePlanned %+v; want True for the known end", c)
	}
	again := stepChecked(t, cfg, d.State, knownEnd(obs(quiet()), end))
	if len(again.Events) != 0 {
		t.Errorf("the same end again: events %+v; want none", again.Events)
	}
}

// TestStepKnownEndLeadFitsThePods: a flex-start VM with 45 minutes left
// whose pods need 33 s to stop (30 s graces and the drain's margin) keeps
// running them, and drains KnownEndSlack before what they need; once its
// drain began, it keeps draining as its pods go (what they need shrinks),
// until the end moves past the whole lead. Pods that need more than the
// lead drain from the lead.
func TestStepKnownEndLeadFitsThePods(t *testing.T) {
	end := t0.Add(45 * time.Minute)
	need := 33 * time.Second
	o := knownEnd(obs(quiet()), end)
	o.KnownEndNeed = need
	d := stepChecked(t, cfg, State{}, o)
	if d.State.Phase != protocol.PhaseIdle || !d.Drain.IsZero() {
		t.Fatalf("45 minutes before the end, pods needing %s: %s, drain %+v; want them running", need, d.State.Phase, d.Drain)
	}
	drainFrom := end.Add(-need - KnownEndSlack)
	if !d.WakeAt.Equal(drainFrom) {
		t.Errorf("wake at %s; want %s, what the pods need and the slack before the end", d.WakeAt, drainFrom)
	}
	o.Now = drainFrom
	d = stepChecked(t, cfg, d.State, o)
	if d.State.Reason != protocol.ReasonKnownEnd || !d.State.Deadline.Equal(end) || d.Drain.IsZero() {
		t.Fatalf("at %s: %s by %s, drain %+v; want the forced drain by the end", drainFrom, d.State.Reason, d.State.Deadline, d.Drain)
	}
	o.Now, o.KnownEndNeed = drainFrom.Add(10*time.Second), 3*time.Second // the pods gone
	if d = stepChecked(t, cfg, d.State, o); d.State.Reason != protocol.ReasonKnownEnd || d.State.Phase == protocol.PhaseIdle {
		t.Errorf("the pods gone: %s %s; want the drain to go on", d.State.Phase, d.State.Reason)
	}
	long := knownEnd(obs(quiet()), end)
	long.KnownEndNeed = 3 * time.Hour
	if d := stepChecked(t, cfg, State{}, long); d.State.Reason != protocol.ReasonKnownEnd {
		t.Errorf("pods that need more than the lead, %s within it: %s; want the drain", cfg.KnownEndLead, d.State.Reason)
	}
}

// TestStepKnownEndDrains: within the lead the node drains by force, the
// deadline the end itself, counted once as an automatic termination; an
// end already past drains as for a preemption.
func TestStepKnownEndDrains(t *testing.T) {
	for _, tc := range []struct {
		name     string
		end      time.Time
		deadline time.Time
	}{
		{"within the lead", t0.Add(30 * time.Minute), t0.Add(30 * time.Minute)},
		{"at the lead", t0.Add(cfg.KnownEndLead), t0.Add(cfg.KnownEndLead)},
		{"past", t0.Add(-10 * time.Second), t0.Add(cfg.PreemptionDeadline)},
	} {
		d := stepChecked(t, cfg, State{}, knownEnd(obs(quiet()), tc.end))
		if d.State.Reason != protocol.ReasonKnownEnd || !d.State.Deadline.Equal(tc.deadline) || d.Drain.Voluntary || d.Drain.IsZero() || !d.Cordon {
			t.Errorf("%s: %s by %s, drain %+v, cordon %t; want a forced drain by %s", tc.name, d.State.Reason, d.State.Deadline, d.Drain, d.Cordon, tc.deadline)
		}
		if d.Interruption == nil || *d.Interruption != protocol.KnownEnd || d.State.Interruptions[protocol.KnownEnd.Key()] != 1 {
			t.Errorf("%s: counted %v (%v); want one %s", tc.name, d.Interruption, d.State.Interruptions, protocol.KnownEnd.Key())
		}
		if w := WorkloadTargetOf(d.State, t0); w.Phase != protocol.NoticeStarting || !w.WindowStart.Equal(tc.end.Truncate(time.Second)) || !w.Deadline.Equal(tc.deadline) {
			t.Errorf("%s: pods are told %+v; want starting, the end as the window", tc.name, w)
		}
	}
}

// TestStepKnownEndUnknownDecidesNothing: before the agent learned the
// end, a label a previous run left (an end now past) starts nothing.
func TestStepKnownEndUnknownDecidesNothing(t *testing.T) {
	d := stepChecked(t, cfg, State{KnownEnd: t0.Add(-time.Hour)}, obs(quiet()))
	if d.State.Phase != protocol.PhaseIdle || len(d.Events) != 0 {
		t.Errorf("state %+v, events %+v; want idle and nothing said", d.State, d.Events)
	}
}

// TestStepKnownEndWithdrawnOrMoved: a drain for an end that is gone, or
// moved past its deadline, puts the node back in service.
func TestStepKnownEndWithdrawnOrMoved(t *testing.T) {
	end := t0.Add(20 * time.Minute)
	start := stepChecked(t, cfg, State{}, knownEnd(obs(quiet()), end))
	for _, moved := range []time.Time{{}, end.Add(24 * time.Hour)} {
		d := stepChecked(t, cfg, start.State, knownEnd(obs(quiet()), moved))
		if d.State.Phase != protocol.PhaseIdle || !d.Uncordon || !d.State.KnownEnd.Equal(moved) {
			t.Errorf("end moved to %s: state %+v, uncordon %t; want back in service with the new end", moved, d.State, d.Uncordon)
		}
	}
	same := stepChecked(t, cfg, start.State, knownEnd(obs(quiet()), end))
	if same.State.Phase != protocol.PhaseDraining {
		t.Errorf("the same end: %s; want it draining still", same.State.Phase)
	}
	// Moved later, still within the lead: the same drain, by the new end,
	// not counted again (the model found it ended and began anew).
	later := end.Add(10 * time.Minute)
	moved := stepChecked(t, cfg, start.State, knownEnd(obs(quiet()), later))
	if moved.State.Phase != protocol.PhaseDraining || !moved.State.Deadline.Equal(later) || !moved.State.Started.Equal(start.State.Started) || moved.Interruption != nil {
		t.Errorf("end moved to %s: %s by %s (started %s), counted %v; want the same drain by the new end, not counted again",
			later, moved.State.Phase, moved.State.Deadline, moved.State.Started, moved.Interruption)
	}
}

// TestStepKnownEndShortensAndYields: an end before the deadline of a
// maintenance under way moves that deadline to it; a preemption takes a
// known end's drain over without counting again.
func TestStepKnownEndShortensAndYields(t *testing.T) {
	host := stepChecked(t, cfg, State{}, obs(with(func(s *Signals) { s.Event = "TERMINATE_ON_HOST_MAINTENANCE" })))
	end := t0.Add(10 * time.Minute)
	d := stepChecked(t, cfg, host.State, knownEnd(obs(with(func(s *Signals) { s.Event = "TERMINATE_ON_HOST_MAINTENANCE" })), end))
	if d.State.Reason != protocol.ReasonHostMaintenance || !d.State.Deadline.Equal(end) {
		t.Errorf("host maintenance with an earlier end: %s by %s; want host maintenance by the end %s", d.State.Reason, d.State.Deadline, end)
	}

	ending := stepChecked(t, cfg, State{}, knownEnd(obs(quiet()), end))
	pre := stepChecked(t, cfg, ending.State, knownEnd(obs(with(func(s *Signals) { s.Preempted = true })), end))
	if pre.State.Reason != protocol.ReasonPreemption || !pre.State.Deadline.Equal(t0.Add(cfg.PreemptionDeadline)) || pre.Interruption != nil {
		t.Errorf("preempted during a known end's drain: %s by %s, counted %v; want the preemption, by its deadline, not counted again", pre.State.Reason, pre.State.Deadline, pre.Interruption)
	}
}

// TestStepKnownEndTakesOverAVoluntaryMaintenance: a person's trigger on a
// node within the lead of its VM's end starts a manual maintenance that
// yields to the VM's own: the known end takes it over in the same step,
// and its drain is forced (budgets cannot hold a pod past the end), by
// the end, counted once.
func TestStepKnownEndTakesOverAVoluntaryMaintenance(t *testing.T) {
	end := t0.Add(30 * time.Minute)
	o := knownEnd(obs(with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })), end)
	o.Trigger, o.TriggerSet = protocol.TriggerValue, true
	d := stepChecked(t, cfg, State{}, o)
	if d.State.Reason != protocol.ReasonKnownEnd || d.Drain.Voluntary || !d.State.Deadline.Equal(end) || d.Perform {
		t.Errorf("a trigger within the lead: %s by %s, voluntary %t, perform %t; want the known end's forced drain by %s, no call", d.State.Reason, d.State.Deadline, d.Drain.Voluntary, d.Perform, end)
	}
	if d.Interruption == nil || *d.Interruption != protocol.KnownEnd || d.State.Interruptions[protocol.KnownEnd.Key()] != 1 {
		t.Errorf("counted %v (%v); want one %s", d.Interruption, d.State.Interruptions, protocol.KnownEnd.Key())
	}
}
