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
	if op, ok := strings.CutPrefix(how, "operation "); ok {
		s.Call = protocol.Call{RequestID: s.RequestID, Method: protocol.RepairPerformMaintenance, Requested: s.Requested, Operation: op}
	}
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
