package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

var (
	t0      = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	window  = time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	cfg     = DefaultConfig
	bootA   = "aaaaaaaa-0000-0000-0000-000000000001"
	bootB   = "bbbbbbbb-0000-0000-0000-000000000002"
	pending = asServed(maintenance.Notice{Type: "SCHEDULED", Status: maintenance.StatusPending, CanReschedule: true, WindowStart: window})
)

// stepChecked is Step, with its state checked to survive the Node: the
// state encoded on a Node and decoded again is the state.
func stepChecked(t *testing.T, cfg Config, st State, obs Observation) Decision {
	t.Helper()
	if obs.Signals.Notice.Status != "" {
		obs.Signals.Notice = asServed(obs.Signals.Notice)
	}
	d := Step(cfg, st, obs)
	n := &corev1.Node{}
	if d.State.NoticeForeign {
		// Another controller's notice is on the Node; the agent writes none.
		n.Labels = map[string]string{protocol.LabelScheduledMaintenanceTime: d.State.ScheduledTime}
		n.Annotations = map[string]string{protocol.AnnotationUpcomingMaintenance: d.State.Notice.Raw}
	}
	protocol.WriteAgentState(n, d.State)
	if diff := cmp.Diff(d.State, protocol.ReadAgentState(n), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the state does not survive the Node (-stepped +decoded):\n%s", diff)
	}
	return d
}

// quiet is what a healthy VM with nothing scheduled answers.
func quiet() Signals {
	return Signals{Event: maintenance.EventNone, EventKnown: true, PreemptedKnown: true, NoticeKnown: true}
}

func with(f func(*Signals)) Signals {
	s := quiet()
	f(&s)
	return s
}

func obs(s Signals) Observation {
	return Observation{Now: t0, Signals: s, MachineView: MachineView{BootID: bootA}}
}

// picked is o with an opportunistic trigger written 10 s ago for the
// pending notice, on an idle node; change alters it.
func picked(o Observation, change func(*Observation)) Observation {
	o.Opportunistic, o.TriggeredAt, o.TriggerFor = true, t0.Add(-10*time.Second), strconv.FormatInt(window.Unix(), 10)
	o.PodsKnown, o.Idle = true, true
	if change != nil {
		change(&o)
	}
	return o
}

// lastDrainEnded marks, in a sequence of observations, that the drain the
// previous step ordered ran to its end: sequenced puts that order in its
// place, as the agent, which runs what each step orders, reports it.
var lastDrainEnded = DrainOrder{For: time.Unix(1, 0), Reason: "the drain the previous step ordered"}

func sequenced(o Observation, running DrainOrder) Observation {
	if o.DrainEnded == lastDrainEnded {
		o.DrainEnded = running
	}
	return o
}

// ran is o with the drain st's maintenance orders under c run to its end,
// as the agent reports it (Observation.DrainEnded).
func ran(c Config, st State, o Observation) Observation {
	d := Decision{State: st}
	o.DrainEnded = d.order(c, o)
	return o
}

func draining(reason protocol.Reason, deadline time.Duration) State {
	return State{Phase: protocol.PhaseDraining, Reason: reason, Started: t0, Deadline: t0.Add(deadline), BootID: bootA, LastEvent: maintenance.EventNone}
}

// ignoreAccounting leaves what the node ran and the interruption counts to
// TestStepAccounting.
// ignoreAccounting leaves out what other tests check: the counts, what
// the node runs, its idleness (TestStepIdleSince), the failures of
// voluntary maintenance (TestStepFailureMemory) and the drain order
// (TestStepDrainOrder).
var ignoreAccounting = cmp.Options{cmpopts.IgnoreFields(State{}, "Interruptions", "LastBootID", "LastKubelet", "IdleSince", "Busy", "Failures"),
	cmpopts.IgnoreFields(Decision{}, "Drain")}

// TestStepDrainOrder: a drain must run while the node drains, until it is
// done; a preemption moves the deadline of the drain under way; a manual
// drain that is done waits for Compute Engine with no drain running.
func TestStepDrainOrder(t *testing.T) {
	terminate := with(func(s *Signals) { s.Event = maintenance.EventTerminate })
	preempted := with(func(s *Signals) { s.Event, s.Preempted = maintenance.EventTerminate, true })
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	hostDrain := draining(protocol.ReasonHostMaintenance, cfg.HostMaintenanceDeadline)
	manual := draining(protocol.ReasonManual, cfg.ManualDrainTimeout)
	manual.RequestID = "req-1"
	for _, tc := range []struct {
		name  string
		state State
		obs   Observation
		want  DrainOrder
	}{
		{"idle, nothing announced: none", State{}, Observation{Now: t0, Signals: quiet(), MachineView: MachineView{BootID: bootA}}, DrainOrder{}},
		{"TERMINATE: one for this maintenance, by its deadline", State{}, Observation{Now: t0, Signals: terminate, MachineView: MachineView{BootID: bootA}},
			DrainOrder{For: t0, Deadline: t0.Add(cfg.HostMaintenanceDeadline)}},
		{"draining: the same one again", hostDrain, Observation{Now: t0.Add(time.Minute), Signals: terminate, MachineView: MachineView{BootID: bootA}},
			DrainOrder{For: t0, Deadline: t0.Add(cfg.HostMaintenanceDeadline)}},
		{"preempted while draining: the deadline moves", hostDrain, Observation{Now: t0.Add(time.Minute), Signals: preempted, MachineView: MachineView{BootID: bootA}},
			DrainOrder{For: t0, Deadline: t0.Add(time.Minute + cfg.PreemptionDeadline)}},
		{"drain done: none", hostDrain, ran(cfg, hostDrain, Observation{Now: t0.Add(time.Minute), Signals: terminate, MachineView: MachineView{BootID: bootA}}), DrainOrder{}},
		{"manual drain done, Compute Engine not asked yet: none", manual,
			ran(cfg, manual, Observation{Now: t0.Add(time.Minute), Signals: noticed, MachineView: MachineView{BootID: bootA}, TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true}}), DrainOrder{}},
		{"manual: voluntary, the budgets hold", manual, Observation{Now: t0.Add(time.Minute), Signals: noticed, MachineView: MachineView{BootID: bootA}, TriggerView: TriggerView{Trigger: protocol.TriggerValue, TriggerSet: true}},
			DrainOrder{For: t0, Deadline: t0.Add(cfg.ManualDrainTimeout), Voluntary: true}},
		{"back from maintenance: none", hostDrain, Observation{Now: t0.Add(time.Hour), Signals: quiet(), MachineView: MachineView{BootID: bootB}}, DrainOrder{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stepChecked(t, cfg, tc.state, tc.obs).Drain; !got.Equal(tc.want) {
				t.Errorf("drain %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestStep(t *testing.T) {
	// The agent was watching when the signals appeared, at t0.
	terminate := with(func(s *Signals) { s.Event, s.EventSince = maintenance.EventTerminate, t0 })
	preempted := with(func(s *Signals) { s.Preempted, s.PreemptedSince = true, t0 })
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	rescheduled := pending
	rescheduled.WindowStart = window.Add(48 * time.Hour)
	rescheduled = asServed(rescheduled)
	ongoing := pending
	ongoing.Status, ongoing.RawStatus, ongoing.WindowStart = maintenance.StatusOngoing, "ONGOING", t0
	ongoing = asServed(ongoing)
	scheduled := State{Phase: protocol.PhaseIdle, ScheduledTime: "1796151600", Notice: pending, LastEvent: maintenance.EventNone}
	terminating := draining(protocol.ReasonHostMaintenance, time.Hour)
	terminating.Phase, terminating.LastEvent = protocol.PhaseTerminating, maintenance.EventTerminate

	tests := []struct {
		name  string
		state State
		obs   Observation
		want  Decision
	}{
		{
			name: "quiet node stays idle",
			obs:  obs(quiet()),
			want: Decision{State: State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventNone}},
		},
		{
			name: "a notice appears: label and annotation",
			obs:  obs(noticed),
			want: Decision{
				State:  scheduled,
				Events: []EventRecord{{Reason: protocol.EventMaintenanceScheduled, Message: "Maintenance is scheduled for 2026-12-01T19:00:00Z (can reschedule: true)"}},
			},
		},
		{
			name:  "the notice is rescheduled",
			state: scheduled,
			obs:   obs(with(func(s *Signals) { s.Notice, s.NoticePresent = rescheduled, true })),
			want: Decision{
				State:  State{Phase: protocol.PhaseIdle, ScheduledTime: "1796324400", Notice: rescheduled, LastEvent: maintenance.EventNone},
				Events: []EventRecord{{Reason: protocol.EventMaintenanceRescheduled, Message: "Maintenance was rescheduled to 2026-12-03T19:00:00Z"}},
			},
		},
		{
			name:  "the notice is cancelled",
			state: scheduled,
			obs:   obs(quiet()),
			want: Decision{
				State:  State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventNone},
				Events: []EventRecord{{Reason: protocol.EventMaintenanceCancelled, Message: "The scheduled maintenance is no longer pending"}},
			},
		},
		{
			name:  "an unknown notice answer changes nothing",
			state: scheduled,
			obs:   obs(with(func(s *Signals) { s.NoticeKnown = false })),
			want:  Decision{State: scheduled},
		},
		{
			name: "TERMINATE_ON_HOST_MAINTENANCE starts a drain with a 60 min deadline",
			obs:  Observation{Now: t0, Signals: terminate, MachineView: MachineView{BootID: bootA, Unschedulable: true}},
			want: Decision{
				State:        State{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, Started: t0, Deadline: t0.Add(time.Hour), BootID: bootA, CordonedBefore: true, LastEvent: maintenance.EventTerminate},
				Interruption: counted(protocol.HostMaintenance),
				Cordon:       true,
				Events:       []EventRecord{{Warning: true, Reason: protocol.EventTerminateOnHost, Message: "Host maintenance will stop the VM; draining before 2026-11-22T11:00:00Z"}},
			},
		},
		{
			name: "an unknown maintenance-event never starts a drain",
			obs:  obs(with(func(s *Signals) { s.Event, s.EventKnown = "", false })),
			want: Decision{State: State{Phase: protocol.PhaseIdle}},
		},
		{
			name: "preemption drains with a 30 s deadline",
			obs:  obs(preempted),
			want: Decision{
				State:        State{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: t0, Deadline: t0.Add(30 * time.Second), BootID: bootA, LastEvent: maintenance.EventNone},
				Interruption: counted(protocol.Preemption),
				Cordon:       true,
				Events:       []EventRecord{{Warning: true, Reason: protocol.EventPreempted, Message: "The VM was preempted; draining before it stops at 2026-11-22T10:00:30Z"}},
			},
		},
		{
			name:  "a preemption during host maintenance shortens the deadline",
			state: draining(protocol.ReasonHostMaintenance, time.Hour),
			obs:   Observation{Now: t0.Add(time.Minute), Signals: with(func(s *Signals) { s.Event, s.Preempted = maintenance.EventTerminate, true }), MachineView: MachineView{BootID: bootA}},
			want: Decision{
				State:  State{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: t0, Deadline: t0.Add(90 * time.Second), BootID: bootA, LastEvent: maintenance.EventTerminate},
				Events: []EventRecord{{Warning: true, Reason: protocol.EventPreempted, Message: "The VM was preempted during maintenance; the drain deadline moves to 2026-11-22T10:01:30Z"}},
			},
		},
		{
			name:  "where maintenance-event is served, a notice turning ONGOING drops the scheduled label and drains nothing (TERMINATE will)",
			state: scheduled,
			obs:   obs(with(func(s *Signals) { s.Notice, s.NoticePresent = ongoing, true })),
			want:  Decision{State: State{Phase: protocol.PhaseIdle, Notice: ongoing, LastEvent: maintenance.EventNone}},
		},
		{
			name:  "where maintenance-event is not served (TPU), a notice turning ONGOING starts a drain and drops the scheduled label",
			state: scheduled,
			obs:   obs(with(func(s *Signals) { s.Notice, s.NoticePresent, s.EventNotServed = ongoing, true, true })),
			want: Decision{
				State:        State{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, Started: t0, Deadline: t0.Add(5 * time.Minute), BootID: bootA, Notice: ongoing, LastEvent: maintenance.EventNone},
				Interruption: counted(protocol.HostMaintenance),
				Cordon:       true,
				Events:       []EventRecord{{Warning: true, Reason: protocol.EventMaintenanceStarted, Message: "The maintenance window has started; draining before 2026-11-22T10:05:00Z"}},
			},
		},
		{
			name: "live migration is recorded and nothing else",
			obs:  obs(with(func(s *Signals) { s.Event = maintenance.EventMigrate })),
			want: Decision{
				State:     State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventMigrate},
				Migration: true,
				Events:    []EventRecord{{Reason: protocol.EventMigrateOnHost, Message: "Compute Engine will live-migrate the VM; nothing to drain"}},
			},
		},
		{
			name:  "the drain finished: terminating",
			state: draining(protocol.ReasonHostMaintenance, time.Hour),
			obs:   ran(cfg, draining(protocol.ReasonHostMaintenance, time.Hour), Observation{Now: t0.Add(10 * time.Minute), Signals: terminate, MachineView: MachineView{BootID: bootA}}),
			want: Decision{
				State:   State{Phase: protocol.PhaseTerminating, Reason: protocol.ReasonHostMaintenance, Started: t0, Deadline: t0.Add(time.Hour), BootID: bootA, LastEvent: maintenance.EventTerminate},
				Drained: true,
				Events:  []EventRecord{{Reason: protocol.EventEvictionComplete, Message: "All pods were stopped; the node is ready for the VM to stop (deadline 2026-11-22T11:00:00Z)"}},
			},
		},
		{
			name:  "terminating waits while the event is still served",
			state: terminating,
			obs:   obs(terminate),
			want:  Decision{State: terminating},
		},
		{
			name:  "terminating waits while the signals are unknown",
			state: terminating,
			obs:   obs(Signals{}),
			want:  Decision{State: terminating},
		},
		{
			name:  "back with a new boot ID: idle and uncordoned",
			state: terminating,
			obs:   Observation{Now: t0.Add(2 * time.Hour), Signals: quiet(), MachineView: MachineView{BootID: bootB}},
			want: Decision{
				State:    State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventNone},
				Uncordon: true,
				Events:   []EventRecord{{Reason: protocol.EventMaintenanceCleared, Message: "Node is back from host-maintenance (boot ID " + bootB + "); removing the taint and the maintenance label"}},
			},
		},
		{
			name: "back with the notice it was for: the notice goes with the maintenance, no cancellation",
			state: func() State {
				s := terminating
				s.ScheduledTime, s.Notice = "1796151600", pending
				return s
			}(),
			obs: Observation{Now: t0.Add(2 * time.Hour), Signals: quiet(), MachineView: MachineView{BootID: bootB}},
			want: Decision{
				State:    State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventNone},
				Uncordon: true,
				Events:   []EventRecord{{Reason: protocol.EventMaintenanceCleared, Message: "Node is back from host-maintenance (boot ID " + bootB + "); removing the taint and the maintenance label"}},
			},
		},
		{
			name: "back, but a person had cordoned it before: stays cordoned",
			state: func() State {
				s := terminating
				s.CordonedBefore = true
				return s
			}(),
			obs: Observation{Now: t0.Add(2 * time.Hour), Signals: quiet(), MachineView: MachineView{BootID: bootB}},
			want: Decision{
				State:  State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventNone},
				Events: []EventRecord{{Reason: protocol.EventMaintenanceCleared, Message: "Node is back from host-maintenance (boot ID " + bootB + "); removing the taint and the maintenance label"}},
			},
		},
		{
			name:  "signals withdrawn without a reboot: back in service, with a warning",
			state: draining(protocol.ReasonHostMaintenance, time.Hour),
			obs:   obs(quiet()),
			want: Decision{
				State:    State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventNone},
				Uncordon: true,
				Events:   []EventRecord{{Warning: true, Reason: protocol.EventMaintenanceAborted, Message: "The host-maintenance was withdrawn before the VM stopped; putting the node back in service"}},
			},
		},
		{
			name:  "back with a new boot and a new TERMINATE: a second, separate maintenance",
			state: terminating,
			// The agent restarted with the VM: its watcher never saw another
			// value of the key, so when TERMINATE came is unknown.
			obs: Observation{Now: t0.Add(2 * time.Hour), Signals: with(func(s *Signals) { s.Event = maintenance.EventTerminate }),
				MachineView: MachineView{BootID: bootB}},
			want: Decision{
				State:        State{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, Started: t0.Add(2 * time.Hour), Deadline: t0.Add(3 * time.Hour), BootID: bootB, LastEvent: maintenance.EventTerminate},
				Interruption: counted(protocol.HostMaintenance),
				Cordon:       true,
				Events: []EventRecord{
					{Reason: protocol.EventMaintenanceCleared, Message: "Node is back from host-maintenance (boot ID " + bootB + "); removing the taint and the maintenance label"},
					// The agent restarted with the VM: it did not see the signal come.
					{Warning: true, Reason: protocol.EventTerminateOnHost, Message: "Host maintenance will stop the VM; draining before 2026-11-22T13:00:00Z; the agent did not see the signal appear, so its notice counts from now"},
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := stepChecked(t, cfg, tc.state, tc.obs)
			if d := cmp.Diff(tc.want, got, ignoreAccounting); d != "" {
				t.Fatalf("Step (-want +got):\n%s", d)
			}
			// Idempotent: stepping again from the new state with the same
			// observation (as a restarted agent would) does nothing more.
			o := tc.obs
			if got.RemoveTrigger {
				o.Trigger, o.TriggerSet = "", false
			}
			again := Step(cfg, got.State, o)
			want := Decision{State: got.State, Drain: got.Drain} // the same standing drain order
			if got.State.Phase == protocol.PhaseDraining && !tc.obs.DrainEnded.IsZero() {
				return
			}
			if d := cmp.Diff(want, again); d != "" {
				t.Errorf("second Step is not a no-op (-want +got):\n%s", d)
			}
		})
	}
}

// TestStepNeverDrainsTwice walks one maintenance from notice to return with
// an agent restart (a fresh Step from the stored state) at every step, and
// acceptedDecision is the decision when Compute Engine accepted the manual
// maintenance of requested (how says how the agent knows): terminating,
// counted as host maintenance.
func acceptedDecision(requested State, how string) Decision {
	s := requested
	s.Phase, s.Deadline = protocol.PhaseTerminating, t0.Add(time.Hour)
	return Decision{
		State:   s,
		Drained: true, Manual: protocol.ManualAccepted,
		Events: []EventRecord{{Reason: protocol.EventManualAccepted, Message: "Compute Engine accepted the request to start the maintenance now (" + how + "); the node is drained, awaiting node termination"}},
	}
}

// TestStepDrainDoneIsTheWholeOrder: a drain is done only when the drain
// that ended is the one the maintenance orders now. A manual drain that
// ended voluntarily with a pod left is run again, forced, when the same
// maintenance turns into a host maintenance, and nothing says "All pods
// were stopped" while one runs; a maintenance that starts in the step
// another ended (the VM came back to a new TERMINATE) drains from the
// start; a forced drain that ended with a pod stuck says so.
func TestStepDrainDoneIsTheWholeOrder(t *testing.T) {
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	manual := draining(protocol.ReasonManual, cfg.ManualDrainTimeout)
	manual.RequestID = "req-1"
	left := ran(cfg, manual, labelled(obs(noticed), "true"))
	left.DrainLeft = []string{"ml/trainer-0"}
	left.Signals.Event = maintenance.EventTerminate
	d := stepChecked(t, cfg, manual, left)
	if d.State.Phase != protocol.PhaseDraining || d.State.Reason != protocol.ReasonHostMaintenance || d.Drain.IsZero() || d.Drain.Voluntary || d.Drained {
		t.Errorf("a voluntary drain with a pod left, turned host maintenance: phase %s, reason %s, drain %+v, drained %t; want the drain run again, forced",
			d.State.Phase, d.State.Reason, d.Drain, d.Drained)
	}
	for _, e := range d.Events {
		if e.Reason == protocol.EventEvictionComplete {
			t.Errorf("event %q while ml/trainer-0 runs", e.Message)
		}
	}

	hostDrain := draining(protocol.ReasonHostMaintenance, time.Hour)
	back := ran(cfg, hostDrain, Observation{Now: t0.Add(30 * time.Minute), Signals: with(func(s *Signals) { s.Event = maintenance.EventTerminate }), MachineView: MachineView{BootID: bootB}})
	d = stepChecked(t, cfg, hostDrain, back)
	if d.State.Phase != protocol.PhaseDraining || !d.State.Started.Equal(back.Now) || d.Drained || d.Drain.IsZero() {
		t.Errorf("back from the stop to a new TERMINATE, the old drain done: phase %s, started %s, drained %t, drain %+v; want a new drain from the start",
			d.State.Phase, d.State.Started, d.Drained, d.Drain)
	}

	stuck := ran(cfg, hostDrain, Observation{Now: t0.Add(time.Hour), Signals: with(func(s *Signals) { s.Event = maintenance.EventTerminate }), MachineView: MachineView{BootID: bootA}})
	stuck.DrainLeft = []string{"ml/stuck-0"}
	d = stepChecked(t, cfg, hostDrain, stuck)
	if d.State.Phase != protocol.PhaseTerminating || len(d.Events) != 1 || d.Events[0].Reason != protocol.EventEvictionIncomplete || !strings.Contains(d.Events[0].Message, "ml/stuck-0") {
		t.Errorf("a forced drain that ended with a pod stuck: phase %s, events %+v; want terminating, and a Warning naming the pod", d.State.Phase, d.Events)
	}
}

// counts interruptions.
func TestStepNeverDrainsTwice(t *testing.T) {
	terminate := with(func(s *Signals) { s.Event = maintenance.EventTerminate; s.Notice, s.NoticePresent = pending, true })
	seq := []Observation{
		obs(with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })),
		obs(terminate),
		obs(terminate),
		{Now: t0.Add(time.Minute), Signals: terminate, MachineView: MachineView{BootID: bootA}, PodsView: PodsView{DrainEnded: lastDrainEnded}},
		{Now: t0.Add(2 * time.Minute), Signals: terminate, MachineView: MachineView{BootID: bootA}, PodsView: PodsView{DrainEnded: lastDrainEnded}},
		{Now: t0.Add(time.Hour), Signals: Signals{}, MachineView: MachineView{BootID: bootB}},
		{Now: t0.Add(time.Hour), Signals: quiet(), MachineView: MachineView{BootID: bootB}},
		{Now: t0.Add(time.Hour), Signals: quiet(), MachineView: MachineView{BootID: bootB}},
	}
	var st State
	interruptions, cordons, uncordons := 0, 0, 0
	var phases []protocol.Phase
	var running DrainOrder
	for _, o := range seq {
		d := Step(cfg, st, sequenced(o, running))
		running = d.Drain
		if d.Interruption != nil {
			interruptions++
		}
		if d.Cordon {
			cordons++
		}
		if d.Uncordon {
			uncordons++
		}
		st = d.State
		phases = append(phases, st.Phase)
	}
	want := []protocol.Phase{protocol.PhaseIdle, protocol.PhaseDraining, protocol.PhaseDraining, protocol.PhaseTerminating, protocol.PhaseTerminating, protocol.PhaseIdle, protocol.PhaseIdle, protocol.PhaseIdle}
	if d := cmp.Diff(want, phases); d != "" {
		t.Errorf("phases (-want +got):\n%s", d)
	}
	if interruptions != 1 || cordons != 1 || uncordons != 1 {
		t.Errorf("interruptions %d, cordons %d, uncordons %d; want 1 each", interruptions, cordons, uncordons)
	}
}

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
			want:  Decision{State: func() State { s := manualDraining(); s.Requested = t0; return s }(), Perform: true},
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

// TestStepAccounting: every interruption is counted once on the Node, and a
// reboot nothing announced is one too: a host error, or a node upgrade when
// the kubelet version changed.
func TestStepAccounting(t *testing.T) {
	at := func(boot, kubelet string, s Signals) Observation {
		return Observation{Now: t0, Signals: s, MachineView: MachineView{BootID: boot, KubeletVersion: kubelet}}
	}
	terminate := with(func(s *Signals) { s.Event = maintenance.EventTerminate })
	bootC := "cccccccc-0000-0000-0000-000000000003"
	seq := []struct {
		obs  Observation
		want protocol.Counts
		ev   string
	}{
		{at(bootA, "v1.36.3", quiet()), nil, ""}, // first sight: recorded, nothing counted
		{at(bootA, "v1.36.3", terminate), protocol.Counts{"MaintenanceEvent/HW/SW Maintenance": 1}, protocol.EventTerminateOnHost},
		{at(bootB, "v1.36.3", quiet()), protocol.Counts{"MaintenanceEvent/HW/SW Maintenance": 1}, protocol.EventMaintenanceCleared}, // announced: not a host error
		{at(bootC, "v1.36.3", quiet()), protocol.Counts{"MaintenanceEvent/HW/SW Maintenance": 1, "TerminationEvent/HostError": 1}, protocol.EventUnexpectedReboot},
		{at(bootC, "v1.36.3", quiet()), protocol.Counts{"MaintenanceEvent/HW/SW Maintenance": 1, "TerminationEvent/HostError": 1}, ""},
		{at(bootA, "v1.37.0", quiet()), protocol.Counts{"MaintenanceEvent/HW/SW Maintenance": 1, "TerminationEvent/HostError": 1, "MaintenanceEvent/NodeUpgrade": 1}, protocol.EventNodeUpgraded},
	}
	var st State
	for i, step := range seq {
		d := Step(cfg, st, step.obs)
		events := d.Events
		if d.State.Phase == protocol.PhaseDraining {
			d = Step(cfg, d.State, ran(cfg, d.State, Observation{Now: t0, Signals: terminate, MachineView: MachineView{BootID: step.obs.BootID, KubeletVersion: step.obs.KubeletVersion}}))
			events = append(events, d.Events...)
		}
		if diff := cmp.Diff(step.want, d.State.Interruptions, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("step %d counts (-want +got):\n%s", i, diff)
		}
		var reasons []string
		for _, e := range events {
			reasons = append(reasons, e.Reason)
		}
		if step.ev != "" && !slices.Contains(reasons, step.ev) {
			t.Errorf("step %d events %v, want %s", i, reasons, step.ev)
		}
		if step.ev == "" && slices.ContainsFunc(reasons, func(r string) bool { return r == protocol.EventUnexpectedReboot || r == protocol.EventNodeUpgraded }) {
			t.Errorf("step %d events %v, want none", i, reasons)
		}
		st = d.State
	}
	if st.LastBootID != bootA || st.LastKubelet != "v1.37.0" {
		t.Errorf("last seen %s %s", st.LastBootID, st.LastKubelet)
	}
}

// TestStepTPUNoticeStillOngoingAfterTheStop: a TPU VM (maintenance-event
// not served) is drained when its notice turns ONGOING and stops; after
// the reboot the same notice is still served ONGOING for a while: no second
// drain, no second count. A new maintenance (another window) is one.
func TestStepTPUNoticeStillOngoingAfterTheStop(t *testing.T) {
	served := func(start time.Time) maintenance.Notice {
		raw := `{"maintenance_status":"ONGOING","window_start_time":"` + start.Format(time.RFC3339) + `"}`
		n, _, err := maintenance.ParseNotice(raw)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ongoing := served(window)
	tpu := func(boot string, n *maintenance.Notice) Observation {
		s := with(func(s *Signals) {
			s.EventNotServed, s.EventKnown, s.Event = true, false, ""
			if n != nil {
				s.Notice, s.NoticePresent = *n, true
			}
		})
		return Observation{Now: t0, Signals: s, MachineView: MachineView{BootID: boot}}
	}
	d := stepChecked(t, cfg, State{}, tpu(bootA, &ongoing))
	if d.State.Phase != protocol.PhaseDraining || d.Interruption == nil {
		t.Fatalf("window opens: phase %s, interruption %v; want a drain, counted", d.State.Phase, d.Interruption)
	}
	done := d.State
	done.Phase = protocol.PhaseTerminating
	// Back with another boot ID, the notice still ONGOING.
	d = stepChecked(t, cfg, done, tpu(bootB, &ongoing))
	if d.State.Phase != protocol.PhaseIdle || d.Interruption != nil || !d.Drain.IsZero() {
		t.Errorf("after the reboot, the same notice: phase %s, interruption %v, drain %+v; want idle, nothing counted", d.State.Phase, d.Interruption, d.Drain)
	}
	d = stepChecked(t, cfg, d.State, tpu(bootB, &ongoing))
	if d.State.Phase != protocol.PhaseIdle || d.Interruption != nil {
		t.Errorf("a step later: phase %s, interruption %v; want idle, nothing counted", d.State.Phase, d.Interruption)
	}
	if target := WorkloadTargetOf(d.State, time.Time{}); target.Phase != "" {
		t.Errorf("pods are told %q of a maintenance that is over", target.Phase)
	}
	// The notice goes; a new maintenance later is drained and counted.
	d = stepChecked(t, cfg, d.State, tpu(bootB, nil))
	next := served(window.Add(30 * 24 * time.Hour))
	d = stepChecked(t, cfg, d.State, tpu(bootB, &next))
	if d.State.Phase != protocol.PhaseDraining || d.Interruption == nil {
		t.Errorf("a new maintenance: phase %s, interruption %v; want a drain, counted", d.State.Phase, d.Interruption)
	}
}

// TestStepTheWindowRuleIsTPUs: the window's opening is the host
// maintenance signal of TPU VMs alone. A TPU VM whose maintenance-event
// answers NONE (not 404) is still drained when its window opens: the Node
// says it is a TPU VM. On a GPU VM (maintenance-event served, no TPU), an
// opened window changes nothing of a person's drain under way: it stays
// voluntary, with its own deadline, until TERMINATE_ON_HOST_MAINTENANCE.
func TestStepTheWindowRuleIsTPUs(t *testing.T) {
	n, _, err := maintenance.ParseNotice(`{"maintenance_status":"ONGOING","window_start_time":"` + t0.Add(-time.Minute).Format(time.RFC3339) + `"}`)
	if err != nil {
		t.Fatal(err)
	}
	open := with(func(s *Signals) { s.Notice, s.NoticePresent = n, true })
	tpu := Observation{Now: t0, Signals: open, MachineView: MachineView{BootID: bootA, TPU: true}}
	d := stepChecked(t, cfg, State{}, tpu)
	if d.State.Phase != protocol.PhaseDraining || d.State.Reason != protocol.ReasonHostMaintenance || !d.State.Deadline.Equal(t0.Add(4*time.Minute)) {
		t.Errorf("a TPU VM whose maintenance-event answers NONE, its window open a minute: phase %s, reason %s, deadline %s; want a host maintenance by the window's 5 min",
			d.State.Phase, d.State.Reason, d.State.Deadline)
	}

	// A GPU VM's drain for a maintenance the agent did not start (a
	// restart's) goes on as it was.
	notStarted := draining(protocol.ReasonManual, time.Hour)
	gpu := Observation{Now: t0, Signals: open, MachineView: MachineView{BootID: bootA}}
	d = stepChecked(t, cfg, notStarted, gpu)
	if d.State.Reason != protocol.ReasonManual || !d.State.Deadline.Equal(notStarted.Deadline) || d.Interruption != nil {
		t.Errorf("a GPU VM's manual drain when its window opens: reason %s, deadline %s, interruption %v; want the manual drain going on as it was",
			d.State.Reason, d.State.Deadline, d.Interruption)
	}
	// A person's (or the aggregator's) manual maintenance, not yet asked
	// of Compute Engine: there is nothing left to ask for. It is given up,
	// and says so: the host maintenance's own drain comes with TERMINATE.
	manual := draining(protocol.ReasonManual, time.Hour)
	manual.RequestID = "req-1"
	d = stepChecked(t, cfg, manual, labelled(gpu, "true"))
	if d.State.Phase != protocol.PhaseIdle || d.Interruption != nil || !d.Drain.IsZero() || d.Manual != protocol.ManualNotReschedulable || len(d.Events) == 0 ||
		!strings.Contains(d.Events[0].Message, "window opened") || !strings.Contains(d.Events[0].Message, "TERMINATE_ON_HOST_MAINTENANCE") {
		t.Errorf("a GPU VM's manual maintenance when its window opens: phase %s, interruption %v, drain %+v, outcome %q, events %+v; want it given up, nothing counted, saying the drain comes with TERMINATE",
			d.State.Phase, d.Interruption, d.Drain, d.Manual, d.Events)
	}
	if d.State.Failures.Count != 0 {
		t.Errorf("failures %+v; the window opening is no failure", d.State.Failures)
	}
}

// TestStepNotYetKeepsTheStoppedWindow: after a TPU VM's maintenance, the
// metadata server may answer 503 "no notifications have been received
// yet" for a while, then serve the old ONGOING notice again. "Not yet"
// says nothing of that window: it is still the one that stopped the VM,
// so it is neither drained nor counted again. Only a definite "none"
// forgets it.
func TestStepNotYetKeepsTheStoppedWindow(t *testing.T) {
	n, _, err := maintenance.ParseNotice(`{"maintenance_status":"ONGOING","window_start_time":"` + window.Format(time.RFC3339) + `"}`)
	if err != nil {
		t.Fatal(err)
	}
	tpu := func(notice string) Observation {
		s := with(func(s *Signals) {
			s.EventNotServed, s.EventKnown, s.Event = true, false, ""
			switch notice {
			case "ongoing":
				s.Notice, s.NoticePresent = n, true
			case "not yet":
				s.NoticeNotYet = true
			}
		})
		return Observation{Now: t0, Signals: s, MachineView: MachineView{BootID: bootB}}
	}
	d := stepChecked(t, cfg, State{}, Observation{Now: t0, Signals: tpu("ongoing").Signals, MachineView: MachineView{BootID: bootA}})
	if d.State.Phase != protocol.PhaseDraining || d.Interruption == nil {
		t.Fatalf("window opens: phase %s, interruption %v; want a drain, counted", d.State.Phase, d.Interruption)
	}
	done := d.State
	done.Phase = protocol.PhaseTerminating
	d = stepChecked(t, cfg, done, tpu("ongoing")) // back from the stop
	for i, answer := range []string{"not yet", "not yet", "ongoing", "ongoing"} {
		d = stepChecked(t, cfg, d.State, tpu(answer))
		if d.State.Phase != protocol.PhaseIdle || d.Interruption != nil || !d.Drain.IsZero() {
			t.Fatalf("answer %d (%s) after the stop: phase %s, interruption %v, drain %+v; want idle, nothing counted",
				i, answer, d.State.Phase, d.Interruption, d.Drain)
		}
	}
	// A definite "none": the window is forgotten; served again, it is a
	// maintenance.
	d = stepChecked(t, cfg, d.State, tpu("none"))
	d = stepChecked(t, cfg, d.State, tpu("ongoing"))
	if d.State.Phase != protocol.PhaseDraining || d.Interruption == nil {
		t.Errorf("after a definite none, the window served again: phase %s, interruption %v; want a drain, counted", d.State.Phase, d.Interruption)
	}
}

// TestStepLifecycleEdges: paths a real fleet meets where the state machine
// once went wrong.
func TestStepLifecycleEdges(t *testing.T) {
	ongoing := pending
	ongoing.Status, ongoing.RawStatus = maintenance.StatusOngoing, "ONGOING"
	ongoing = asServed(ongoing)
	refused := &PerformResult{RequestID: "req-1", Err: errors.New("refused (400): already ONGOING"), Outcome: protocol.ManualRefused}
	manualDrained := draining(protocol.ReasonManual, time.Hour)
	manualDrained.RequestID, manualDrained.Requested = "req-1", t0
	terminating := draining(protocol.ReasonHostMaintenance, time.Hour)
	terminating.Phase = protocol.PhaseTerminating

	tests := []struct {
		name  string
		state State
		obs   Observation
		check func(t *testing.T, d Decision)
	}{
		{
			name:  "the 503 body does not end a drain that began on ONGOING",
			state: draining(protocol.ReasonHostMaintenance, time.Hour),
			obs:   obs(with(func(s *Signals) { s.NoticeNotYet = true })),
			check: func(t *testing.T, d Decision) {
				if d.State.Phase != protocol.PhaseDraining || d.Uncordon {
					t.Errorf("phase %s, uncordon %t; want still draining", d.State.Phase, d.Uncordon)
				}
			},
		},
		{
			name:  "{} after ONGOING with the event NONE: withdrawn",
			state: draining(protocol.ReasonHostMaintenance, time.Hour),
			obs:   obs(quiet()),
			check: func(t *testing.T, d Decision) {
				if d.State.Phase != protocol.PhaseIdle {
					t.Errorf("phase %s; want idle", d.State.Phase)
				}
			},
		},
		{
			name:  "a refused call after Compute Engine began: not back in service",
			state: manualDrained,
			obs: func() Observation {
				o := obs(with(func(s *Signals) { s.Event, s.Notice, s.NoticePresent = maintenance.EventTerminate, ongoing, true }))
				o.Perform, o.Trigger, o.TriggerSet = refused, protocol.TriggerValue, true
				return ran(cfg, manualDrained, o)
			}(),
			check: func(t *testing.T, d Decision) {
				if d.State.Phase != protocol.PhaseTerminating || d.Uncordon || d.RemoveTrigger {
					t.Errorf("phase %s, uncordon %t, remove trigger %t; want terminating, cordoned", d.State.Phase, d.Uncordon, d.RemoveTrigger)
				}
			},
		},
		{
			name:  "idle while TERMINATE is served after an earlier manual attempt: drains",
			state: State{Phase: protocol.PhaseIdle, LastEvent: maintenance.EventTerminate},
			obs:   obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate })),
			check: func(t *testing.T, d Decision) {
				if d.State.Phase != protocol.PhaseDraining || !d.Cordon {
					t.Errorf("phase %s, cordon %t; want draining", d.State.Phase, d.Cordon)
				}
			},
		},
		{
			name:  "a reboot and a new maintenance in one step: the agent's cordon is its own",
			state: terminating,
			obs: func() Observation {
				o := obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate }))
				o.BootID, o.Unschedulable = bootB, true
				return o
			}(),
			check: func(t *testing.T, d Decision) {
				if d.State.Phase != protocol.PhaseDraining || d.State.CordonedBefore {
					t.Errorf("phase %s, cordoned before %t; want draining, and the cordon undone after", d.State.Phase, d.State.CordonedBefore)
				}
			},
		},
		{
			name: "a reboot and a new maintenance in one step: a person's cordon stays the person's",
			state: func() State {
				s := terminating
				s.CordonedBefore = true
				return s
			}(),
			obs: func() Observation {
				o := obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate }))
				o.BootID, o.Unschedulable = bootB, true
				return o
			}(),
			check: func(t *testing.T, d Decision) {
				if d.State.Phase != protocol.PhaseDraining || !d.State.CordonedBefore {
					t.Errorf("phase %s, cordoned before %t; want draining, the person's cordon kept", d.State.Phase, d.State.CordonedBefore)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, stepChecked(t, cfg, tc.state, tc.obs)) })
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

// TestStepSlice: the aggregator's ask to drain with the multi-host slice.
func TestStepSlice(t *testing.T) {
	ask := protocol.SliceAsk{Slice: "v5p", Cause: "host-b", Reason: protocol.ReasonPreemption, Started: t0, Deadline: t0.Add(30 * time.Second)}
	asked := func(o Observation) Observation { o.SliceAsk, o.SliceAskSet = ask, true; return o }
	sliceDrain := draining(protocol.ReasonSlice, 30*time.Second)
	sliceDone := sliceDrain
	sliceDone.Phase = protocol.PhaseTerminating
	hostDrain := draining(protocol.ReasonHostMaintenance, time.Hour)
	manualAsk := ask
	manualAsk.Reason = protocol.ReasonManual
	for _, tc := range []struct {
		name  string
		state State
		obs   Observation
		check func(t *testing.T, d Decision)
	}{
		{"idle, asked: drains with the slice by its deadline, not counted as this VM's", State{}, asked(obs(quiet())), func(t *testing.T, d Decision) {
			if d.State.Phase != protocol.PhaseDraining || d.State.Reason != protocol.ReasonSlice || !d.State.Deadline.Equal(ask.Deadline) || !d.Cordon || d.Interruption != nil {
				t.Errorf("state %+v, cordon %t, interruption %v", d.State, d.Cordon, d.Interruption)
			}
			if !d.Drain.Equal(DrainOrder{For: t0, Deadline: ask.Deadline}) {
				t.Errorf("drain %+v, want a forced one by the ask's deadline", d.Drain)
			}
			if len(d.Events) != 1 || d.Events[0].Reason != protocol.EventSliceDrain || !strings.Contains(d.Events[0].Message, "host-b") {
				t.Errorf("events %+v, want one naming host-b", d.Events)
			}
		}},
		{"a manual cause: the slice drains voluntarily", State{}, func() Observation { o := obs(quiet()); o.SliceAsk, o.SliceAskSet = manualAsk, true; return o }(), func(t *testing.T, d Decision) {
			if !d.Drain.Voluntary {
				t.Errorf("drain %+v, want voluntary", d.Drain)
			}
		}},
		{"in its own host maintenance, asked: the earlier deadline", hostDrain, asked(obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate }))), func(t *testing.T, d Decision) {
			if d.State.Reason != protocol.ReasonHostMaintenance || !d.State.Deadline.Equal(ask.Deadline) || len(d.Events) != 1 || d.Events[0].Reason != protocol.EventSliceDeadline {
				t.Errorf("state %+v, events %+v", d.State, d.Events)
			}
		}},
		{"drained for the slice: waits, tainted, for the slice", sliceDrain, ran(cfg, sliceDrain, asked(obs(quiet()))), func(t *testing.T, d Decision) {
			if d.State.Phase != protocol.PhaseTerminating || d.Uncordon {
				t.Errorf("state %+v", d.State)
			}
		}},
		{"the ask withdrawn: back in service", sliceDone, obs(quiet()), func(t *testing.T, d Decision) {
			if d.State.Phase != protocol.PhaseIdle || !d.Uncordon || len(d.Events) != 1 || d.Events[0].Reason != protocol.EventSliceBack {
				t.Errorf("state %+v, uncordon %t, events %+v", d.State, d.Uncordon, d.Events)
			}
		}},
		{"the ask still there, this VM quiet: stays", sliceDone, asked(obs(quiet())), func(t *testing.T, d Decision) {
			if d.State.Phase != protocol.PhaseTerminating {
				t.Errorf("state %+v", d.State)
			}
		}},
		{"draining for the slice, then its own TERMINATE: its own maintenance, counted", sliceDrain, asked(obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate }))), func(t *testing.T, d Decision) {
			if d.State.Reason != protocol.ReasonHostMaintenance || !d.State.Deadline.Equal(ask.Deadline) || d.Interruption == nil {
				t.Errorf("state %+v, interruption %v", d.State, d.Interruption)
			}
		}},
		{"draining for the slice, then preempted itself: counted", sliceDrain, asked(obs(with(func(s *Signals) { s.Preempted = true }))), func(t *testing.T, d Decision) {
			if d.State.Reason != protocol.ReasonPreemption || d.Interruption == nil || *d.Interruption != protocol.Preemption {
				t.Errorf("state %+v, interruption %v", d.State, d.Interruption)
			}
		}},
		{"its own host maintenance after the ask is gone stays until the VM is back", hostDrain, obs(with(func(s *Signals) { s.Event = maintenance.EventTerminate })), func(t *testing.T, d Decision) {
			if d.State.Phase != protocol.PhaseDraining {
				t.Errorf("state %+v", d.State)
			}
		}},
		{"an ask read past its deadline: drained as for a preemption, not in a second", State{},
			func() Observation { o := asked(obs(quiet())); o.Now = ask.Deadline.Add(time.Minute); return o }(), func(t *testing.T, d Decision) {
				now := ask.Deadline.Add(time.Minute)
				if d.State.Phase != protocol.PhaseDraining || !d.State.Deadline.Equal(now.Add(cfg.PreemptionDeadline)) || !strings.Contains(d.Events[0].Message, "has passed") {
					t.Errorf("state %+v, events %+v", d.State, d.Events)
				}
			}},
		{"asked: wakes at the limit of a slice drain", sliceDone, asked(obs(quiet())), func(t *testing.T, d Decision) {
			if !d.WakeAt.Equal(ask.Started.Add(SliceDrainLimit)) {
				t.Errorf("wake at %s", d.WakeAt)
			}
		}},
		{"asked past the limit: back in service, and says the slice is not whole", sliceDone,
			func() Observation {
				o := asked(obs(quiet()))
				o.Now = ask.Started.Add(SliceDrainLimit)
				return o
			}(), func(t *testing.T, d Decision) {
				if d.State.Phase != protocol.PhaseIdle || len(d.Events) != 1 || !d.Events[0].Warning || !strings.Contains(d.Events[0].Message, "not whole") {
					t.Errorf("state %+v, events %+v", d.State, d.Events)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, stepChecked(t, cfg, tc.state, tc.obs)) })
	}
}

// TestStepSliceUnknownHoldsTheCall: a node whose multi-host slice cannot
// be told yet (its TPU chips not registered) is drained for a person's
// maintenance, but does not ask Compute Engine: starting maintenance on
// one host of a slice would stop every host of it. It says why once,
// waits for the Node to say more, and gives up at the deadline; once the
// slice is known, the call goes on.
func TestStepSliceUnknownHoldsTheCall(t *testing.T) {
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	manual := draining(protocol.ReasonManual, time.Hour)
	manual.RequestID = "req-1"
	manual.ScheduledTime, manual.Notice = strconv.FormatInt(window.Unix(), 10), pending
	unknown := func(at time.Time, st State) Observation {
		o := ran(cfg, st, labelled(obs(noticed), "true"))
		o.Now, o.SliceUnknown = at, "its TPU topology 2x2x2 may span several hosts"
		return o
	}
	d := stepChecked(t, cfg, manual, unknown(t0.Add(time.Minute), manual))
	if d.Perform || d.State.Phase != protocol.PhaseDraining || len(d.Events) != 1 || d.Events[0].Reason != protocol.EventSliceUnknown ||
		!strings.Contains(d.Events[0].Message, "2x2x2") || !d.WakeAt.Equal(manual.Deadline) {
		t.Fatalf("drained, slice unknown: perform %t, phase %s, events %+v, wake %s; want no call, one Warning saying why, a wake at the deadline",
			d.Perform, d.State.Phase, d.Events, d.WakeAt)
	}
	held := d.State
	if d = stepChecked(t, cfg, held, unknown(t0.Add(2*time.Minute), held)); d.Perform || len(d.Events) != 0 {
		t.Errorf("still unknown: perform %t, events %+v; want no call, said once", d.Perform, d.Events)
	}
	known := unknown(t0.Add(3*time.Minute), held)
	known.SliceUnknown = ""
	if d = stepChecked(t, cfg, held, known); !d.Perform {
		t.Errorf("the chips registered, a single host: perform %t; want the call", d.Perform)
	}
	if d = stepChecked(t, cfg, held, unknown(manual.Deadline, held)); d.Perform || d.State.Phase != protocol.PhaseIdle || d.Manual != protocol.ManualAbandoned || !d.RemoveTrigger {
		t.Errorf("unknown at the deadline: perform %t, phase %s, outcome %q; want given up, the label removed", d.Perform, d.State.Phase, d.Manual)
	}
}

// TestStepSliceTurnsForced: a host draining for a person's maintenance of
// its slice (budgets holding), whose sibling is then preempted, drains
// with the slice by force: its budget-held pod is deleted in time for its
// grace rather than left for the stop, no failure is recorded, Compute
// Engine is not asked, and nothing says the slice is back while it goes
// down. A host following the slice's voluntary ask turns forced with it.
func TestStepSliceTurnsForced(t *testing.T) {
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	preempted := protocol.SliceAsk{Slice: "v5p", Cause: "host-b", Reason: protocol.ReasonPreemption, Started: t0.Add(10 * time.Minute), Deadline: t0.Add(10*time.Minute + 30*time.Second)}
	inSlice := func(o Observation, caller bool) Observation {
		o.Slice, o.SliceAsk, o.SliceAskSet = "v5p", preempted, true
		o.SliceVoluntary, o.SliceCaller = caller, caller
		return o
	}
	for _, tc := range []struct {
		name   string
		caller bool
	}{{"the caller", true}, {"a second host a person labelled", false}} {
		t.Run(tc.name, func(t *testing.T) {
			manual := draining(protocol.ReasonManual, time.Hour)
			manual.RequestID = "req-1"
			o := inSlice(labelled(obs(noticed), "true"), tc.caller)
			o.Now = t0.Add(10 * time.Minute)
			d := stepChecked(t, cfg, manual, o)
			if d.State.Reason != protocol.ReasonSlice || d.Drain.IsZero() || d.Drain.Voluntary || !d.Drain.Deadline.Equal(preempted.Deadline) {
				t.Fatalf("sibling preempted: reason %s, drain %+v; want the slice's forced drain by its deadline", d.State.Reason, d.Drain)
			}
			// The forced drain ends at the deadline with a pod still terminating.
			at := ran(cfg, d.State, inSlice(labelled(obs(noticed), "true"), false))
			at.Now, at.DrainLeft = preempted.Deadline, []string{"ml/held-0"}
			d = stepChecked(t, cfg, d.State, at)
			if d.State.Phase != protocol.PhaseTerminating || d.Manual != "" || d.State.Failures.Count != 0 || d.Perform || d.Uncordon {
				t.Errorf("at the deadline: phase %s, outcome %q, failures %+v, perform %t, uncordon %t; want terminating with the slice, no failure, no call",
					d.State.Phase, d.Manual, d.State.Failures, d.Perform, d.Uncordon)
			}
			for _, e := range d.Events {
				if strings.Contains(e.Message, "back in service") {
					t.Errorf("event %q while the slice goes down", e.Message)
				}
			}
		})
	}
	follower := draining(protocol.ReasonSlice, time.Hour)
	o := inSlice(obs(quiet()), false)
	d := stepChecked(t, cfg, follower, o)
	if d.Drain.IsZero() || d.Drain.Voluntary {
		t.Errorf("a follower whose slice's cause is preempted: drain %+v; want forced", d.Drain)
	}
}

// TestStepSliceCallsOnce: a voluntary maintenance of a multi-host slice
// asks Compute Engine once, from its caller, after every other host is
// drained; a drain that cannot finish on one host gives it up on every
// host; the maintenance that begins on every host is the slice's, counted
// by the caller alone.
func TestStepSliceCallsOnce(t *testing.T) {
	manual := draining(protocol.ReasonManual, time.Hour)
	manual.RequestID = "req-1"
	inSlice := func(o Observation, caller bool, waiting, incomplete []string) Observation {
		o.Slice, o.SliceVoluntary, o.SliceCaller, o.SliceWaiting, o.SliceIncomplete = "v5p", true, caller, waiting, incomplete
		return o
	}
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	manual.ScheduledTime, manual.Notice = strconv.FormatInt(window.Unix(), 10), pending
	drained := func(o Observation) Observation { return ran(cfg, manual, o) }
	manualAsk := protocol.SliceAsk{Slice: "v5p", Cause: "host-a", Reason: protocol.ReasonManual, Started: t0, Deadline: t0.Add(time.Hour)}
	follower := draining(protocol.ReasonSlice, time.Hour)
	following := func(o Observation) Observation {
		o.SliceAsk, o.SliceAskSet = manualAsk, true
		return inSlice(o, false, nil, nil)
	}
	ongoing := with(func(s *Signals) {
		s.Notice, s.NoticePresent = pending, true
		s.Notice.Status, s.Notice.WindowStart = maintenance.StatusOngoing, t0
		s.EventNotServed = true
	})
	for _, tc := range []struct {
		name  string
		state State
		obs   Observation
		check func(t *testing.T, d Decision)
	}{
		{"the caller, drained, another host still draining: waits, no call", manual, drained(inSlice(obs(noticed), true, []string{"host-b"}, nil)), func(t *testing.T, d Decision) {
			if d.Perform || d.State.Phase != protocol.PhaseDraining || d.State.Drain != protocol.DrainDone || !d.WakeAt.Equal(manual.Deadline) {
				t.Errorf("perform %t, state %+v, wake %s", d.Perform, d.State, d.WakeAt)
			}
		}},
		{"the caller, every host drained: asks, once", manual, drained(inSlice(obs(noticed), true, nil, nil)), func(t *testing.T, d Decision) {
			if !d.Perform || d.State.Requested.IsZero() {
				t.Errorf("perform %t, state %+v", d.Perform, d.State)
			}
		}},
		{"the caller, another host still draining at the deadline: given up on every host", manual,
			func() Observation {
				o := drained(inSlice(obs(noticed), true, []string{"host-b"}, nil))
				o.Now = manual.Deadline
				return o
			}(), func(t *testing.T, d Decision) {
				if d.Perform || d.State.Phase != protocol.PhaseIdle || d.Manual != protocol.ManualAbandoned || !d.RemoveTrigger || !strings.Contains(d.Events[0].Message, "host-b") {
					t.Errorf("perform %t, state %+v, manual %q, events %+v", d.Perform, d.State, d.Manual, d.Events)
				}
			}},
		{"the caller, a host's drain incomplete: given up at once, drained or not", manual, inSlice(obs(noticed), true, nil, []string{"host-c"}), func(t *testing.T, d Decision) {
			if d.State.Phase != protocol.PhaseIdle || d.Manual != protocol.ManualAbandoned || !strings.Contains(d.Events[0].Message, "given up on every host") {
				t.Errorf("state %+v, manual %q, events %+v", d.State, d.Manual, d.Events)
			}
		}},
		{"a second asked host: drains, never calls", manual, drained(inSlice(obs(noticed), false, nil, nil)), func(t *testing.T, d Decision) {
			if d.Perform || d.State.Phase != protocol.PhaseDraining || d.State.Drain != protocol.DrainDone {
				t.Errorf("perform %t, state %+v", d.Perform, d.State)
			}
		}},
		{"a follower whose voluntary drain left pods: says so, and stays", follower,
			func() Observation {
				o := ran(cfg, follower, following(obs(quiet())))
				o.DrainLeft = []string{"ns/held"}
				return o
			}(), func(t *testing.T, d Decision) {
				if d.State.Phase != protocol.PhaseDraining || d.State.Drain != protocol.DrainIncomplete || len(d.Events) != 1 || !strings.Contains(d.Events[0].Message, "ns/held") || !d.Drain.IsZero() {
					t.Errorf("state %+v, events %+v, drain %+v", d.State, d.Events, d.Drain)
				}
			}},
		{"a follower drained: terminating", follower, ran(cfg, follower, following(obs(quiet()))), func(t *testing.T, d Decision) {
			if d.State.Phase != protocol.PhaseTerminating || len(d.Events) != 1 || d.Events[0].Message != "All pods were stopped; the host waits for its multi-host slice to come back" {
				t.Errorf("state %+v, events %+v", d.State, d.Events)
			}
		}},
		{"the slice's maintenance begins on a follower: its own, not counted, marked the slice's voluntary one", func() State { s := follower; s.Phase = protocol.PhaseTerminating; return s }(), following(obs(ongoing)), func(t *testing.T, d Decision) {
			if d.State.Reason != protocol.ReasonHostMaintenance || d.Interruption != nil || !d.State.Begun || !strings.Contains(d.Events[0].Message, "maintenance of the multi-host slice v5p") {
				t.Errorf("state %+v, interruption %v, events %+v", d.State, d.Interruption, d.Events)
			}
		}},
		{"a host maintenance of a host of a slice nobody asked for: counted", func() State { s := follower; s.Phase = protocol.PhaseTerminating; return s }(),
			func() Observation { o := following(obs(ongoing)); o.SliceVoluntary = false; return o }(), func(t *testing.T, d Decision) {
				if d.Interruption == nil || *d.Interruption != protocol.HostMaintenance {
					t.Errorf("interruption %v", d.Interruption)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, stepChecked(t, cfg, tc.state, tc.obs)) })
	}
}

// TestStepDeadlineFromThePlatform: the drain's deadline counts the
// platform's notice from when the signal appeared, as far as the agent can
// know it, never from when the agent happened to see it; a deadline already
// past is what a preemption gets.
func TestStepDeadlineFromThePlatform(t *testing.T) {
	now := t0
	ongoingAt := func(opened, closes time.Time) maintenance.Notice {
		n := pending
		n.Status, n.RawStatus, n.CanReschedule, n.WindowStart, n.WindowEnd = maintenance.StatusOngoing, "ONGOING", false, opened, closes
		return asServed(n)
	}
	for _, tc := range []struct {
		name     string
		sig      Signals
		deadline time.Time
		says     string
	}{
		{"TERMINATE seen as it came: 60 min from then",
			with(func(s *Signals) { s.Event, s.EventSince = maintenance.EventTerminate, now.Add(-200*time.Millisecond) }),
			now.Add(time.Hour - 200*time.Millisecond), "draining before 2026-11-22T10:59:59Z"},
		{"TERMINATE after 20 min of metadata errors: 60 min from the last NONE",
			with(func(s *Signals) { s.Event, s.EventSince = maintenance.EventTerminate, now.Add(-20*time.Minute) }),
			now.Add(40 * time.Minute), "the signal came at 2026-11-22T09:40:00Z or later (the agent was not watching then), and its notice of 1h0m0s counts from then"},
		{"TERMINATE seen by an agent that just started, nothing else known: 60 min from now, said",
			with(func(s *Signals) { s.Event = maintenance.EventTerminate }),
			now.Add(time.Hour), "the agent did not see the signal appear, so its notice counts from now"},
		{"TERMINATE seen by an agent that just started, the window open for 45 min: it came inside the window",
			with(func(s *Signals) {
				s.Event = maintenance.EventTerminate
				s.Notice, s.NoticePresent = ongoingAt(now.Add(-45*time.Minute), now.Add(3*time.Hour)), true
			}),
			now.Add(15 * time.Minute), "the signal came at 2026-11-22T09:15:00Z or later"},
		{"TERMINATE seen first 3 h into an open window: it may have come more than 60 min ago, drained as for a preemption",
			with(func(s *Signals) {
				s.Event = maintenance.EventTerminate
				s.Notice, s.NoticePresent = ongoingAt(now.Add(-3*time.Hour), now.Add(time.Hour)), true
			}),
			now.Add(30 * time.Second), "the signal came at 2026-11-22T07:00:00Z or later (the agent was not watching then), more than its notice of 1h0m0s ago, so the VM may stop at any moment"},
		{"TERMINATE after 61 min of metadata errors: drained as for a preemption",
			with(func(s *Signals) { s.Event, s.EventSince = maintenance.EventTerminate, now.Add(-61*time.Minute) }),
			now.Add(30 * time.Second), "the signal came at 2026-11-22T08:59:00Z or later (the agent was not watching then), more than its notice of 1h0m0s ago, so the VM may stop at any moment"},
		{"TERMINATE in a window that closes in 10 min: its close",
			with(func(s *Signals) {
				s.Event, s.EventSince = maintenance.EventTerminate, now
				s.Notice, s.NoticePresent = ongoingAt(now.Add(-time.Hour), now.Add(10*time.Minute)), true
			}),
			now.Add(10 * time.Minute), "the maintenance window closes then"},
		{"TERMINATE in a window whose end passed: the end says nothing",
			with(func(s *Signals) {
				s.Event, s.EventSince = maintenance.EventTerminate, now
				s.Notice, s.NoticePresent = ongoingAt(now.Add(-3*time.Hour), now.Add(-time.Minute)), true
			}),
			now.Add(time.Hour), "draining before 2026-11-22T11:00:00Z"},
		{"TPU: the window opened 2 min ago: 5 min from its opening",
			with(func(s *Signals) {
				s.EventNotServed = true
				s.Notice, s.NoticePresent = ongoingAt(now.Add(-2*time.Minute), now.Add(time.Hour)), true
			}),
			now.Add(3 * time.Minute), "the window opened at 2026-11-22T09:58:00Z, and the 5m0s the VM is given counts from then"},
		{"TPU: the window opened 10 min ago: past the estimate, drained as for a preemption",
			with(func(s *Signals) {
				s.EventNotServed = true
				s.Notice, s.NoticePresent = ongoingAt(now.Add(-10*time.Minute), now.Add(time.Hour)), true
			}),
			now.Add(30 * time.Second), "the VM outlived the 5m0s the platform gives from 2026-11-22T09:50:00Z, so it may stop at any moment: drained as for a preemption"},
		{"preempted 20 s after the last FALSE, seen late: 10 s left",
			with(func(s *Signals) { s.Preempted, s.PreemptedSince = true, now.Add(-20*time.Second) }),
			now.Add(10 * time.Second), "the signal came at 2026-11-22T09:59:40Z or later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := stepChecked(t, cfg, State{}, Observation{Now: now, Signals: tc.sig, MachineView: MachineView{BootID: bootA}})
			if d.State.Phase != protocol.PhaseDraining || !d.State.Deadline.Equal(tc.deadline) || !d.Drain.Deadline.Equal(tc.deadline) {
				t.Errorf("phase %s, deadline %s, drain's %s; want draining by %s", d.State.Phase, d.State.Deadline, d.Drain.Deadline, tc.deadline)
			}
			if len(d.Events) != 1 || !strings.Contains(d.Events[0].Message, tc.says) {
				t.Errorf("events %+v, want one saying %q", d.Events, tc.says)
			}
		})
	}
	// The keys answer in any order: the window read after TERMINATE moves
	// the deadline of the drain under way earlier, once.
	t.Run("the open window read after TERMINATE: the deadline moves earlier", func(t *testing.T) {
		first := stepChecked(t, cfg, State{}, Observation{Now: now, Signals: with(func(s *Signals) { s.Event = maintenance.EventTerminate }), MachineView: MachineView{BootID: bootA}})
		later := Observation{
			Now: now.Add(time.Second),
			Signals: with(func(s *Signals) {
				s.Event = maintenance.EventTerminate
				s.Notice, s.NoticePresent = ongoingAt(now.Add(-59*time.Minute), now.Add(3*time.Hour)), true
			}),
			MachineView: MachineView{BootID: bootA},
		}
		d := stepChecked(t, cfg, first.State, later)
		if want := now.Add(time.Minute); !d.State.Deadline.Equal(want) || !d.Drain.Deadline.Equal(want) || len(d.Events) != 1 {
			t.Errorf("deadline %s, drain's %s, events %+v; want both %s, said once", d.State.Deadline, d.Drain.Deadline, d.Events, want)
		}
		if again := stepChecked(t, cfg, d.State, later); !again.State.Deadline.Equal(d.State.Deadline) || len(again.Events) != 0 {
			t.Errorf("stepped again: deadline %s, events %+v; want no change", again.State.Deadline, again.Events)
		}
	})
}

// TestStepLeavesToGKE: where GKE's own handler is seen handling the node,
// a maintenance is left to it: no drain, cordon or call; counted once; over
// when the VM comes back or GKE's handler lets go; --gke-handler=ignore
// handles it as ever.
func TestStepLeavesToGKE(t *testing.T) {
	const gke = "label cloud.google.com/active-node-maintenance=passthrough"
	terminate := with(func(s *Signals) {
		s.Event, s.EventSince = maintenance.EventTerminate, t0
		s.Notice, s.NoticePresent = pending, true
	})
	noticed := with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })
	leftManual := manualDraining()
	leftManual.LeftToGKE = true

	t.Run("TERMINATE while GKE's handler handles the node: recorded and counted, nothing drained", func(t *testing.T) {
		o := obs(terminate)
		o.GKEHandling = gke
		d := stepChecked(t, cfg, State{}, o)
		if d.State.Phase != protocol.PhaseDraining || !d.State.LeftToGKE || d.Cordon || !d.Drain.IsZero() || !d.State.CordonedBefore {
			t.Errorf("state %+v, cordon %t, drain %+v: want draining, left to GKE, no cordon, no drain, not the agent's to uncordon", d.State, d.Cordon, d.Drain)
		}
		said := slices.ContainsFunc(d.Events, func(e EventRecord) bool {
			return e.Reason == protocol.EventLeftToGKE && strings.Contains(e.Message, gke)
		})
		if d.Interruption == nil || !said {
			t.Errorf("interruption %v, events %+v: want it counted and the hand-over said", d.Interruption, d.Events)
		}
	})
	t.Run("--gke-handler=ignore: drained as ever", func(t *testing.T) {
		o := obs(terminate)
		o.GKEHandling = gke
		c := cfg
		c.IgnoreGKEHandler = true
		if d := stepChecked(t, c, State{}, o); d.State.LeftToGKE || !d.Cordon || d.Drain.IsZero() {
			t.Errorf("state %+v, cordon %t, drain %+v: want the agent's own drain", d.State, d.Cordon, d.Drain)
		}
	})
	t.Run("GKE 1.33 or later drains host maintenance itself: left to it from TERMINATE, before it writes anything", func(t *testing.T) {
		o := obs(terminate)
		o.GKEHostMaintenance = true
		d := stepChecked(t, cfg, State{}, o)
		if !d.State.LeftToGKE || d.Cordon || !d.Drain.IsZero() || d.Interruption == nil || !slices.ContainsFunc(d.Events, func(e EventRecord) bool {
			return e.Reason == protocol.EventLeftToGKE && strings.Contains(e.Message, "1.33 or later")
		}) {
			t.Errorf("decision %+v: want it left to GKE's handler, said why, counted, no cordon, no drain", d)
		}
		c := cfg
		c.IgnoreGKEHandler = true
		if d := stepChecked(t, c, State{}, o); d.State.LeftToGKE || !d.Cordon || d.Drain.IsZero() {
			t.Errorf("--gke-handler=ignore: decision %+v: want the agent's own drain", d)
		}
	})
	t.Run("GKE 1.33 or later: a person's maintenance is still the agent's until GKE's handler shows it handles it", func(t *testing.T) {
		o := labelled(obs(noticed), "true")
		o.GKEHostMaintenance = true
		if d := stepChecked(t, cfg, State{}, o); d.State.LeftToGKE || !d.Cordon || d.Drain.IsZero() {
			t.Errorf("decision %+v: want the agent's own drain", d)
		}
	})
	t.Run("GKE's handler takes over a manual drain: the drain stops, Compute Engine is not asked", func(t *testing.T) {
		o := labelled(obs(noticed), "true")
		o.GKEHandling = gke
		d := stepChecked(t, cfg, manualDraining(), ran(cfg, manualDraining(), o))
		if !d.State.LeftToGKE || d.Perform || !d.Drain.IsZero() || d.RemoveTrigger || d.Uncordon || d.State.CordonedBefore {
			t.Errorf("decision %+v: want it left to GKE, no call, no drain, the label left to GKE, the agent's cordon its own to undo", d)
		}
	})
	t.Run("left to GKE, then the VM stops for it: the manual maintenance is counted", func(t *testing.T) {
		o := labelled(obs(noticed), "true")
		o.BootID = bootB
		d := stepChecked(t, cfg, leftManual, o)
		if d.State.Phase != protocol.PhaseIdle || d.Interruption == nil || *d.Interruption != *countedAs(protocol.ReasonManual) || !d.Uncordon {
			t.Errorf("decision %+v: want it counted as manual, back in service", d)
		}
	})
	t.Run("left to GKE, and GKE's handler lets go with nothing under way: back in service, nothing counted", func(t *testing.T) {
		d := stepChecked(t, cfg, leftManual, obs(noticed))
		if d.State.Phase != protocol.PhaseIdle || d.Interruption != nil || d.Manual != "" || d.State.Failures.Count != 0 {
			t.Errorf("decision %+v: want back in service, no count, no failure", d)
		}
	})
	t.Run("left to GKE, GKE's handler still on it: nothing changes", func(t *testing.T) {
		o := labelled(obs(noticed), "true")
		o.GKEHandling = gke
		if d := stepChecked(t, cfg, leftManual, o); d.State.Phase != protocol.PhaseDraining || !d.State.LeftToGKE || len(d.Events) != 0 || d.Perform {
			t.Errorf("decision %+v: want nothing to change", d)
		}
	})
}

// TestStepLeavesANoticeItDidNotMirror: GKE's handler mirrors the notice on
// the same keys; an agent whose VM reports none (404, or 503 "not yet")
// neither removes GKE's nor says a maintenance was cancelled; a notice of
// its own replaces GKE's, and is the agent's to remove.
func TestStepLeavesANoticeItDidNotMirror(t *testing.T) {
	gke := State{Phase: protocol.PhaseIdle, ScheduledTime: "1796151600", Notice: protocol.ReadNotice(`{"gke":true}`), NoticeForeign: true, LastEvent: maintenance.EventNone}
	for _, absent := range []Signals{quiet(), with(func(s *Signals) { s.NoticeNotYet = true })} {
		if d := stepChecked(t, cfg, gke, obs(absent)); !cmp.Equal(d.State, gke, ignoreAccounting) || len(d.Events) != 0 {
			t.Errorf("no notice of its own (not yet: %t): state %+v, events %+v; want GKE's notice left, nothing said", absent.NoticeNotYet, d.State, d.Events)
		}
	}
	d := stepChecked(t, cfg, gke, obs(with(func(s *Signals) { s.Notice, s.NoticePresent = pending, true })))
	if d.State.NoticeForeign || !cmp.Equal(d.State.Notice, pending) || len(d.Events) != 1 || d.Events[0].Reason != protocol.EventMaintenanceScheduled {
		t.Errorf("its own notice: state %+v, events %+v; want the agent's mirror, said", d.State, d.Events)
	}
	if d := stepChecked(t, cfg, d.State, obs(quiet())); d.State.Notice.Raw != "" || len(d.Events) != 1 || d.Events[0].Reason != protocol.EventMaintenanceCancelled {
		t.Errorf("its own notice gone: state %+v, events %+v; want it removed, said", d.State, d.Events)
	}
}

// parsedNotice is the notice raw says, as the metadata server would serve
// it; raw must parse.
func parsedNotice(raw string) maintenance.Notice {
	n, present, err := maintenance.ParseNotice(raw)
	if err != nil || !present {
		panic(fmt.Sprintf("the test's notice %s: present %t, %v", raw, present, err))
	}
	return n
}

// asServed is n as the metadata server serves it: its Raw is the JSON of
// its fields (a test that changes a field of a notice changes what the
// agent mirrors), parsed again.
func asServed(n maintenance.Notice) maintenance.Notice {
	status := string(n.Status)
	if n.Status == maintenance.StatusUnknown {
		status = n.RawStatus
	}
	w := map[string]any{"type": n.Type, "maintenance_status": status, "can_reschedule": n.CanReschedule,
		"window_start_time": n.WindowStart.UTC().Format(time.RFC3339)}
	for key, t := range map[string]time.Time{"window_end_time": n.WindowEnd, "latest_window_start_time": n.LatestStart} {
		if !t.IsZero() {
			w[key] = t.UTC().Format(time.RFC3339)
		}
	}
	if n.Reasons != nil {
		w["maintenance_reasons"] = n.Reasons
	}
	raw, err := json.Marshal(w)
	if err != nil {
		panic(err)
	}
	return parsedNotice(string(raw))
}

// withNotice is d with the notice n mirrored in its state.
func withNotice(d Decision, n maintenance.Notice) Decision {
	d.State.Notice = n
	return d
}
