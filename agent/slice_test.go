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
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{protocol.LabelNodePool: "v5p", protocol.LabelTPUTopology: "2x2x4"},
			Annotations: map[string]string{protocol.AnnotationVMFacts: protocol.Encode(protocol.VMFacts{ID: "read-1", MachineType: "ct5p-hightpu-4t", NodePool: "v5p"})}},
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
	// A node labelled into the slice (its VM read: no TPU VM) fills no
	// host's place.
	labelled := host("h9-gpu", protocol.AgentState{})
	labelled.Annotations[protocol.AnnotationVMFacts] = protocol.Encode(protocol.VMFacts{ID: "read-1", MachineType: "a3-highgpu-8g"})
	siblings.Add(labelled)
	if obs = a.sliceView(own, protocol.ReadAgentState(own), t0); !obs.SliceAskSet {
		t.Errorf("3 of 4 hosts and a node labelled in: not asked, want the drain kept")
	}
	siblings.Add(host("h1", protocol.AgentState{}))
	obs = a.sliceView(own, protocol.ReadAgentState(own), t0)
	if obs.SliceAskSet {
		t.Errorf("every host back: asked %+v", obs.SliceAsk)
	}
}

// TestSliceViewBelievesOnlyProvenHosts: the agent's own reading of its
// slice. A GPU node whose kubelet labelled it into the slice's pool and
// patched TPU chips into its capacity, and whose agent says a preemption
// under way with a start a year ahead, takes no host down: the
// aggregator read its VM, a GPU VM; nor does a TPU VM of the same
// generation made for another pool, labelled into this one. A real host's preemption does, and
// one that says it started a year ahead does not.
func TestSliceViewBelievesOnlyProvenHosts(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	host := func(name, machineType string, st protocol.AgentState) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{},
			Labels: map[string]string{protocol.LabelNodePool: "v5p", protocol.LabelTPUTopology: "2x2x4", protocol.LabelTPUAccelerator: "tpu-v5p-slice"}},
			Status: corev1.NodeStatus{Capacity: corev1.ResourceList{protocol.ResourceTPU: resource.MustParse("4")},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		n.Annotations[protocol.AnnotationVMFacts] = protocol.Encode(protocol.VMFacts{ID: "read-1", MachineType: machineType, NodePool: "v5p"})
		protocol.WriteAgentState(n, st)
		return n
	}
	preempted := func(started time.Time) protocol.AgentState {
		return protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: started, Deadline: t0.Add(30 * time.Second)}
	}
	// A TPU VM of the same generation made for another pool, which its
	// kubelet relabelled into v5p.
	fromPool := func(pool string, st protocol.AgentState) *corev1.Node {
		n := host("v5p-b-0", "ct5p-hightpu-4t", st)
		n.Annotations[protocol.AnnotationVMFacts] = protocol.Encode(protocol.VMFacts{ID: "read-1", MachineType: "ct5p-hightpu-4t", NodePool: pool})
		return n
	}
	ahead := t0.Add(365 * 24 * time.Hour)
	for _, tc := range []struct {
		name  string
		other *corev1.Node
		cause string
	}{
		{"a GPU VM labelled in, preempted a year ahead", host("gpu-x", "a3-highgpu-8g", preempted(ahead)), ""},
		{"a GPU VM labelled in, preempted now", host("gpu-x", "a3-highgpu-8g", preempted(t0)), ""},
		{"a TPU VM of another pool labelled in, preempted now", fromPool("v5p-b", preempted(t0)), ""},
		{"a TPU VM of no GKE pool labelled in, preempted now", fromPool("", preempted(t0)), ""},
		{"a real host preempted a year ahead", host("v5p-1", "ct5p-hightpu-4t", preempted(ahead)), ""},
		{"a real host preempted now", host("v5p-1", "ct5p-hightpu-4t", preempted(t0)), "v5p-1"},
	} {
		own := host("v5p-0", "ct5p-hightpu-4t", protocol.AgentState{})
		siblings := kubetest.NewInformer(t, own, host("v5p-2", "ct5p-hightpu-4t", protocol.AgentState{}), host("v5p-3", "ct5p-hightpu-4t", protocol.AgentState{}), tc.other)
		a := &Agent{opts: Options{PoolLabel: protocol.LabelNodePool}, slice: "v5p", group: protocol.Group{Kind: protocol.GroupSlice, Name: "v5p"}, siblings: siblings.Informer}
		obs := a.sliceView(own, protocol.ReadAgentState(own), t0)
		if got := map[bool]string{true: obs.SliceAsk.Cause}[obs.SliceAskSet]; got != tc.cause {
			t.Errorf("%s: v5p-0 follows an ask caused by %q; want %q", tc.name, got, tc.cause)
		}
	}
}
