package lifecycle

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func labelled(o Observation, value string) Observation {
	o.Trigger, o.TriggerSet, o.RequestID = value, true, "req-1"
	return o
}

func manualDraining() State {
	s := draining(protocol.ReasonManual, time.Hour)
	s.RequestID, s.ScheduledTime, s.Notice = "req-1", "1796151600", pending
	return s
}

func TestStepManualTrigger(t *testing.T) {
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	scheduled := State{Phase: protocol.PhaseIdle, ScheduledTime: "1796151600", Notice: pending, LastEvent: maintenance.EventNone}
	fixed := pending
	fixed.CanReschedule = false
	fixed = asServed(fixed)
	ongoing := pending
	ongoing.Status, ongoing.RawStatus, ongoing.WindowStart = maintenance.StatusOngoing, "ONGOING", t0
	ongoing = asServed(ongoing)
	accepted := with(func(s *Signals) { s.Notice, s.NoticePresent = fixed, true })
	requested := manualDraining()
	requested.Requested = t0.Add(5 * time.Minute)
	rejected := func(outcome, msg string) Decision {
		return Decision{State: scheduled, RemoveTrigger: true, Manual: outcome,
			Events: []EventRecord{{Warning: true, Reason: protocol.EventManualRejected, Message: msg + " The label was removed; nothing else changed."}}}
	}
	backInService := State{Phase: protocol.PhaseIdle, ScheduledTime: "1796151600", Notice: pending, LastEvent: maintenance.EventNone}

	tests := []struct {
		name  string
		state State
		obs   Observation
		want  Decision
	}{
		{
			name:  "a value other than true is rejected and removed",
			state: scheduled,
			obs:   labelled(obs(noticed), "yes"),
			want:  rejected(protocol.ManualInvalidValue, `The label cloud.google.com/perform-maintenance="yes" is not accepted: the only accepted value is "true".`),
		},
		{
			name:  "an empty value is rejected too",
			state: scheduled,
			obs:   labelled(obs(noticed), ""),
			want:  rejected(protocol.ManualInvalidValue, `The label cloud.google.com/perform-maintenance="" is not accepted: the only accepted value is "true".`),
		},
		{
			name:  "true while the notice is unknown waits",
			state: scheduled,
			obs:   labelled(obs(with(func(s *Signals) { s.NoticeKnown = false })), "true"),
			want:  Decision{State: scheduled},
		},
		{
			name: "true with no notice is rejected",
			obs:  labelled(obs(quiet()), "true"),
			want: Decision{State: State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventNone}, RemoveTrigger: true, Manual: protocol.ManualNoNotice,
				Events: []EventRecord{{Warning: true, Reason: protocol.EventManualRejected, Message: "cloud.google.com/perform-maintenance=true needs a pending maintenance notice (upcoming-maintenance PENDING, can_reschedule true), and the metadata server reports none for this VM. The label was removed; nothing else changed."}}},
		},
		{
			name:  "true with a notice that cannot be rescheduled is rejected",
			state: scheduled,
			obs:   labelled(obs(accepted), "true"),
			want:  withNotice(rejected(protocol.ManualNotReschedulable, "The maintenance scheduled for 2026-12-01T19:00:00Z cannot be rescheduled (can_reschedule false); cloud.google.com/perform-maintenance=true is accepted only when it can."), fixed),
		},
		{
			name:  "true with a notice already ONGOING, maintenance-event served: rejected, nothing drained until TERMINATE",
			state: scheduled,
			obs:   labelled(obs(with(func(s *Signals) { s.Notice, s.NoticePresent = ongoing, true })), "true"),
			want: Decision{State: State{Phase: protocol.PhaseIdle, Notice: ongoing, LastEvent: maintenance.EventNone}, RemoveTrigger: true, Manual: protocol.ManualAlreadyOngoing,
				Events: []EventRecord{{Warning: true, Reason: protocol.EventManualRejected, Message: "The maintenance is already ONGOING; cloud.google.com/perform-maintenance=true is accepted only while it is PENDING. The label was removed; nothing else changed."}}},
		},
		{
			name:  "true with a notice already ONGOING on a TPU VM: the host maintenance starts, the label is rejected",
			state: scheduled,
			obs:   labelled(obs(with(func(s *Signals) { s.Notice, s.NoticePresent, s.EventNotServed = ongoing, true, true })), "true"),
			want: Decision{
				State:        State{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, Started: t0, Deadline: t0.Add(5 * time.Minute), BootID: bootA, Notice: ongoing, LastEvent: maintenance.EventNone},
				Interruption: counted(protocol.HostMaintenance),
				Cordon:       true, RemoveTrigger: true, Manual: protocol.ManualAlreadyOngoing,
				Events: []EventRecord{
					{Warning: true, Reason: protocol.EventMaintenanceStarted, Message: "The maintenance window has started; draining before 2026-11-22T10:05:00Z"},
					{Warning: true, Reason: protocol.EventManualRejected, Message: "A host-maintenance is already under way on this node (Draining since 2026-11-22T10:00:00Z); cloud.google.com/perform-maintenance is not needed. The label was removed; nothing else changed."},
				},
			},
		},
		{
			name:  "true during a preemption is rejected; the drain goes on",
			state: draining(protocol.ReasonPreemption, 30*time.Second),
			obs:   labelled(obs(with(func(s *Signals) { s.Preempted = true })), "true"),
			want: Decision{State: draining(protocol.ReasonPreemption, 30*time.Second), RemoveTrigger: true, Manual: protocol.ManualAlreadyOngoing,
				Events: []EventRecord{{Warning: true, Reason: protocol.EventManualRejected, Message: "A preemption is already under way on this node (Draining since 2026-11-22T10:00:00Z); cloud.google.com/perform-maintenance is not needed. The label was removed; nothing else changed."}}},
		},
		{
			name:  "true on a VM that live-migrates: rejected, nothing drained",
			state: scheduled,
			obs: func() Observation {
				o := labelled(obs(noticed), "true")
				o.LiveMigrates = true
				return o
			}(),
			want: rejected(protocol.ManualLiveMigrates, "This VM live-migrates on host maintenance (its instance/scheduling/on-host-maintenance is MIGRATE): the maintenance does not stop it, so it is not drained for, and cloud.google.com/perform-maintenance is not needed."),
		},
		{
			name:  "true while the maintenance policy refuses it: rejected with the policy's reason",
			state: scheduled,
			obs: func() Observation {
				o := labelled(obs(noticed), "true")
				o.ManualBlocked, o.ManualBlockedDetail = protocol.ManualExcluded, `inside the maintenance exclusion "launch"`
				return o
			}(),
			want: rejected(protocol.ManualExcluded, `The maintenance policy gates manual maintenance, and now is inside the maintenance exclusion "launch"; set cloud.google.com/perform-maintenance=true again when it allows.`),
		},
		{
			name:  "true with a reschedulable pending notice: a manual drain with the manual deadline",
			state: scheduled,
			obs:   labelled(obs(noticed), "true"),
			want: Decision{
				State:  manualDraining(),
				Cordon: true, Manual: protocol.ManualStarted,
				Events: []EventRecord{{Warning: true, Reason: protocol.EventManualStarted, Message: "cloud.google.com/perform-maintenance=true: draining the node before 2026-11-22T11:00:00Z, then asking Compute Engine to start the maintenance scheduled for 2026-12-01T19:00:00Z now"}},
			},
		},
		{
			name:  "picked by the aggregator: the same drain, said so",
			state: scheduled,
			obs:   picked(labelled(obs(noticed), "true"), nil),
			want: Decision{
				State:  manualDraining(),
				Cordon: true, Manual: protocol.ManualStarted,
				Events: []EventRecord{{Warning: true, Reason: protocol.EventManualStarted, Message: "Picked for opportunistic maintenance (cloud.google.com/perform-maintenance=true): draining the node before 2026-11-22T11:00:00Z, then asking Compute Engine to start the maintenance scheduled for 2026-12-01T19:00:00Z now"}},
			},
		},
		{
			name:  "picked, but busy since: rejected, nothing drained",
			state: scheduled,
			obs:   picked(labelled(obs(noticed), "true"), func(o *Observation) { o.Idle, o.Busy = false, protocol.BusyAccelerators }),
			want:  rejected(protocol.ManualNotIdle, "The node was picked for opportunistic maintenance while idle, and is no longer idle (accelerators): it is not drained."),
		},
		{
			name:  "picked longer ago than the agent accepts: rejected, nothing drained",
			state: scheduled,
			obs:   picked(labelled(obs(noticed), "true"), func(o *Observation) { o.TriggeredAt = t0.Add(-cfg.TriggerMaxAge - time.Second) }),
			want:  rejected(protocol.ManualStaleTrigger, "The opportunistic trigger was written at 2026-11-22T09:54:59Z, more than 5m0s ago (or its time cannot be read): the node may have changed since; it is not drained."),
		},
		{
			name:  "picked for another notice: rejected, nothing drained",
			state: scheduled,
			obs:   picked(labelled(obs(noticed), "true"), func(o *Observation) { o.TriggerFor = "1764000000" }),
			want:  rejected(protocol.ManualNoticeChanged, `The opportunistic trigger was written for the maintenance scheduled at "1764000000" (Unix seconds), and the pending one is scheduled for 2026-12-01T19:00:00Z: it is not drained.`),
		},
		{
			name:  "picked, pods not known yet: wait",
			state: scheduled,
			obs:   picked(labelled(obs(noticed), "true"), func(o *Observation) { o.PodsKnown = false }),
			want:  Decision{State: scheduled},
		},
		{
			name:  "a manual drain is not withdrawn by a quiet VM with its pending notice",
			state: manualDraining(),
			obs:   labelled(obs(noticed), "true"),
			want:  Decision{State: manualDraining()},
		},
		{
			name:  "the label removed during a manual drain cancels nothing",
			state: manualDraining(),
			obs:   obs(noticed),
			want:  Decision{State: manualDraining()},
		},
		{
			name:  "another value during a manual drain is rejected; the drain goes on",
			state: manualDraining(),
			obs:   labelled(obs(noticed), "TRUE"),
			want: Decision{State: manualDraining(), RemoveTrigger: true, Manual: protocol.ManualInvalidValue,
				Events: []EventRecord{{Warning: true, Reason: protocol.EventManualRejected, Message: `The label cloud.google.com/perform-maintenance="TRUE" is not accepted: the only accepted value is "true". The manual maintenance already under way goes on. The label was removed; nothing else changed.`}}},
		},
		{
			name:  "drained: the call is made, recorded first",
			state: manualDraining(),
			obs:   ran(cfg, manualDraining(), labelled(obs(noticed), "true")),
			want: Decision{State: func() State {
				s := manualDraining()
				s.Requested, s.Call = t0, protocol.Call{RequestID: s.RequestID, Method: protocol.RepairPerformMaintenance, Requested: t0}
				return s
			}(), Perform: true},
		},
		{
			name:  "drained while a signal is unknown: no call yet",
			state: manualDraining(),
			obs: func() Observation {
				return ran(cfg, manualDraining(), labelled(obs(with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true; s.EventKnown = false })), "true"))
			}(),
			want: Decision{State: manualDraining()},
		},
		{
			name:  "the call succeeded: terminating, not counted until it happens",
			state: requested,
			obs: func() Observation {
				o := ran(cfg, requested, labelled(obs(noticed), "true"))
				o.Perform = &PerformResult{RequestID: "req-1", Operation: "operation-1"}
				return o
			}(),
			want: acceptedDecision(requested, "operation operation-1"),
		},
		{
			name:  "the call failed: back in service, label removed",
			state: requested,
			obs: func() Observation {
				o := ran(cfg, requested, labelled(obs(noticed), "true"))
				o.Perform = &PerformResult{RequestID: "req-1", Err: errors.New("permission denied"), Outcome: protocol.ManualPermissionDenied}
				return o
			}(),
			want: Decision{
				State:    backInService,
				Uncordon: true, RemoveTrigger: true, Manual: protocol.ManualPermissionDenied,
				Events: []EventRecord{{Warning: true, Reason: protocol.EventManualFailed, Message: "Compute Engine did not start the maintenance: permission denied. The node is back in service (taint, maintenance label and cloud.google.com/perform-maintenance removed)."}},
			},
		},
		{
			name:  "observed only: said, and the node back as it was",
			state: requested,
			obs: func() Observation {
				o := ran(cfg, requested, labelled(obs(noticed), "true"))
				o.Perform = &PerformResult{RequestID: "req-1", Err: errors.New("observe-only"), Outcome: protocol.ManualObserved}
				return o
			}(),
			want: Decision{
				State:    backInService,
				Uncordon: true, RemoveTrigger: true, Manual: protocol.ManualObserved,
				Events: []EventRecord{{Reason: protocol.EventManualObserved, Message: "Observe-only: the node would now be drained and Compute Engine asked to start the maintenance (request req-1); no pod was evicted and no call made. The maintenance stays pending, and the node as it was."}},
			},
		},
		{
			name:  "a refusal is believed even when the notice is no longer reschedulable",
			state: requested,
			obs: func() Observation {
				o := labelled(obs(accepted), "true")
				o.Perform = &PerformResult{RequestID: "req-1", Err: errors.New("cannot be rescheduled"), Outcome: protocol.ManualRefused}
				return o
			}(),
			want: withNotice(Decision{
				State:    backInService,
				Uncordon: true, RemoveTrigger: true, Manual: protocol.ManualRefused,
				Events: []EventRecord{{Warning: true, Reason: protocol.EventManualFailed, Message: "Compute Engine did not start the maintenance: cannot be rescheduled. The node is back in service (taint, maintenance label and cloud.google.com/perform-maintenance removed)."}},
			}, fixed),
		},
		{
			name:  "no answer in time, but the maintenance is starting: accepted",
			state: requested,
			obs: func() Observation {
				o := labelled(obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate; s.Notice, s.NoticePresent = fixed, true })), "true")
				o.Perform = &PerformResult{RequestID: "req-1", Err: errors.New("context deadline exceeded"), Outcome: protocol.ManualFailed}
				return o
			}(),
			want: withNotice(Decision{
				State: func() State {
					s := requested
					s.Phase, s.Deadline, s.LastEvent, s.Begun = protocol.PhaseTerminating, t0.Add(time.Hour), maintenance.EventTerminate, true
					return s
				}(),
				Interruption: counted(protocol.HostMaintenance),
				Drained:      true, Manual: protocol.ManualAccepted,
				Events: []EventRecord{{Reason: protocol.EventManualAccepted, Message: "Compute Engine accepted the request to start the maintenance now (the metadata server shows the maintenance starting); the node is drained, awaiting node termination"}},
			}, fixed),
		},
		{
			name:  "a result for another request is not this one's",
			state: manualDraining(),
			obs: func() Observation {
				o := labelled(obs(noticed), "true")
				o.Perform = &PerformResult{RequestID: "req-0", Err: errors.New("old")}
				return o
			}(),
			want: Decision{State: manualDraining()},
		},
		{
			name:  "restarted after the call: the notice shows it went through, no second call",
			state: requested,
			obs:   ran(cfg, requested, labelled(obs(accepted), "true")),
			want:  withNotice(acceptedDecision(requested, "the metadata server shows the maintenance starting"), fixed),
		},
		{
			name:  "TERMINATE during a manual drain not yet asked for: host maintenance, no call",
			state: manualDraining(),
			obs: labelled(obs(with(func(s *Signals) {
				s.Event, s.EventSince = maintenance.EventTerminate, t0
				s.Notice, s.NoticePresent = pending, true
			})), "true"),
			want: Decision{
				State: func() State {
					s := manualDraining()
					s.Reason, s.LastEvent = protocol.ReasonHostMaintenance, maintenance.EventTerminate
					return s
				}(),
				Interruption: counted(protocol.HostMaintenance),
				Events:       []EventRecord{{Warning: true, Reason: protocol.EventTerminateOnHost, Message: "Host maintenance will stop the VM; draining before 2026-11-22T11:00:00Z"}},
			},
		},
		{
			name:  "preempted during a manual drain: a preemption, counted",
			state: manualDraining(),
			obs:   labelled(obs(with(func(s *Signals) { s.Preempted = true; s.Notice, s.NoticePresent = pending, true })), "true"),
			want: Decision{
				State: func() State {
					s := manualDraining()
					s.Reason, s.Deadline = protocol.ReasonPreemption, t0.Add(30*time.Second)
					return s
				}(),
				Interruption: counted(protocol.Preemption),
				Events:       []EventRecord{{Warning: true, Reason: protocol.EventPreempted, Message: "The VM was preempted during maintenance; the drain deadline moves to 2026-11-22T10:00:30Z"}},
			},
		},
		{
			name: "back from a manual maintenance not seen under way: counted now, and the label goes too",
			state: func() State {
				s := requested
				s.Phase = protocol.PhaseTerminating
				return s
			}(),
			obs: labelled(Observation{Now: t0.Add(2 * time.Hour), Signals: quiet(), MachineView: MachineView{BootID: bootB}}, "true"),
			want: Decision{
				State:        State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventNone},
				Interruption: counted(protocol.HostMaintenance),
				Uncordon:     true, RemoveTrigger: true,
				Events: []EventRecord{{Reason: protocol.EventMaintenanceCleared, Message: "Node is back from manual (boot ID " + bootB + "); removing the taint and the maintenance label"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := stepChecked(t, cfg, tc.state, tc.obs)
			if d := cmp.Diff(tc.want, got, ignoreAccounting, cmp.Comparer(func(a, b error) bool { return a == b })); d != "" {
				t.Fatalf("Step (-want +got):\n%s", d)
			}
			if got.Manual != "" && !slices.Contains(protocol.ManualOutcomes, got.Manual) {
				t.Errorf("outcome %q is not in protocol.ManualOutcomes", got.Manual)
			}
		})
	}
}

// TestStepManualCallsOnce walks a manual maintenance with an agent restart
// (a fresh Step from the stored state, no call result in memory) at every
// step, and counts calls asked for after the first was recorded.
func TestStepManualCallsOnce(t *testing.T) {
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	fixed := pending
	fixed.CanReschedule = false
	fixed = asServed(fixed)
	after := with(func(s *Signals) { s.Notice, s.NoticePresent = fixed, true })
	step := func(o Observation) Observation { return labelled(o, "true") }
	seq := []Observation{
		step(obs(noticed)),
		step(Observation{Now: t0.Add(time.Minute), Signals: noticed, MachineView: MachineView{BootID: bootA}, PodsView: PodsView{DrainEnded: lastDrainEnded}}),
		// killed here, after the call went through: the notice now says so
		step(Observation{Now: t0.Add(2 * time.Minute), Signals: after, MachineView: MachineView{BootID: bootA}}),
		step(Observation{Now: t0.Add(3 * time.Minute), Signals: after, MachineView: MachineView{BootID: bootA}, PodsView: PodsView{DrainEnded: lastDrainEnded}}),
		step(Observation{Now: t0.Add(time.Hour), Signals: quiet(), MachineView: MachineView{BootID: bootB}}),
	}
	var st State
	calls, interruptions := 0, 0
	var phases []protocol.Phase
	var running DrainOrder
	for _, o := range seq {
		d := Step(cfg, st, sequenced(o, running))
		if !d.Drain.IsZero() {
			running = d.Drain // the drain goes on while the order stands
		}
		if d.Perform {
			calls++
		}
		if d.Interruption != nil {
			interruptions++
		}
		st = d.State
		phases = append(phases, st.Phase)
	}
	if d := cmp.Diff([]protocol.Phase{protocol.PhaseDraining, protocol.PhaseDraining, protocol.PhaseTerminating, protocol.PhaseTerminating, protocol.PhaseIdle}, phases); d != "" {
		t.Errorf("phases (-want +got):\n%s", d)
	}
	if calls != 1 || interruptions != 1 {
		t.Errorf("calls %d, interruptions %d; want 1 each", calls, interruptions)
	}
}

// TestStepManualStartBound: after Compute Engine accepted, the node waits
// for the maintenance to begin until ManualStartTimeout after the
// acceptance (the loop is woken then), and goes back in service past it,
// or at once when the operation failed.
func TestStepManualStartBound(t *testing.T) {
	accepted := draining(protocol.ReasonManual, time.Hour)
	accepted.Phase, accepted.RequestID, accepted.Requested = protocol.PhaseTerminating, "req-1", t0
	accepted.Deadline = t0.Add(cfg.HostMaintenanceDeadline) // accepted at t0
	fixed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true; s.Notice.CanReschedule = false })

	o := obs(fixed)
	o.Now = t0.Add(10 * time.Minute)
	if d := Step(cfg, accepted, o); d.State.Phase != protocol.PhaseTerminating || !d.WakeAt.Equal(t0.Add(cfg.ManualStartTimeout)) {
		t.Errorf("10 min after the acceptance: phase %s, wake at %s; want terminating, woken at %s", d.State.Phase, d.WakeAt, t0.Add(cfg.ManualStartTimeout))
	}
	o.Now = t0.Add(cfg.ManualStartTimeout)
	if d := Step(cfg, accepted, o); d.State.Phase != protocol.PhaseIdle || d.Manual != protocol.ManualNotStarted || !d.Uncordon || !d.RemoveTrigger {
		t.Errorf("at the bound: phase %s, outcome %q, uncordon %t, remove trigger %t; want back in service, not_started", d.State.Phase, d.Manual, d.Uncordon, d.RemoveTrigger)
	}
	o.Now = t0.Add(time.Minute)
	o.Perform = &PerformResult{RequestID: "req-1", Operation: "op-1", OperationErr: errors.New("operation failed")}
	if d := Step(cfg, accepted, o); d.State.Phase != protocol.PhaseIdle || d.Manual != protocol.ManualNotStarted {
		t.Errorf("operation failed: phase %s, outcome %q; want back in service, not_started", d.State.Phase, d.Manual)
	}
	// Accepted on the signals before the call's answer came: the answer,
	// when it comes, puts its operation on the Node, to be followed.
	o.Perform = &PerformResult{RequestID: "req-1", Operation: "op-1"}
	if d := Step(cfg, accepted, o); d.State.Phase != protocol.PhaseTerminating || d.State.Call.Operation != "op-1" {
		t.Errorf("the call's answer after the acceptance: phase %s, operation %q; want terminating, op-1 followed", d.State.Phase, d.State.Call.Operation)
	}
	// Begun: the bound no longer applies.
	begun := obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate }))
	begun.Now = t0.Add(cfg.ManualStartTimeout + time.Minute)
	if d := Step(cfg, accepted, begun); d.State.Phase != protocol.PhaseTerminating {
		t.Errorf("begun: phase %s, want terminating", d.State.Phase)
	}
}

// TestStepVoluntaryDrainAbandoned: a manual drain that ends with pods left
// (their budgets held to the end) is given up before Compute Engine is
// asked: back in service, said so; with escalation opted in, it goes on.
func TestStepVoluntaryDrainAbandoned(t *testing.T) {
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	st := draining(protocol.ReasonManual, cfg.ManualDrainTimeout)
	st.RequestID = "req-1"
	o := Observation{
		Now:         t0.Add(cfg.ManualDrainTimeout),
		Signals:     noticed,
		MachineView: MachineView{BootID: bootA},
		PodsView:    PodsView{DrainLeft: []string{"ml/trainer-0"}},
		TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true},
	}
	d := stepChecked(t, cfg, st, ran(cfg, st, o))
	if d.State.Phase != protocol.PhaseIdle || !d.Uncordon || !d.RemoveTrigger || d.Perform || d.Manual != protocol.ManualAbandoned {
		t.Fatalf("abandoned: phase %s, uncordon %t, remove trigger %t, perform %t, outcome %q", d.State.Phase, d.Uncordon, d.RemoveTrigger, d.Perform, d.Manual)
	}
	if len(d.Events) == 0 || d.Events[0].Reason != protocol.EventManualAbandoned || !strings.Contains(d.Events[0].Message, "ml/trainer-0") {
		t.Errorf("events %+v", d.Events)
	}
	escalating := cfg
	escalating.ManualDrainEscalate = true
	if d := stepChecked(t, escalating, st, ran(escalating, st, o)); !d.Perform || d.State.Phase != protocol.PhaseDraining {
		t.Errorf("with escalation opted in: perform %t, phase %s; want the call", d.Perform, d.State.Phase)
	}
	o.DrainLeft = nil
	if d := stepChecked(t, cfg, st, ran(cfg, st, o)); !d.Perform {
		t.Error("a voluntary drain that finished does not go on to the call")
	}
}

// TestStepFailureMemory: each voluntary maintenance that fails is
// remembered on the Node with a cool-down that doubles, up to its cap; a
// rejected label is not a failure; one that goes through clears the
// record; the record outlives the maintenance.
func TestStepFailureMemory(t *testing.T) {
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	asked := draining(protocol.ReasonManual, cfg.ManualDrainTimeout)
	asked.RequestID, asked.Requested = "req-1", t0
	failed := func(st State, at time.Time) State {
		t.Helper()
		o := Observation{
			Now:         at,
			Signals:     noticed,
			MachineView: MachineView{BootID: bootA},
			TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true, Perform: &PerformResult{RequestID: "req-1", Err: errors.New("403"), Outcome: protocol.ManualPermissionDenied}},
		}
		d := stepChecked(t, cfg, st, ran(cfg, st, o))
		if d.State.Phase != protocol.PhaseIdle {
			t.Fatalf("phase %s after a failure", d.State.Phase)
		}
		return d.State
	}
	st := asked
	var waits []time.Duration
	for i := range 7 {
		at := t0.Add(time.Duration(i) * 48 * time.Hour)
		st.Phase, st.Reason, st.RequestID, st.Requested, st.Started, st.Deadline = asked.Phase, asked.Reason, asked.RequestID, at, at, at.Add(time.Hour)
		st = failed(st, at)
		if st.Failures.Count != i+1 || st.Failures.Reason != protocol.ManualPermissionDenied || !st.Failures.Last.Equal(at) {
			t.Fatalf("failure %d recorded as %+v", i+1, st.Failures)
		}
		waits = append(waits, st.Failures.RetryAfter.Sub(at))
	}
	want := []time.Duration{time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 16 * time.Hour, 24 * time.Hour, 24 * time.Hour}
	if d := cmp.Diff(want, waits); d != "" {
		t.Errorf("cool-downs (-want +got):\n%s", d)
	}
	// A label rejected is not a failure; the record outlives it.
	idle := st
	d := stepChecked(t, cfg, idle, Observation{Now: t0, Signals: noticed, MachineView: MachineView{BootID: bootA}, TriggerView: TriggerView{Trigger: "yes", TriggerSet: true}})
	if d.Manual != protocol.ManualInvalidValue || d.State.Failures != idle.Failures {
		t.Errorf("a rejected label changed the record: %+v", d.State.Failures)
	}
	// On a VM that live-migrates, the refusal is one: the aggregator would
	// otherwise pick the node again at once, to be refused again.
	migrates := Observation{Now: t0, Signals: noticed, MachineView: MachineView{BootID: bootA, LiveMigrates: true}, TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true}}
	d = stepChecked(t, cfg, idle, migrates)
	if d.Manual != protocol.ManualLiveMigrates || d.State.Failures.Count != idle.Failures.Count+1 || d.State.Failures.Reason != protocol.ManualLiveMigrates {
		t.Errorf("a VM that live-migrates: outcome %q, failures %+v; want one more failure remembered", d.Manual, d.State.Failures)
	}
	// Observed only, it is no failure either.
	st.Phase, st.Reason, st.RequestID, st.Requested, st.Started, st.Deadline = asked.Phase, asked.Reason, asked.RequestID, t0, t0, t0.Add(time.Hour)
	d = stepChecked(t, cfg, st, ran(cfg, st, Observation{Now: t0, Signals: noticed, MachineView: MachineView{BootID: bootA},
		TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true, Perform: &PerformResult{RequestID: "req-1", Err: errors.New("observe-only"), Outcome: protocol.ManualObserved}}}))
	if d.Manual != protocol.ManualObserved || d.State.Failures != st.Failures {
		t.Errorf("observed only: outcome %q, failures %+v; want the record as it was", d.Manual, d.State.Failures)
	}
	// Accepted, it is not yet done: the record stays; once the
	// maintenance is under way it is cleared.
	st.Phase, st.Reason, st.RequestID, st.Requested, st.Started, st.Deadline = asked.Phase, asked.Reason, asked.RequestID, t0, t0, t0.Add(time.Hour)
	d = stepChecked(t, cfg, st, ran(cfg, st, Observation{
		Now:         t0,
		Signals:     noticed,
		MachineView: MachineView{BootID: bootA},
		TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true, Perform: &PerformResult{RequestID: "req-1", Operation: "op-1"}},
	}))
	if d.Manual != protocol.ManualAccepted || d.State.Failures.Count != 7 {
		t.Errorf("accepted: outcome %q, failures %+v; want the record kept until the maintenance happens", d.Manual, d.State.Failures)
	}
	underWay := noticed
	underWay.Event = maintenance.EventTerminate
	d = stepChecked(t, cfg, d.State, Observation{Now: t0.Add(time.Minute), Signals: underWay, MachineView: MachineView{BootID: bootA}, TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true}})
	if d.State.Failures.Count != 0 || d.Interruption == nil {
		t.Errorf("under way: failures %+v, interruption %v; want the record cleared and the maintenance counted", d.State.Failures, d.Interruption)
	}
}

// TestStepManualCountedWhenItHappens: an accepted manual maintenance is
// counted once, when Compute Engine begins it, and not again when the VM
// comes back; one whose operation fails is a failure and never counted;
// one not seen under way is counted when the VM comes back.
func TestStepManualCountedWhenItHappens(t *testing.T) {
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	asked := draining(protocol.ReasonManual, time.Hour)
	asked.RequestID, asked.Requested = "req-1", t0
	accept := func() State {
		d := stepChecked(t, cfg, asked, ran(cfg, asked, Observation{
			Now:         t0,
			Signals:     noticed,
			MachineView: MachineView{BootID: bootA},
			TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true, Perform: &PerformResult{RequestID: "req-1", Operation: "op-1"}},
		}))
		if d.Manual != protocol.ManualAccepted || d.Interruption != nil {
			t.Fatalf("accepted: outcome %q, interruption %v; want accepted, nothing counted", d.Manual, d.Interruption)
		}
		return d.State
	}
	// Under way, then back: counted once.
	terminate := noticed
	terminate.Event = maintenance.EventTerminate
	counts := 0
	st := accept()
	for _, o := range []Observation{
		{Now: t0.Add(time.Minute), Signals: terminate, MachineView: MachineView{BootID: bootA}, TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true}},
		{Now: t0.Add(2 * time.Minute), Signals: terminate, MachineView: MachineView{BootID: bootA}, TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true}},
		{Now: t0.Add(10 * time.Minute), Signals: quiet(), MachineView: MachineView{BootID: bootB}},
	} {
		d := stepChecked(t, cfg, st, o)
		if d.Interruption != nil {
			counts++
		}
		st = d.State
	}
	if counts != 1 || st.Phase != protocol.PhaseIdle {
		t.Errorf("under way and back: counted %d times, phase %s; want once, idle", counts, st.Phase)
	}
	// The operation fails: not counted, one failure.
	st = accept()
	d := stepChecked(t, cfg, st, Observation{
		Now:         t0.Add(time.Minute),
		Signals:     noticed,
		MachineView: MachineView{BootID: bootA},
		TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true, Perform: &PerformResult{RequestID: "req-1", Operation: "op-1", OperationErr: errors.New("operation failed")}},
	})
	if d.Manual != protocol.ManualNotStarted || d.Interruption != nil || d.State.Failures.Count != 1 {
		t.Errorf("operation failed: outcome %q, interruption %v, failures %d; want not_started, not counted, one failure", d.Manual, d.Interruption, d.State.Failures.Count)
	}
}
