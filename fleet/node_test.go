package fleet

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestVoluntaryOnlyAsFarAsTheNodeCannotWrite: a node takes a place under
// the caps on voluntary maintenance through what its agent cannot write
// (the perform-maintenance label, the aggregator's accepted call for the
// maintenance under way, its slice ask), never through its own state
// alone: a slice host whose agent says its maintenance began as its
// slice's, its Node NotReady, takes none on that word.
func TestVoluntaryOnlyAsFarAsTheNodeCannotWrite(t *testing.T) {
	manual := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: now, Deadline: now.Add(time.Hour), RequestID: "req-1"}
	begun := protocol.AgentState{Phase: protocol.PhaseTerminating, Reason: protocol.ReasonHostMaintenance, Started: now, Deadline: now.Add(time.Hour), Begun: true}
	until := now.Add(protocol.VouchedFor)
	for _, tc := range []struct {
		name   string
		change func(*corev1.Node)
		want   bool
		// wantLater: whether it still counts at VouchedFor past now.
		wantLater bool
	}{
		{name: "its own state alone", want: false},
		{name: "the label", change: func(n *corev1.Node) { n.Labels[protocol.LabelPerformMaintenance] = protocol.TriggerValue }, want: true, wantLater: true},
		{name: "the aggregator's accepted call for it", change: func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "req-1", Operation: "op-1", Boot: "boot-1", Until: until})
		}, want: true},
		{name: "an accepted call made in another boot", change: func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "req-1", Operation: "op-1", Boot: "boot-0", Until: until})
		}, want: false},
		{name: "an accepted call that says neither boot nor bound", change: func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "req-1", Operation: "op-1"})
		}, want: false},
		{name: "the aggregator's refusal of it", change: func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "req-1", Outcome: protocol.CallNotVouched})
		}, want: false},
		{name: "an answer to another maintenance", change: func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "req-0", Operation: "op-0"})
		}, want: false},
		{name: "the aggregator's slice ask", change: func(n *corev1.Node) { n.Annotations[protocol.AnnotationSliceMaintenance] = "{}" }, want: true, wantLater: true},
		{name: "begun as its slice's on its own word, and down", change: func(n *corev1.Node) {
			protocol.WriteAgentState(n, begun)
			n.Status.Conditions[0].Status = corev1.ConditionFalse
		}, want: false},
		{name: "begun, down, with the aggregator's slice ask", change: func(n *corev1.Node) {
			protocol.WriteAgentState(n, begun)
			n.Status.Conditions[0].Status = corev1.ConditionFalse
			n.Annotations[protocol.AnnotationSliceMaintenance] = "{}"
		}, want: true, wantLater: true},
		{name: "begun, with the aggregator's accepted call in this boot", change: func(n *corev1.Node) {
			st := begun
			st.RequestID = "req-1"
			protocol.WriteAgentState(n, st)
			n.Status.Conditions[0].Status = corev1.ConditionFalse
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "req-1", Operation: "op-1", Boot: "boot-1", Until: until})
		}, want: true},
		{name: "begun as its slice's on its own word, and up", change: func(n *corev1.Node) { protocol.WriteAgentState(n, begun) }, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{protocol.LabelNodePool: "a3"}, Annotations: map[string]string{}},
				Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"},
					Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
			protocol.WriteAgentState(n, manual)
			if tc.change != nil {
				tc.change(n)
			}
			v := NodeOf(n, protocol.Grouping{PoolLabel: protocol.LabelNodePool})
			if v.Voluntary != tc.want {
				t.Errorf("voluntary %t, want %t", v.Voluntary, tc.want)
			}
			v.ExpireVouched(until.Add(-time.Second))
			if v.Voluntary != tc.want {
				t.Errorf("voluntary %t before the call's place ends, want %t", v.Voluntary, tc.want)
			}
			v.ExpireVouched(until)
			if v.Voluntary != tc.wantLater {
				t.Errorf("voluntary %t once the call's place ended, want %t", v.Voluntary, tc.wantLater)
			}
		})
	}
}
