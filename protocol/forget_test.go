package protocol

import (
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestForget: an uninstall removes every key the product wrote on an idle
// Node, keeps what others wrote (GKE's notice, a person's label, other
// taints and annotations), and leaves a Node whose maintenance is under
// way exactly as it is.
func TestForget(t *testing.T) {
	start := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	others := func() *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"pool": "a"}, Annotations: map[string]string{"other.io/x": "y"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}},
		}
	}
	for _, tc := range []struct {
		name              string
		node              func() *corev1.Node
		changed, underWay bool
		keep              func(n *corev1.Node) map[string]string // what must stay, besides others'
	}{
		{"idle with its mirrored notice and counts", func() *corev1.Node {
			n := others()
			st := AgentState{Phase: PhaseIdle, ScheduledTime: "1796151600", Notice: ReadNotice(`{"maintenance_status":"PENDING"}`), IdleSince: start}
			st.Interruptions = st.Interruptions.Add(HostMaintenance, 2)
			WriteAgentState(n, st)
			n.Annotations[AnnotationRepairs] = `{"count":1}`
			return n
		}, true, false, nil},
		{"idle with GKE's notice", func() *corev1.Node {
			n := others()
			n.Labels[LabelScheduledMaintenanceTime] = "1796151600"
			n.Annotations[AnnotationUpcomingMaintenance] = "gke"
			n.Annotations[AnnotationLastBootID] = "b"
			return n
		}, true, false, func(*corev1.Node) map[string]string {
			return map[string]string{LabelScheduledMaintenanceTime: "1796151600", AnnotationUpcomingMaintenance: "gke"}
		}},
		{"an opportunistic trigger", func() *corev1.Node {
			n := others()
			WriteTrigger(n, MaintenanceState{OpportunisticTriggered: true, ScheduledTime: "1796151600"})
			return n
		}, true, false, nil},
		{"a person's trigger", func() *corev1.Node {
			n := others()
			n.Labels[LabelPerformMaintenance] = TriggerValue
			return n
		}, false, false, func(*corev1.Node) map[string]string { return map[string]string{LabelPerformMaintenance: TriggerValue} }},
		{"the aggregator's slice ask", func() *corev1.Node {
			n := others()
			n.Annotations[AnnotationSliceMaintenance] = "{}"
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintSliceDown, Effect: corev1.TaintEffectNoSchedule})
			return n
		}, true, false, nil},
		{"the slice-down taint under its old key", func() *corev1.Node {
			n := others()
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "maintenance-handler.io/slice-down", Effect: corev1.TaintEffectNoSchedule})
			return n
		}, true, false, nil},
		{"draining", func() *corev1.Node {
			n := others()
			WriteAgentState(n, AgentState{Phase: PhaseDraining, Reason: ReasonHostMaintenance, Started: start, Deadline: start.Add(time.Hour)})
			n.Spec.Unschedulable = true
			return n
		}, false, true, nil},
		{"terminating", func() *corev1.Node {
			n := others()
			WriteAgentState(n, AgentState{Phase: PhaseTerminating, Reason: ReasonPreemption, Started: start, Deadline: start.Add(30 * time.Second)})
			return n
		}, false, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.node()
			before := n.DeepCopy()
			changed, underWay := Forget(n)
			if changed != tc.changed || underWay != tc.underWay {
				t.Fatalf("Forget: changed %t, under way %t; want %t, %t", changed, underWay, tc.changed, tc.underWay)
			}
			if underWay {
				if !maps.Equal(n.Labels, before.Labels) || !maps.Equal(n.Annotations, before.Annotations) || len(n.Spec.Taints) != len(before.Spec.Taints) {
					t.Errorf("a node in maintenance was changed: %v %v %v", n.Labels, n.Annotations, n.Spec.Taints)
				}
				return
			}
			want := map[string]string{"pool": "a", "other.io/x": "y"}
			if tc.keep != nil {
				maps.Copy(want, tc.keep(n))
			}
			got := map[string]string{}
			maps.Copy(got, n.Labels)
			maps.Copy(got, n.Annotations)
			if !maps.Equal(got, want) {
				t.Errorf("labels and annotations left: %v; want %v", got, want)
			}
			if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "nvidia.com/gpu" {
				t.Errorf("taints left: %v; want only nvidia.com/gpu", n.Spec.Taints)
			}
		})
	}
}

func TestForgetConditions(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady}, {Type: ConditionMaintenancePlanned}, {Type: "GPUHealthy"}, {Type: ConditionDrained}, {Type: ConditionDeviceUnhealthy},
	}}}
	if got := ForgetConditions(n); len(got) != 3 || got[0] != ConditionMaintenancePlanned || got[1] != ConditionDrained || got[2] != ConditionDeviceUnhealthy {
		t.Errorf("ForgetConditions: %v; want MaintenancePlanned, Drained and DeviceUnhealthy", got)
	}
}
