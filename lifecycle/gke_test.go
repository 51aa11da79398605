package lifecycle

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestMaintenanceLeftToGKE: while a maintenance is left to GKE's handler,
// the agent writes neither the active-maintenance label nor the taint, and
// back in service it removes neither; GKEHandling tells GKE's keys from the
// agent's own.
func TestMaintenanceLeftToGKE(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{protocol.LabelActiveMaintenance: "passthrough"}}}
	n.Spec.Taints = []corev1.Taint{{Key: protocol.TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule}}
	if got := GKEHandling(n, protocol.AgentState{Phase: protocol.PhaseIdle}); got != "label "+protocol.LabelActiveMaintenance+"=passthrough" {
		t.Errorf("idle agent, GKE's label: GKEHandling %q", got)
	}
	if got := GKEHandling(n, protocol.AgentState{Phase: protocol.PhaseDraining}); got == "" {
		t.Error("draining agent, GKE's passthrough over its ONGOING: not seen")
	}
	left := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, LeftToGKE: true}
	protocol.WriteAgentState(n, left)
	if n.Labels[protocol.LabelActiveMaintenance] != "passthrough" || !protocol.HasTaint(n) || !protocol.ReadAgentState(n).LeftToGKE {
		t.Errorf("left to GKE: labels %v, taints %v, state %+v", n.Labels, n.Spec.Taints, protocol.ReadAgentState(n))
	}
	protocol.WriteAgentState(n, protocol.AgentState{Phase: protocol.PhaseIdle})
	if n.Labels[protocol.LabelActiveMaintenance] != "passthrough" || !protocol.HasTaint(n) || n.Annotations[protocol.AnnotationLeftToGKE] != "" {
		t.Errorf("back from a maintenance left to GKE, the agent removed GKE's keys: labels %v, taints %v, annotations %v", n.Labels, n.Spec.Taints, n.Annotations)
	}
	ours := &corev1.Node{}
	protocol.WriteAgentState(ours, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance})
	if got := GKEHandling(ours, protocol.ReadAgentState(ours)); got != "" {
		t.Errorf("the agent's own maintenance taken for GKE's: %q", got)
	}
	ours.Spec.Taints = append(ours.Spec.Taints, corev1.Taint{Key: protocol.TaintMaintenanceWindowStarted, Effect: corev1.TaintEffectPreferNoSchedule})
	if got := GKEHandling(ours, protocol.ReadAgentState(ours)); got != "taint "+protocol.TaintMaintenanceWindowStarted {
		t.Errorf("GKE's window taint: GKEHandling %q", got)
	}
	// GKE's handler writing the very value the agent writes: only its
	// field manager tells.
	same := &corev1.Node{}
	protocol.WriteAgentState(same, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance})
	same.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: protocol.FieldManagerGKE, Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:` + protocol.LabelActiveMaintenance + `":{}}}}`)}}
	if got := GKEHandling(same, protocol.ReadAgentState(same)); got == "" {
		t.Error("GKE's handler wrote the agent's own value: not seen")
	}
}

// TestGKEHandlesHostMaintenance: GKE's kubelets of 1.33 and later run a
// handler that drains host maintenance itself; others do not.
func TestGKEHandlesHostMaintenance(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.33.2-gke.1240000": true, "v1.34.0-gke.100": true, "v2.0.0-gke.1": true,
		"v1.32.4-gke.1000": false, "v1.33.2": false, "1.33.2-gke.1": false, "v1.x-gke.1": false, "": false,
	} {
		if got := GKEHandlesHostMaintenance(v); got != want {
			t.Errorf("GKEHandlesHostMaintenance(%q) = %t, want %t", v, got, want)
		}
	}
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

// TestGKEWritesEvents: GKE's kubelets of 1.35 and later run a handler that
// writes the node's host maintenance Events; there the agent's Events of
// the same reasons are logged, not recorded, and its others are recorded
// as ever. Elsewhere every Event is recorded.
func TestGKEWritesEvents(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.35.0-gke.2232000": true, "v1.37.1-gke.100": true,
		"v1.34.9-gke.1000": false, "v1.35.0": false, "": false,
	} {
		if got := GKEWritesEvents(v); got != want {
			t.Errorf("GKEWritesEvents(%q) = %t, want %t", v, got, want)
		}
	}
	terminate := with(func(s *Signals) {
		s.Event, s.EventSince = maintenance.EventTerminate, t0
		s.Notice, s.NoticePresent = pending, true
	})
	preempted := with(func(s *Signals) { s.Preempted = true })
	for _, gke := range []bool{false, true} {
		o := obs(terminate)
		o.GKEWritesEvents = gke
		c := cfg
		c.IgnoreGKEHandler = true // the agent drains: GKE's handler still writes its Events
		d := stepChecked(t, c, State{}, o)
		var left, recorded []string
		for _, e := range d.Events {
			if e.GKEWrites {
				left = append(left, e.Reason)
			} else {
				recorded = append(recorded, e.Reason)
			}
		}
		want := []string{protocol.EventTerminateOnHost, protocol.EventMaintenanceScheduled}
		if !gke && (len(left) > 0 || !slices.Equal(recorded, want)) || gke && (!slices.Equal(left, want) || len(recorded) > 0) {
			t.Errorf("GKE writes Events %t: left to GKE %v, recorded %v; want %v one or the other", gke, left, recorded, want)
		}
		o = obs(preempted)
		o.GKEWritesEvents = gke
		d = stepChecked(t, c, State{}, o)
		if len(d.Events) == 0 || slices.ContainsFunc(d.Events, func(e EventRecord) bool { return e.GKEWrites }) {
			t.Errorf("GKE writes Events %t, a preemption: %+v; want the agent's own Events recorded", gke, d.Events)
		}
	}
}
