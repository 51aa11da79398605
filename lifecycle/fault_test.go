package lifecycle

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
				if d.State.Phase != protocol.PhaseIdle || !d.Uncordon || !d.RemoveRepair || d.RemoveReport || d.State.LastRepair.Outcome != tc.wantOutcome ||
					!slices.Contains(reasons(d), protocol.EventFaultRepairFailed) {
					t.Fatalf("failed call: %+v, want the node in service, the approval gone, a person's request kept and %s remembered", d, tc.wantOutcome)
				}
				return
			}
			if d.State.Phase != protocol.PhaseTerminating || !d.Drained || d.Repair != protocol.RepairAccepted || !slices.Contains(reasons(d), protocol.EventFaultReported) {
				t.Fatalf("accepted: %+v, want terminating", d)
			}
			// The VM stops and comes back.
			o.Perform, o.BootID, o.Now = nil, bootB, t0.Add(time.Hour)
			d = stepChecked(t, cfg, d.State, o)
			if d.State.Phase != protocol.PhaseIdle || !d.Uncordon || !d.RemoveRepair || !d.RemoveReport || d.Repair != tc.wantOutcome ||
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
// either way; a preemption withdrawn leaves the report's operation to the
// next repair, which follows it.
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
	if back := stepChecked(t, cfg, d.State, back); !back.RemoveRepair || back.State.Phase != protocol.PhaseIdle ||
		back.Repair != protocol.RepairOvertaken || back.State.LastRepair.Outcome != protocol.RepairOvertaken ||
		back.State.LastRepair.By != string(protocol.ReasonHostMaintenance) || back.RemoveReport || !slices.Contains(reasons(back), protocol.EventFaultRepairOvertaken) {
		t.Fatalf("back from the maintenance that took over: %+v, want the approval removed, the repair recorded overtaken by host-maintenance, a person's request kept", back)
	}
	st.Requested, st.RepairCall = t0, protocol.RepairReport
	if d := stepChecked(t, cfg, st, terminate); d.State.Reason != protocol.ReasonFault {
		t.Fatalf("host maintenance after the call: %+v, want the repair to go on", d.State)
	}
	preempted := approved(obs(with(func(s *Signals) { s.Preempted = true })))
	st.Call = protocol.Call{RequestID: st.RequestID, Method: protocol.RepairReport, Requested: t0, Operation: "op-1"}
	d = stepChecked(t, cfg, st, preempted)
	if d.State.Reason != protocol.ReasonPreemption {
		t.Fatalf("preempted: %+v, want the preemption to take over", d.State)
	}
	// The preemption is withdrawn while the report's operation runs: the
	// repair approved again follows that operation, and reports no more.
	withdrawn := approved(obs(quiet()))
	withdrawn.RequestID = "req-again"
	again := stepChecked(t, cfg, d.State, withdrawn)
	if again.State.Reason != protocol.ReasonFault || again.State.RequestID != "req-again" || again.State.Call.Operation != "op-1" ||
		again.State.LastRepair.Outcome != protocol.RepairOvertaken || again.State.LastRepair.By != string(protocol.ReasonPreemption) {
		t.Fatalf("preemption withdrawn: %+v, want a new repair that remembers operation op-1, overtaken by the preemption", again.State)
	}
	withdrawn.DrainEnded = DrainOrder{For: again.State.Started, Deadline: again.State.Deadline, Reason: protocol.ReasonFault}
	if drained := stepChecked(t, cfg, again.State, withdrawn); drained.Perform || drained.State.Phase != protocol.PhaseTerminating || drained.State.Call.Operation != "op-1" {
		t.Fatalf("drained again: perform %t, %s, operation %q; want op-1 followed, no second report", drained.Perform, drained.State.Phase, drained.State.Call.Operation)
	}
	// The report's answer comes in the step that sees the preemption
	// withdrawn: its operation is handed on all the same.
	st.Call = protocol.Call{RequestID: st.RequestID, Method: protocol.RepairReport, Requested: t0}
	d = stepChecked(t, cfg, st, preempted)
	answered := approved(obs(quiet()))
	answered.RequestID = "req-again"
	answered.Perform = &PerformResult{RequestID: st.RequestID, Operation: "op-2"}
	if again := stepChecked(t, cfg, d.State, answered); again.State.Call.Operation != "op-2" {
		t.Fatalf("answered as the preemption is withdrawn: %+v, want the new repair to remember operation op-2", again.State)
	}
	// The report's answer comes only after the repair approved again
	// has drained: it waits for that answer, and follows the operation
	// it names; it never reports a second time meanwhile.
	d = stepChecked(t, cfg, st, preempted)
	unanswered := approved(obs(quiet()))
	unanswered.RequestID = "req-again"
	again = stepChecked(t, cfg, d.State, unanswered)
	unanswered.DrainEnded = DrainOrder{For: again.State.Started, Deadline: again.State.Deadline, Reason: protocol.ReasonFault}
	waiting := stepChecked(t, cfg, again.State, unanswered)
	if waiting.Perform || waiting.State.Phase != protocol.PhaseDraining || !waiting.WakeAt.Equal(t0.Add(2*cfg.ReportTimeout)) {
		t.Fatalf("drained, the first report unanswered: perform %t, %s, wake at %s; want no call, waiting for the answer until %s",
			waiting.Perform, waiting.State.Phase, waiting.WakeAt, t0.Add(2*cfg.ReportTimeout))
	}
	unanswered.Perform = &PerformResult{RequestID: st.RequestID, Operation: "op-3"}
	if answered := stepChecked(t, cfg, waiting.State, unanswered); answered.Perform || answered.State.Phase != protocol.PhaseTerminating || answered.State.Call.Operation != "op-3" {
		t.Fatalf("the first report answered: perform %t, %s, operation %q; want op-3 followed, no second report", answered.Perform, answered.State.Phase, answered.State.Call.Operation)
	}
}

// TestStepFaultRepairThroughGKE: where GKE runs its report-and-replace
// flow (or the approval says so), the drained node carries GKE's
// fault-behavior label and follows GKE's status: the operation running is
// the repair taken; Error, or no answer in time, fails it and removes the
// label. A booked repair is still pulled forward first.
func TestStepFaultRepairThroughGKE(t *testing.T) {
	st := draining(protocol.ReasonFault, 30*time.Minute)
	st.RequestID = "req-fault"
	o := approved(obs(quiet()))
	o.GKEReportsFaults = true
	o = ran(cfg, st, o)
	d := stepChecked(t, cfg, st, o)
	if d.State.RepairCall != protocol.RepairGKE || d.Perform || d.FaultBehavior != "XID" || d.State.Phase != protocol.PhaseDraining ||
		!d.WakeAt.Equal(t0.Add(cfg.GKERepairTimeout)) || d.State.GKEStatusBefore != protocol.GKEStatusNone {
		t.Fatalf("drained on a GKE node: %+v, want GKE's label XID, no status before it, and no call", d)
	}
	asked := d.State
	o.GKEFaultBehavior = true // the label on, from the step that asked
	for _, tc := range []struct {
		status string
		now    time.Duration
		phase  protocol.Phase
		remove bool
	}{
		{status: protocol.GKEStatusPodsEvicted, phase: protocol.PhaseDraining},
		{status: protocol.GKEStatusOperationRunning, phase: protocol.PhaseTerminating},
		{status: protocol.GKEStatusError, phase: protocol.PhaseIdle, remove: true},
		{status: "ERROR", phase: protocol.PhaseIdle, remove: true},
		{status: "", now: cfg.GKERepairTimeout, phase: protocol.PhaseIdle, remove: true},
	} {
		o := o
		o.GKERepairStatus, o.Now = tc.status, t0.Add(tc.now)
		d := stepChecked(t, cfg, asked, o)
		if d.State.Phase != tc.phase || d.RemoveFaultBehavior != tc.remove || d.Perform {
			t.Errorf("GKE's status %q at +%s: phase %s, remove the label %t; want %s, %t", tc.status, tc.now, d.State.Phase, d.RemoveFaultBehavior, tc.phase, tc.remove)
		}
	}
	o.Repair.With = protocol.RepairWithCompute
	if d := stepChecked(t, cfg, st, o); d.State.RepairCall != protocol.RepairReport || !d.Perform {
		t.Errorf("repairWith compute on a GKE node: %+v, want a report", d.State)
	}
	o.Repair.With = protocol.RepairWithGKE
	o.GKEReportsFaults = false
	if d := stepChecked(t, cfg, st, o); d.State.RepairCall != protocol.RepairGKE {
		t.Errorf("repairWith gke: %+v, want GKE's flow", d.State)
	}
}

// TestStepGKERepairAgain: GKE leaves its last attempt's status on the
// Node. A repair asked over a stale OperationDone puts the label on and
// waits for a status of this attempt's; a stale Error does not fail it
// before it starts; the label GKE removes (as on an error) is not put
// back, and the attempt ends once.
func TestStepGKERepairAgain(t *testing.T) {
	st := draining(protocol.ReasonFault, 30*time.Minute)
	st.RequestID = "req-fault"
	for _, stale := range []string{protocol.GKEStatusOperationDone, protocol.GKEStatusError, "ERROR"} {
		o := approved(obs(quiet()))
		o.GKEReportsFaults, o.GKERepairStatus = true, stale
		o = ran(cfg, st, o)
		d := stepChecked(t, cfg, st, o)
		if d.State.Phase != protocol.PhaseDraining || d.FaultBehavior != "XID" || d.State.GKEStatusBefore != stale {
			t.Fatalf("asked over a stale %s: %s, label %q, before %q; want the label put on and the wait begun", stale, d.State.Phase, d.FaultBehavior, d.State.GKEStatusBefore)
		}
		asked := d.State
		o.GKEFaultBehavior = true
		if d := stepChecked(t, cfg, asked, o); d.State.Phase != protocol.PhaseDraining || d.FaultBehavior != "" {
			t.Errorf("the stale %s again: %s, label written %q; want the wait, and nothing written again", stale, d.State.Phase, d.FaultBehavior)
		}
		o.GKERepairStatus = protocol.GKEStatusPodsEvicted
		if d := stepChecked(t, cfg, asked, o); d.State.Phase != protocol.PhaseDraining {
			t.Errorf("after %s, this attempt's PodsEvicted: %s; want the wait", stale, d.State.Phase)
		}
		o.GKERepairStatus = protocol.GKEStatusOperationRunning
		if d := stepChecked(t, cfg, asked, o); d.State.Phase != protocol.PhaseTerminating {
			t.Errorf("after %s, this attempt's OperationRUNNING: %s; want the repair taken", stale, d.State.Phase)
		}
		// GKE removes its label on an error: the attempt ends, the label
		// not put back.
		o.GKERepairStatus, o.GKEFaultBehavior = "ERROR", false
		d = stepChecked(t, cfg, asked, o)
		if d.State.Phase != protocol.PhaseIdle || d.Repair != protocol.RepairFailed || d.FaultBehavior != "" {
			t.Errorf("after %s, GKE's ERROR and its label removed: %s, repair %q, label %q; want it failed, not put back", stale, d.State.Phase, d.Repair, d.FaultBehavior)
		}
		o.GKERepairStatus = stale
		if d := stepChecked(t, cfg, asked, o); d.State.Phase != protocol.PhaseIdle || d.FaultBehavior != "" {
			t.Errorf("after %s, its label removed with no new status: %s, label %q; want it failed, not put back", stale, d.State.Phase, d.FaultBehavior)
		}
	}
}

// TestGKEReportsFaults: GKE's kubelet 1.32.3-gke.1057001 or later, on the
// families GKE documents.
func TestGKEReportsFaults(t *testing.T) {
	for _, tc := range []struct {
		kubelet, machine string
		want             bool
	}{
		{"v1.32.3-gke.1057001", "a3-ultragpu-8g", true},
		{"v1.33.1-gke.100", "a4-highgpu-8g", true},
		{"v1.32.3-gke.1057000", "a3-megagpu-8g", false},
		{"v1.32.2-gke.9999999", "a3-highgpu-8g", false},
		{"v1.34.0", "a3-highgpu-8g", false},
		{"v1.33.1-gke.100", "g2-standard-48", false},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{corev1.LabelInstanceTypeStable: tc.machine}},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: tc.kubelet}}}
		if got := GKEReportsFaults(n); got != tc.want {
			t.Errorf("%s on %s: %t, want %t", tc.kubelet, tc.machine, got, tc.want)
		}
	}
}

// TestStepFaultRepairEndsIntoTheVMsOwn: a report refused while the VM's
// own host maintenance is served (which the repair no longer yields to
// once asked) starts that maintenance in the same step; a preemption that
// took a repair over is counted once, not again as the repair when the VM
// comes back.
func TestStepFaultRepairEndsIntoTheVMsOwn(t *testing.T) {
	st := draining(protocol.ReasonFault, 30*time.Minute)
	st.RequestID, st.RepairCall, st.Requested = "req-fault", protocol.RepairReport, t0
	o := approved(obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate })))
	o.Perform = &PerformResult{RequestID: "req-fault", Err: errors.New("400"), Outcome: protocol.ManualRefused}
	o = ran(cfg, st, o)
	d := stepChecked(t, cfg, st, o)
	if d.State.Phase != protocol.PhaseDraining || d.State.Reason != protocol.ReasonHostMaintenance || d.Uncordon || d.State.LastRepair.Outcome != protocol.RepairRefused {
		t.Errorf("refused during host maintenance: %+v; want the host maintenance drained, the repair's end remembered", d.State)
	}

	preempted := draining(protocol.ReasonPreemption, 30*time.Second)
	preempted.Phase, preempted.RequestID = protocol.PhaseTerminating, "req-fault"
	back := approved(obs(quiet()))
	back.BootID = bootB
	if d := stepChecked(t, cfg, preempted, back); d.Interruption != nil || !d.RemoveRepair {
		t.Errorf("back from a preemption that took the repair over: counted %v, removed the approval %t; want nothing counted again", d.Interruption, d.RemoveRepair)
	}
}

// TestStepFaultRepairNeverStops: Compute Engine took the repair, and the
// VM does not stop: an operation that failed, GKE's Error, or no stop
// within its bound ends the repair, the node still faulty; a booked repair
// that has begun is waited for. A report's operation is followed as
// Google's "Report faulty host" describes it: the VM RUNNING through the
// operation ("usually 10-12 minutes"), its stop within a minute after; a
// report whose operation runs 16 minutes is not given up on.
func TestStepFaultRepairNeverStops(t *testing.T) {
	taken := draining(protocol.ReasonFault, 30*time.Minute)
	taken.Phase, taken.RequestID, taken.RepairCall, taken.Requested = protocol.PhaseTerminating, "req-fault", protocol.RepairReport, t0
	taken.Call = protocol.Call{RequestID: "req-fault", Method: protocol.RepairReport, Requested: t0, Operation: "op-1"}
	taken.Deadline = t0.Add(cfg.HostMaintenanceDeadline)
	running := func(o *Observation) { o.Perform = &PerformResult{RequestID: "req-fault", Operation: "op-1"} }
	done := func(o *Observation, at time.Duration) {
		o.Perform = &PerformResult{RequestID: "req-fault", Operation: "op-1", OperationDone: true, OperationEnded: t0.Add(at)}
	}
	for _, tc := range []struct {
		name   string
		change func(*State, *Observation)
		ended  bool
		// handed is the operation the next attempt follows.
		handed string
	}{
		{"waiting", func(*State, *Observation) {}, false, ""},
		{"the operation failed", func(_ *State, o *Observation) {
			o.Perform = &PerformResult{RequestID: "req-fault", Operation: "op-1", OperationDone: true, OperationErr: errors.New("HOST_NOT_FOUND")}
		}, true, ""},
		{"the report's operation running for 16 minutes", func(_ *State, o *Observation) {
			running(o)
			o.Now = t0.Add(16 * time.Minute)
		}, false, ""},
		{"the report's operation not yet read, 16 minutes on", func(_ *State, o *Observation) { o.Now = t0.Add(16 * time.Minute) }, false, ""},
		{"the report's operation done at 12 minutes, the VM not yet stopped", func(_ *State, o *Observation) {
			done(o, 12*time.Minute)
			o.Now = t0.Add(13 * time.Minute)
		}, false, ""},
		{"the report's operation done, no stop in time", func(_ *State, o *Observation) {
			done(o, 12*time.Minute)
			o.Now = t0.Add(12*time.Minute + cfg.ManualStartTimeout)
		}, true, ""},
		{"the report's operation still running at its bound", func(_ *State, o *Observation) {
			running(o)
			o.Now = t0.Add(cfg.ReportTimeout)
		}, true, "op-1"},
		{"the last attempt's report, taken over, still running at the call's bound", func(st *State, o *Observation) {
			st.Call.Requested = t0.Add(-cfg.ReportTimeout)
			running(o)
			o.Now = t0.Add(cfg.ReportTimeout)
		}, true, ""},
		{"a booked repair pulled forward, no stop in time", func(st *State, o *Observation) {
			st.RepairCall, st.Call.Method = protocol.RepairPerformMaintenance, protocol.RepairPerformMaintenance
			o.Now = t0.Add(cfg.ManualStartTimeout)
		}, true, "op-1"},
		{"the booked repair begun", func(st *State, o *Observation) {
			st.RepairCall = protocol.RepairPerformMaintenance
			o.Now, o.Signals.Event = t0.Add(cfg.ManualStartTimeout), maintenance.EventTerminate
		}, false, ""},
		{"GKE's Error", func(st *State, o *Observation) {
			st.RepairCall, o.GKERepairStatus = protocol.RepairGKE, protocol.GKEStatusError
			st.Call = protocol.Call{}
		}, true, ""},
		{"GKE's ERROR", func(st *State, o *Observation) {
			st.RepairCall, o.GKERepairStatus = protocol.RepairGKE, "ERROR"
			st.Call = protocol.Call{}
		}, true, ""},
		{"GKE's flow running", func(st *State, o *Observation) {
			st.RepairCall, o.GKERepairStatus, o.Now = protocol.RepairGKE, protocol.GKEStatusOperationRunning, t0.Add(cfg.HostMaintenanceDeadline-time.Minute)
			st.Call = protocol.Call{}
		}, false, ""},
		{"GKE's flow running, no stop by the deadline", func(st *State, o *Observation) {
			st.RepairCall, o.GKERepairStatus, o.Now = protocol.RepairGKE, protocol.GKEStatusOperationRunning, t0.Add(cfg.HostMaintenanceDeadline)
			st.Call = protocol.Call{}
		}, true, ""},
	} {
		st, o := taken, approved(obs(quiet()))
		tc.change(&st, &o)
		d := stepChecked(t, cfg, st, o)
		if ended := d.State.Phase == protocol.PhaseIdle; ended != tc.ended || ended && (d.Repair != protocol.RepairFailed || !d.RemoveRepair) {
			t.Errorf("%s: phase %s, repair %q; want ended %t", tc.name, d.State.Phase, d.Repair, tc.ended)
		}
		got := ""
		if outstanding(cfg, d.State.Call, o.Now) {
			got = d.State.Call.Operation
		}
		if tc.ended && got != tc.handed {
			t.Errorf("%s: the next attempt follows %q; want %q", tc.name, got, tc.handed)
		}
	}
}

// TestStepFaultReportNeverSentTwice: the last attempt gave up following a
// report whose operation still ran. The next attempt, drained, follows
// that operation and sends no second report (Compute Engine refuses one
// while the first runs, and may leave the VM in REPAIRING); a reboot
// while idle after it is that report's repair, counted as one.
func TestStepFaultReportNeverSentTwice(t *testing.T) {
	st := draining(protocol.ReasonFault, 30*time.Minute)
	st.RequestID = "req-2"
	st.LastRepair = protocol.LastFaultRepair{Outcome: protocol.RepairFailed, Ended: t0.Add(-time.Minute)}
	st.Call = protocol.Call{RequestID: "req-1", Method: protocol.RepairReport, Requested: t0.Add(-cfg.ReportTimeout), Operation: "op-1"}
	o := approved(obs(quiet()))
	o.DrainEnded = DrainOrder{For: st.Started, Deadline: st.Deadline, Reason: protocol.ReasonFault}
	d := stepChecked(t, cfg, st, o)
	if d.Perform || d.State.Phase != protocol.PhaseTerminating || d.State.Call.Operation != "op-1" || d.State.RepairCall != protocol.RepairReport {
		t.Fatalf("drained, with the last report's operation running: perform %t, %s, operation %q, call %q; want op-1 followed, no call",
			d.Perform, d.State.Phase, d.State.Call.Operation, d.State.RepairCall)
	}

	idle := State{Phase: protocol.PhaseIdle, LastBootID: bootA, LastRepair: st.LastRepair, Call: st.Call}
	back := obs(quiet())
	back.BootID = bootB
	d = stepChecked(t, cfg, idle, back)
	if d.Unannounced == nil || *d.Unannounced != protocol.FaultRepair || d.State.LastRepair.Outcome != protocol.RepairDone || !d.State.Call.IsZero() || !d.RemoveReport {
		t.Errorf("rebooted after the report: counted %v, last repair %+v; want the host's repair", d.Unannounced, d.State.LastRepair)
	}
}

// TestBookedRepair: a notice with a FAILURE_* reason, as served (newer
// ones included: FAILURE_CUSTOMER_REPORTED, the repair a report books), is
// a repair Compute Engine booked; a planned update is not.
func TestBookedRepair(t *testing.T) {
	for raw, want := range map[string]bool{
		`{"type":"UNSCHEDULED","maintenance_status":"PENDING","can_reschedule":true,"window_start_time":"2026-12-01T19:00:00Z","maintenance_reasons":["FAILURE_CUSTOMER_REPORTED"]}`: true,
		`{"type":"UNSCHEDULED","maintenance_status":"PENDING","can_reschedule":true,"window_start_time":"2026-12-01T19:00:00Z","maintenance_reasons":["FAILURE_GPU_XID"]}`:           true,
		`{"type":"SCHEDULED","maintenance_status":"PENDING","can_reschedule":true,"window_start_time":"2026-12-01T19:00:00Z","maintenance_reasons":["PLANNED_UPDATE"]}`:              false,
	} {
		n := protocol.ReadNotice(raw)
		if n.Status == "" || BookedRepair(n) != want {
			t.Errorf("%s: read %+v, booked repair %t; want %t", raw, n, BookedRepair(n), want)
		}
	}
}

// TestStepFaultNotReportable: an approved repair that would be a report,
// on a VM Compute Engine takes no report from, drains nothing and asks
// nothing: the approval goes with a Warning that says why, and the node
// stays faulty for the aggregator. A booked FAILURE_* repair that can be
// pulled forward, and GKE's flow, keep their rules on such a VM.
func TestStepFaultNotReportable(t *testing.T) {
	why := NotReportable("g2-standard-48", "SPOT", "RUNNING", false)
	o := approved(obs(quiet()))
	o.ReportableView = ReportableView{ReportableKnown: true, NotReportable: why}
	d := stepChecked(t, cfg, State{}, o)
	if d.State.Phase != protocol.PhaseIdle || !d.Drain.IsZero() || d.Cordon || d.Perform || !d.RemoveRepair || d.Repair != protocol.RepairNotReportable ||
		d.State.LastRepair.Outcome != protocol.RepairNotReportable || !slices.Equal(reasons(d), []string{protocol.EventFaultNotReportable}) {
		t.Fatalf("not reportable: %+v; want nothing drained or asked, the approval removed and a %s", d, protocol.EventFaultNotReportable)
	}
	booked := with(func(s *Signals) {
		s.Notice, s.NoticePresent = asServed(maintenance.Notice{Type: "UNSCHEDULED", Status: maintenance.StatusPending, CanReschedule: true, WindowStart: window,
			Reasons: []string{"FAILURE_GPU"}}), true
	})
	ob := approved(obs(booked))
	ob.ReportableView = o.ReportableView
	if d := stepChecked(t, cfg, State{}, ob); d.State.Reason != protocol.ReasonFault || d.Drain.IsZero() {
		t.Errorf("a booked repair on a VM that cannot be reported: %s, drain %+v; want it drained to be pulled forward", d.State.Reason, d.Drain)
	}
	og := approved(obs(quiet()))
	og.ReportableView, og.GKEReportsFaults = o.ReportableView, true
	if d := stepChecked(t, cfg, State{}, og); d.State.Reason != protocol.ReasonFault || d.Drain.IsZero() {
		t.Errorf("GKE's flow on a VM that cannot be reported: %s, drain %+v; want GKE's rules", d.State.Reason, d.Drain)
	}
}

// TestNotReportable: Compute Engine takes reports only from RUNNING,
// reservation-bound A4X Max, A4X, A4, A3 Ultra, A3 Mega and A3 High (8 GPU)
// VMs.
func TestNotReportable(t *testing.T) {
	for _, tc := range []struct {
		machine, model, status string
		reserved, want         bool
	}{
		{"a3-highgpu-8g", "RESERVATION_BOUND", "RUNNING", true, true},
		{"a4x-highgpu-4g", "", "RUNNING", true, true},
		{"a4-highgpu-8g", "STANDARD", "RUNNING", true, true},
		{"a3-ultragpu-8g", "RESERVATION_BOUND", "RUNNING", true, true},
		{"a3-megagpu-8g", "RESERVATION_BOUND", "RUNNING", true, true},
		{"a3-highgpu-4g", "RESERVATION_BOUND", "RUNNING", true, false},
		{"a2-highgpu-8g", "RESERVATION_BOUND", "RUNNING", true, false},
		{"g2-standard-48", "STANDARD", "RUNNING", false, false},
		{"ct5p-hightpu-4t", "RESERVATION_BOUND", "RUNNING", true, false},
		{"a4-highgpu-8g", "SPOT", "RUNNING", false, false},
		{"a4-highgpu-8g", "FLEX_START", "RUNNING", false, false},
		{"a4-highgpu-8g", "STANDARD", "RUNNING", false, false},
		{"a4-highgpu-8g", "RESERVATION_BOUND", "REPAIRING", true, false},
	} {
		why := NotReportable(tc.machine, tc.model, tc.status, tc.reserved)
		if (why == "") != tc.want {
			t.Errorf("%s %s %s reserved %t: %q; want reportable %t", tc.machine, tc.model, tc.status, tc.reserved, why, tc.want)
		}
	}
}

// TestStepFaultRepairAsksWithTheApprovalsRequest: a repair starts with the
// request its approval names (the one call the aggregator's relay makes
// for it), not one of the agent's own; an approval that names none (an
// older aggregator's) starts with the agent's own.
func TestStepFaultRepairAsksWithTheApprovalsRequest(t *testing.T) {
	for _, tc := range []struct{ request, want string }{{"req-approved", "req-approved"}, {"", "req-fault"}} {
		o := approved(obs(quiet()))
		o.Repair.Request = tc.request
		d := stepChecked(t, cfg, State{}, o)
		if d.State.Reason != protocol.ReasonFault || d.State.RequestID != tc.want {
			t.Errorf("approval for %q: %s %s with request %q; want a repair with request %q", tc.request, d.State.Phase, d.State.Reason, d.State.RequestID, tc.want)
		}
	}
}
