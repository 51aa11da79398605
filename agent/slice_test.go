package agent

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/kubetest"
)

// TestFollowedAsk: a host follows its own reading of its slice or the
// aggregator's ask, the earlier deadline; the aggregator's is stale once
// its cause has no maintenance of that start under way.
func TestFollowedAsk(t *testing.T) {
	deadline := t0.Add(30 * time.Second)
	preempted := protocol.SliceHost{Name: "h1", Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: t0, Deadline: deadline}
	back := protocol.SliceHost{Name: "h1", Phase: protocol.PhaseIdle}
	own := &protocol.SliceAsk{Slice: "s", Cause: "h1", Reason: protocol.ReasonPreemption, Started: t0, Deadline: deadline}
	written := *own
	later := written
	later.Deadline = deadline.Add(time.Minute)
	gone := protocol.SliceAsk{Slice: "s", Cause: "h9", Reason: protocol.ReasonPreemption, Started: t0, Deadline: deadline.Add(-10 * time.Second)}
	for _, tc := range []struct {
		name    string
		own     *protocol.SliceAsk
		written protocol.SliceAsk
		set     bool
		hosts   []protocol.SliceHost
		want    *protocol.SliceAsk
	}{
		{"no aggregator: its own reading", own, protocol.SliceAsk{}, false, []protocol.SliceHost{preempted}, own},
		{"both, the aggregator's later: its own", own, later, true, []protocol.SliceHost{preempted}, own},
		{"the cause back, the aggregator's ask not yet withdrawn: none", nil, written, true, []protocol.SliceHost{back}, nil},
		{"the cause's Node gone (deleted): the aggregator's, earlier", own, gone, true, []protocol.SliceHost{preempted}, &gone},
		{"a new maintenance of the cause: the old ask is stale", nil, written, true, []protocol.SliceHost{{Name: "h1", Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, Started: t0.Add(time.Hour), Deadline: t0.Add(2 * time.Hour)}}, nil},
	} {
		got, ok := followedAsk(tc.own, tc.written, tc.set, tc.hosts)
		if ok != (tc.want != nil) || ok && got != *tc.want {
			t.Errorf("%s: %+v (%t), want %+v", tc.name, got, ok, tc.want)
		}
	}
}

// TestObserveSliceWithAHostGone: a host drained for its slice whose
// cause's Node was deleted (a repair, before the VM is recreated) stays
// drained while its slice is short of hosts, with or without an
// aggregator; with every host back, it is not asked.
func TestObserveSliceWithAHostGone(t *testing.T) {
	host := func(name string, st protocol.AgentState) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{protocol.LabelNodePool: "v5p", protocol.LabelTPUTopology: "2x2x4"}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{protocol.ResourceTPU: resource.MustParse("4")},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		protocol.WriteAgentState(n, st)
		return n
	}
	drained := protocol.AgentState{Phase: protocol.PhaseTerminating, Reason: protocol.ReasonSlice, Started: t0, Deadline: t0.Add(30 * time.Second)}
	own := host("h0", drained)
	siblings := kubetest.NewInformer(t, own, host("h2", drained), host("h3", drained))
	a := &Agent{opts: Options{PoolLabel: protocol.LabelNodePool}, slice: "v5p", siblings: siblings.Informer}
	var obs Observation
	a.observeSlice(own, protocol.ReadAgentState(own), &obs)
	if !obs.SliceAskSet || !obs.SliceAsk.Deadline.Equal(drained.Deadline) || !strings.Contains(obs.SliceAsk.Cause, "3 of its 4 hosts") {
		t.Errorf("3 of 4 hosts: ask %+v (set %t), want the drain kept", obs.SliceAsk, obs.SliceAskSet)
	}
	siblings.Add(host("h1", protocol.AgentState{}))
	obs = Observation{}
	a.observeSlice(own, protocol.ReadAgentState(own), &obs)
	if obs.SliceAskSet {
		t.Errorf("every host back: asked %+v", obs.SliceAsk)
	}
}

// TestSliceSignal: a host that starts to drain for its slice wakes no
// other host; one whose own maintenance starts, whose drain ends, or whose
// Node turns NotReady does.
func TestSliceSignal(t *testing.T) {
	idle := protocol.SliceHost{Name: "h", Phase: protocol.PhaseIdle, Ready: true}
	following := protocol.SliceHost{Name: "h", Phase: protocol.PhaseDraining, Reason: protocol.ReasonSlice, Started: t0, Deadline: t0.Add(time.Minute), Ready: true}
	drained := following
	drained.Phase = protocol.PhaseTerminating
	incomplete := following
	incomplete.Drain = protocol.DrainIncomplete
	preempted := protocol.SliceHost{Name: "h", Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: t0, Deadline: t0.Add(30 * time.Second), Ready: true}
	down := idle
	down.Ready = false
	if sliceSignal(idle) != sliceSignal(following) {
		t.Errorf("following its slice wakes the other hosts")
	}
	for name, h := range map[string]protocol.SliceHost{"drained": drained, "incomplete": incomplete, "preempted": preempted, "NotReady": down} {
		if sliceSignal(h) == sliceSignal(following) || sliceSignal(h) == sliceSignal(idle) {
			t.Errorf("%s wakes no other host", name)
		}
	}
}
