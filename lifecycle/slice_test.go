package lifecycle

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

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
