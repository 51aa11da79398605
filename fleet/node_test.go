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
// saying it is in a manual maintenance.
func TestVoluntaryOnlyAsFarAsTheNodeCannotWrite(t *testing.T) {
	manual := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: now, Deadline: now.Add(time.Hour), RequestID: "req-1"}
	for _, tc := range []struct {
		name   string
		change func(*corev1.Node)
		want   bool
	}{
		{name: "its own state alone", want: false},
		{name: "the label", change: func(n *corev1.Node) { n.Labels[protocol.LabelPerformMaintenance] = protocol.TriggerValue }, want: true},
		{name: "the aggregator's accepted call for it", change: func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "req-1", Operation: "op-1"})
		}, want: true},
		{name: "the aggregator's refusal of it", change: func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "req-1", Outcome: protocol.CallNotVouched})
		}, want: false},
		{name: "an answer to another maintenance", change: func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(protocol.ComputeAnswer{ID: "req-0", Operation: "op-0"})
		}, want: false},
		{name: "the aggregator's slice ask", change: func(n *corev1.Node) { n.Annotations[protocol.AnnotationSliceMaintenance] = "{}" }, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{protocol.LabelNodePool: "a3"}, Annotations: map[string]string{}}}
			protocol.WriteAgentState(n, manual)
			if tc.change != nil {
				tc.change(n)
			}
			if got := NodeOf(n, protocol.Grouping{PoolLabel: protocol.LabelNodePool}).Voluntary; got != tc.want {
				t.Errorf("voluntary %t, want %t", got, tc.want)
			}
		})
	}
}
