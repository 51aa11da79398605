package aggregator

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestObservedAgentShadowShowsOnlyAgentKeys: an observed node's agent
// shadow (on a Lease the node's own identities write) is shown only for
// the keys its agent writes. A shadow that relabels a GPU node into an
// acting TPU slice's pool, forges the aggregator's vm-facts and says a
// preemption is under way shows the preemption on the node as it is (a
// GPU node in its own pool), and no host of the slice is asked to drain.
func TestObservedAgentShadowShowsOnlyAgentKeys(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	sliceLabels := map[string]string{protocol.LabelNodePool: "v5p", protocol.LabelTPUTopology: "2x2x4", protocol.LabelTPUAccelerator: "tpu-v5p-slice"}
	tpuVM := protocol.VMFacts{ID: "vm", MachineType: "ct5p-hightpu-4t"}
	node := func(name string, labels map[string]string, facts *protocol.VMFacts) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1", Labels: map[string]string{}, Annotations: map[string]string{}}}
		for k, v := range labels {
			n.Labels[k] = v
		}
		// The kubelet writes the node's capacity: the hostile one patched
		// TPU chips in as well.
		n.Status.Capacity = corev1.ResourceList{protocol.ResourceTPU: resource.MustParse("4")}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if facts != nil {
			n.Annotations[protocol.AnnotationVMFacts] = protocol.Encode(*facts)
		}
		return n
	}
	hostile := node("gpu-0", map[string]string{protocol.LabelNodePool: "a3", protocol.LabelGPUAccelerator: "nvidia-h100-80gb"}, nil)
	// What the hostile node's agent token writes on its Lease.
	forged := hostile.DeepCopy()
	for k, v := range sliceLabels {
		forged.Labels[k] = v
	}
	delete(forged.Labels, protocol.LabelGPUAccelerator)
	forged.Annotations[protocol.AnnotationVMFacts] = protocol.Encode(tpuVM)
	protocol.WriteAgentState(forged, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: now, Deadline: now.Add(30 * time.Second)})
	forged.Spec.Unschedulable = true
	var s protocol.Shadow
	s.Record(hostile, forged)

	shown := showAgent(hostile, &s)
	for _, key := range []string{protocol.LabelNodePool, protocol.LabelTPUTopology, protocol.LabelTPUAccelerator, protocol.LabelGPUAccelerator} {
		if got, want := shown.Labels[key], hostile.Labels[key]; got != want {
			t.Errorf("shown label %s=%q; want the Node's %q", key, got, want)
		}
	}
	if got, ok := shown.Annotations[protocol.AnnotationVMFacts]; ok {
		t.Errorf("shown vm-facts %s; want none (the Node has none)", got)
	}
	// The agent's own keys and its cordon are still shown.
	if st := protocol.ReadAgentState(shown); st.Phase != protocol.PhaseDraining || st.Reason != protocol.ReasonPreemption || !shown.Spec.Unschedulable {
		t.Errorf("shown agent state %s/%s, cordoned %t; want the agent's preemption shown", st.Phase, st.Reason, shown.Spec.Unschedulable)
	}
	if hostile.Labels[protocol.LabelNodePool] != "a3" || len(hostile.Annotations) != 0 {
		t.Errorf("the cached Node was changed: %v %v", hostile.Labels, hostile.Annotations)
	}

	g := protocol.Grouping{PoolLabel: protocol.LabelNodePool}
	views := []fleet.Node{fleet.NodeOf(shown, g)}
	for i := range 4 {
		views = append(views, fleet.NodeOf(node(fmt.Sprintf("v5p-%d", i), sliceLabels, &tpuVM), g))
	}
	asks := fleet.SliceAsks(views, now, func(string, protocol.Reason, time.Time) bool { return true })
	for name, ask := range asks {
		if ask != nil {
			t.Errorf("%s is asked %+v; want no ask from an observed node's shadow", name, *ask)
		}
	}
	if d := cmp.Diff(4, len(asks)); d != "" {
		t.Errorf("slice hosts (-want +got):\n%s", d)
	}
}
