package lifecycle

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

var approval = protocol.RepairApproval{Behavior: protocol.BehaviorUnrecoverableGPUError, Source: protocol.FaultSourceCondition,
	Signal: "GPUUnhealthy=True for 2m", Approved: t0, DrainTimeout: protocol.Duration(30 * time.Minute)}

// approved is o with the aggregator's approval of the node's repair.
func approved(o Observation) Observation {
	o.Repair, o.RepairSet, o.RequestID = approval, true, "req-fault"
	return o
}

// reasons are the Event reasons of d.
func reasons(d Decision) []string {
	var out []string
	for _, e := range d.Events {
		out = append(out, e.Reason)
	}
	return out
}

// TestStepFaultRepair: an approved repair drains the node by force by its
// drain timeout, then asks Compute Engine once with the method written
// before the call: a booked FAILURE_* repair is pulled forward, any other
// fault reported; accepted, the node waits for the stop, and the VM's
// return ends the repair, counts it and removes the approval. A failed
// call ends it with the node in service but for the aggregator's taint;
// an approval withdrawn before the call cancels it.
func TestStepFaultRepair(t *testing.T) {
	booked := asServed(maintenance.Notice{Type: "UNSCHEDULED", Status: maintenance.StatusPending, CanReschedule: true, WindowStart: window,
		Reasons: []string{"FAILURE_GPU"}})
	for _, tc := range []struct {
		name   string
		sig    Signals
		result func(*PerformResult)
		// wantCall is the method chosen; wantOutcome the repair's end.
		wantCall    protocol.RepairCall
		wantOutcome string
	}{
		{name: "reported", sig: quiet(), wantCall: protocol.RepairReport, wantOutcome: protocol.RepairDone},
		{name: "a booked repair pulled forward", sig: with(func(s *Signals) { s.Notice, s.NoticePresent = booked, true }),
			wantCall: protocol.RepairPerformMaintenance, wantOutcome: protocol.RepairDone},
		{name: "a scheduled maintenance is no repair", sig: with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true }),
			wantCall: protocol.RepairReport, wantOutcome: protocol.RepairDone},
		{name: "permission denied", sig: quiet(), wantCall: protocol.RepairReport, wantOutcome: protocol.RepairPermissionDenied,
			result: func(r *PerformResult) { r.Err, r.Outcome = errors.New("403"), protocol.ManualPermissionDenied }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := approved(obs(tc.sig))
			d := stepChecked(t, cfg, State{}, o)
			if d.State.Phase != protocol.PhaseDraining || d.State.Reason != protocol.ReasonFault || !d.Cordon || d.Repair != protocol.RepairStarted ||
				!d.State.Deadline.Equal(t0.Add(30*time.Minute)) || d.Drain.Voluntary || d.Perform {
				t.Fatalf("approved: %+v, want a forced drain by %s, cordoned, no call yet", d, t0.Add(30*time.Minute))
			}
			// The drain runs to its end: the method is chosen and the call asked.
			o.Now = t0.Add(time.Minute)
			o = ran(cfg, d.State, o)
			d = stepChecked(t, cfg, d.State, o)
			if !d.Perform || d.State.RepairCall != tc.wantCall || !d.State.Requested.Equal(o.Now) || d.State.Phase != protocol.PhaseDraining {
				t.Fatalf("drained: perform %t, call %q, requested %s; want a call by %s", d.Perform, d.State.RepairCall, d.State.Requested, tc.wantCall)
			}
			// The same step again (the call not answered yet) asks nothing new.
			if again := stepChecked(t, cfg, d.State, o); again.State.RepairCall != tc.wantCall || !again.State.Requested.Equal(d.State.Requested) {
				t.Fatalf("the step again changed the request: %+v", again.State)
			}
			res := &PerformResult{RequestID: "req-fault", Operation: "operation-1"}
			if tc.result != nil {
				tc.result(res)
			}
			o.Perform, o.Now = res, t0.Add(2*time.Minute)
			d = stepChecked(t, cfg, d.State, o)
			if res.Err != nil {
				if d.State.Phase != protocol.PhaseIdle || !d.Uncordon || !d.RemoveRepair || d.State.LastRepair.Outcome != tc.wantOutcome ||
					!slices.Contains(reasons(d), protocol.EventFaultRepairFailed) {
					t.Fatalf("failed call: %+v, want the node in service, the approval gone and %s remembered", d, tc.wantOutcome)
				}
				return
			}
			if d.State.Phase != protocol.PhaseTerminating || !d.Drained || d.Repair != protocol.RepairAccepted || !slices.Contains(reasons(d), protocol.EventFaultReported) {
				t.Fatalf("accepted: %+v, want terminating", d)
			}
			// The VM stops and comes back.
			o.Perform, o.BootID, o.Now = nil, bootB, t0.Add(time.Hour)
			d = stepChecked(t, cfg, d.State, o)
			if d.State.Phase != protocol.PhaseIdle || !d.Uncordon || !d.RemoveRepair || d.Repair != tc.wantOutcome ||
				d.State.LastRepair != (protocol.LastFaultRepair{Outcome: tc.wantOutcome, Ended: o.Now}) || d.Interruption == nil || *d.Interruption != protocol.FaultRepair ||
				!slices.Contains(reasons(d), protocol.EventFaultRepaired) {
				t.Fatalf("back: %+v, want in service, counted as %v", d, protocol.FaultRepair)
			}
		})
	}
}

// TestStepFaultRepairRestarted: an agent restarted after the request was
// written asks again with the same request ID and method, never another;
// a booked repair seen starting is taken as the answer.
func TestStepFaultRepairRestarted(t *testing.T) {
	st := draining(protocol.ReasonFault, 30*time.Minute)
	st.RequestID, st.RepairCall, st.Requested = "req-fault", protocol.RepairReport, t0
	o := approved(obs(with(func(s *Signals) {
		s.Notice = asServed(maintenance.Notice{Type: "UNSCHEDULED", Status: maintenance.StatusPending, CanReschedule: true, WindowStart: window, Reasons: []string{"FAILURE_GPU"}})
		s.NoticePresent = true
	})))
	o.RequestID = "a-fresh-one"
	o = ran(cfg, st, o)
	d := stepChecked(t, cfg, st, o)
	if !d.Perform || d.State.RequestID != "req-fault" || d.State.RepairCall != protocol.RepairReport || !d.State.Requested.Equal(t0) {
		t.Fatalf("restarted: %+v, want the same request again", d.State)
	}
	st.RepairCall = protocol.RepairPerformMaintenance
	o.Signals.Event = maintenance.EventTerminate
	d = stepChecked(t, cfg, st, o)
	if d.Perform || d.State.Phase != protocol.PhaseTerminating {
		t.Fatalf("the booked repair starting: %+v, want it taken as accepted, with no call", d)
	}
}

// TestStepFaultRepairWithdrawn: an approval removed before the call puts
// the node back in service; after the call the repair goes on.
func TestStepFaultRepairWithdrawn(t *testing.T) {
	st := draining(protocol.ReasonFault, 30*time.Minute)
	st.RequestID = "req-fault"
	d := stepChecked(t, cfg, st, obs(quiet()))
	if d.State.Phase != protocol.PhaseIdle || !d.Uncordon || d.Repair != protocol.RepairCancelled || !slices.Contains(reasons(d), protocol.EventFaultRepairCanceled) {
		t.Fatalf("withdrawn: %+v, want cancelled", d)
	}
	st.Requested, st.RepairCall = t0, protocol.RepairReport
	if d := stepChecked(t, cfg, st, obs(quiet())); d.State.Phase != protocol.PhaseDraining {
		t.Fatalf("withdrawn after the call: %+v, want the repair to go on", d)
	}
}

// TestStepFaultRepairYields: a preemption takes the repair over; a host
// maintenance only before the call. The VM's return removes the approval
// either way.
func TestStepFaultRepairYields(t *testing.T) {
	st := draining(protocol.ReasonFault, 30*time.Minute)
	st.RequestID = "req-fault"
	terminate := approved(obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate })))
	d := stepChecked(t, cfg, st, terminate)
	if d.State.Reason != protocol.ReasonHostMaintenance || d.Interruption == nil || *d.Interruption != protocol.HostMaintenance {
		t.Fatalf("host maintenance before the call: %+v, want it to take over", d.State)
	}
	back := approved(obs(quiet()))
	back.BootID = bootB
	if back := stepChecked(t, cfg, d.State, back); !back.RemoveRepair || back.State.Phase != protocol.PhaseIdle {
		t.Fatalf("back from the maintenance that took over: %+v, want the approval removed", back)
	}
	st.Requested, st.RepairCall = t0, protocol.RepairReport
	if d := stepChecked(t, cfg, st, terminate); d.State.Reason != protocol.ReasonFault {
		t.Fatalf("host maintenance after the call: %+v, want the repair to go on", d.State)
	}
	preempted := approved(obs(with(func(s *Signals) { s.Preempted = true })))
	if d := stepChecked(t, cfg, st, preempted); d.State.Reason != protocol.ReasonPreemption {
		t.Fatalf("preempted: %+v, want the preemption to take over", d.State)
	}
}
