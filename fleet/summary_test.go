package fleet

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestLabelledInNodeCountsAlone: a GPU node whose kubelet labelled it into
// a four-host TPU pool and patched TPU chips into its capacity, NotReady,
// its agent saying a maintenance begun as its slice's, takes no place
// under the caps, and a proven host in that state on its own word takes
// none either (NotReady and begun are what the node writes); a proven
// host whose slice ask the aggregator wrote takes the whole slice's, and
// a node labelled in with one (an ask the aggregator would not write for
// it) takes its own place alone.
func TestLabelledInNodeCountsAlone(t *testing.T) {
	g := protocol.Grouping{PoolLabel: protocol.LabelNodePool}
	begun := protocol.AgentState{Phase: protocol.PhaseTerminating, Reason: protocol.ReasonHostMaintenance, Started: now, Deadline: now.Add(time.Hour), Begun: true}
	node := func(name, machineType string, st protocol.AgentState, ready corev1.ConditionStatus, vouched bool) Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{},
			Labels: map[string]string{protocol.LabelNodePool: "v5p", protocol.LabelTPUTopology: "2x2x4", protocol.LabelTPUAccelerator: "tpu-v5p-slice"}},
			Status: corev1.NodeStatus{Capacity: corev1.ResourceList{protocol.ResourceTPU: resource.MustParse("4")},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
		n.Annotations[protocol.AnnotationVMFacts] = protocol.Encode(protocol.VMFacts{ID: "read-1", MachineType: machineType, Status: "RUNNING", NodePool: "v5p"})
		protocol.WriteAgentState(n, st)
		if vouched {
			protocol.WriteSliceAsk(n, &protocol.SliceAsk{Slice: "v5p", Cause: "v5p-0", Reason: protocol.ReasonManual, Started: now, Deadline: now.Add(time.Hour)})
		}
		return NodeOf(n, g)
	}
	real := func() []Node {
		var out []Node
		for i := range 4 {
			out = append(out, node(fmt.Sprintf("v5p-%d", i), "ct5p-hightpu-4t", protocol.AgentState{}, corev1.ConditionTrue, false))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		odd  Node
		want int
	}{
		{"a GPU VM labelled in, NotReady, begun", node("gpu-x", "a3-highgpu-8g", begun, corev1.ConditionFalse, false), 0},
		{"a real host NotReady, begun, on its own word", node("v5p-9", "ct5p-hightpu-4t", begun, corev1.ConditionFalse, false), 0},
		{"a GPU VM labelled in, begun, with a slice ask", node("gpu-x", "a3-highgpu-8g", begun, corev1.ConditionFalse, true), 1},
		{"a real host begun, its slice ask the aggregator's", node("v5p-9", "ct5p-hightpu-4t", begun, corev1.ConditionTrue, true), 5},
	} {
		nodes := append(real(), tc.odd)
		if tc.odd.Voluntary != (tc.want > 0) {
			t.Fatalf("%s: in voluntary maintenance %t; want %t", tc.name, tc.odd.Voluntary, tc.want > 0)
		}
		all := make([]*Node, len(nodes))
		f := &Fleet{}
		for i := range nodes {
			all[i] = &nodes[i]
			f.Set(nodes[i])
		}
		if got := countVoluntary(all); got != tc.want {
			t.Errorf("%s: %d in voluntary maintenance; want %d", tc.name, got, tc.want)
		}
		if got := f.voluntary(); got != tc.want {
			t.Errorf("%s: the fleet counts %d in voluntary maintenance; want %d", tc.name, got, tc.want)
		}
	}
}
