package fleet

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestNodeSteps: each change of a Node tells the steps it went through,
// in order, and nothing else.
func TestNodeSteps(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	nodeIn := func(st protocol.AgentState) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}}
		protocol.WriteAgentState(n, st)
		return n
	}
	idle := protocol.AgentState{Phase: protocol.PhaseIdle}
	scheduled := idle
	scheduled.ScheduledTime = "1796000000"
	draining := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, Started: t0, Deadline: t0.Add(time.Hour)}
	terminating := draining
	terminating.Phase = protocol.PhaseTerminating
	manual := draining
	manual.Reason = protocol.ReasonManual
	failed := idle
	failed.Failures = protocol.Failures{Count: 1, Reason: protocol.ManualAbandoned, Last: t0}
	ending := idle
	ending.KnownEnd = t0.Add(3 * time.Hour)
	for _, tc := range []struct {
		name     string
		from, to protocol.AgentState
		first    bool
		want     []Step
		wantRsn  string
	}{
		{name: "first seen", to: draining, first: true},
		{name: "scheduled", from: idle, to: scheduled, want: []Step{StepScheduled}},
		{name: "a known end", from: idle, to: ending, want: []Step{StepScheduled}, wantRsn: string(protocol.ReasonKnownEnd)},
		{name: "draining", from: scheduled, to: draining, want: []Step{StepDraining}, wantRsn: string(protocol.ReasonHostMaintenance)},
		{name: "drained", from: draining, to: terminating, want: []Step{StepInMaintenance}},
		{name: "drained in one change", from: idle, to: terminating, want: []Step{StepDraining, StepInMaintenance}},
		{name: "back", from: terminating, to: idle, want: []Step{StepBack}},
		{name: "failed", from: manual, to: failed, want: []Step{StepFailed}, wantRsn: protocol.ManualAbandoned},
		{name: "nothing new", from: draining, to: draining},
	} {
		var old *corev1.Node
		if !tc.first {
			old = nodeIn(tc.from)
		}
		got := NodeSteps(old, nodeIn(tc.to), "a3", "", t0)
		var steps []Step
		for _, n := range got {
			steps = append(steps, n.Step)
		}
		if len(steps) != len(tc.want) {
			t.Errorf("%s: told %v (%+v); want %v", tc.name, steps, got, tc.want)
			continue
		}
		for i := range steps {
			if steps[i] != tc.want[i] || got[i].Node != "gpu-0" || got[i].Pool != "a3" || got[i].Message == "" {
				t.Errorf("%s: told %+v; want %v", tc.name, got, tc.want)
			}
		}
		if tc.wantRsn != "" && got[0].Reason != tc.wantRsn {
			t.Errorf("%s: reason %q; want %q", tc.name, got[0].Reason, tc.wantRsn)
		}
	}
}

// TestGroupSteps: a group is told draining when its first host drains,
// and back when its last host is back; nothing for a host of no group.
func TestGroupSteps(t *testing.T) {
	g := Groups{}
	step := func(node string, s Step) []Step {
		var out []Step
		for _, n := range g.Step(Notification{Node: node, Group: "v5p-a", Step: s, Reason: "preemption"}) {
			if n.Group != "v5p-a" || n.Node != "" {
				t.Errorf("group message %+v", n)
			}
			out = append(out, n.Step)
		}
		return out
	}
	for _, tc := range []struct {
		node string
		step Step
		want []Step
	}{
		{"h0", StepDraining, []Step{StepDraining}},
		{"h1", StepDraining, nil},
		{"h1", StepInMaintenance, nil},
		{"h0", StepBack, nil},
		{"h2", StepBack, nil}, // never drained: not the group's
		{"h1", StepFailed, []Step{StepBack}},
		{"h3", StepDraining, []Step{StepDraining}},
	} {
		if got := step(tc.node, tc.step); len(got) != len(tc.want) || len(got) > 0 && got[0] != tc.want[0] {
			t.Errorf("%s %s: group told %v; want %v", tc.node, tc.step, got, tc.want)
		}
	}
	if got := g.Step(Notification{Node: "solo", Step: StepDraining}); got != nil {
		t.Errorf("a host of no group: %v", got)
	}
}

// TestGroupGone: a host deleted while in maintenance no longer holds its
// group down; the last one tells the group back.
func TestGroupGone(t *testing.T) {
	g := Groups{}
	when := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	g.Step(Notification{Node: "h0", Group: "v5p-a", Step: StepDraining, Reason: "preemption"})
	g.Step(Notification{Node: "h1", Group: "v5p-a", Step: StepDraining, Reason: "preemption"})
	if got := g.Gone("h9", "v5p-a", "v5p", when); got != nil {
		t.Errorf("a host not in maintenance deleted: %v; want nothing", got)
	}
	if got := g.Gone("h0", "v5p-a", "v5p", when); got != nil {
		t.Errorf("one of two hosts deleted: %v; want nothing", got)
	}
	got := g.Gone("h1", "v5p-a", "v5p", when)
	if len(got) != 1 || got[0].Step != StepBack || got[0].Group != "v5p-a" || got[0].Pool != "v5p" || !got[0].When.Equal(when) || got[0].Node != "" {
		t.Fatalf("the last host deleted: %+v; want the group told back", got)
	}
	if len(g) != 0 {
		t.Errorf("groups left %v; want none", g)
	}
	if got := g.Step(Notification{Node: "h2", Group: "v5p-a", Step: StepDraining}); len(got) != 1 || got[0].Step != StepDraining {
		t.Errorf("a host draining after: %+v; want the group told down again", got)
	}
}
