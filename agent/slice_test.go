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

// TestSliceViewWithAHostGone: a host drained for its slice whose
// cause's Node was deleted (a repair, before the VM is recreated) stays
// drained while its slice is short of hosts, with or without an
// aggregator; with every host back, it is not asked.
func TestSliceViewWithAHostGone(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
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
	obs := a.sliceView(own, protocol.ReadAgentState(own), t0)
	if !obs.SliceAskSet || !obs.SliceAsk.Deadline.Equal(drained.Deadline) || !strings.Contains(obs.SliceAsk.Cause, "3 of its 4 hosts") {
		t.Errorf("3 of 4 hosts: ask %+v (set %t), want the drain kept", obs.SliceAsk, obs.SliceAskSet)
	}
	siblings.Add(host("h1", protocol.AgentState{}))
	obs = a.sliceView(own, protocol.ReadAgentState(own), t0)
	if obs.SliceAskSet {
		t.Errorf("every host back: asked %+v", obs.SliceAsk)
	}
}
