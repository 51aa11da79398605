package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

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
