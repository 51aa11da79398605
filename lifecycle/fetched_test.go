package lifecycle

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestObservationOfDecodesWhatWasFetched: the observation is what was
// fetched, decoded: the trigger and its time (an unreadable one named,
// and too old), the policy asked only about a trigger, the pods' idleness,
// and the call's result only for the state's request.
func TestObservationOfDecodesWhatWasFetched(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	node := func(triggeredAt string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{protocol.LabelGPUAccelerator: "nvidia-h100-80gb"}},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "b1", KubeletVersion: "v1.37.2"}}}
		if triggeredAt != "" {
			protocol.WriteTrigger(n, protocol.MaintenanceState{OpportunisticTriggered: true, TriggeredAt: triggeredAt, ScheduledTime: "1796151600"})
		}
		return n
	}
	gpu := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("1")}}}}}}
	asked := 0
	gate := func(*corev1.Node, time.Time) (string, string) { asked++; return protocol.ManualExcluded, "frozen" }
	st := State{RequestID: "req-1"}
	f := Fetched{Now: now, Node: node(now.Add(-time.Minute).Format(time.RFC3339)), RequestID: "req-2", ManualGate: gate,
		Pods: []*corev1.Pod{gpu}, Accelerators: []corev1.ResourceName{protocol.ResourceGPU}, Claimed: func(*corev1.Pod) bool { return false },
		Performed: &PerformResult{RequestID: "req-1", Err: errors.New("403")}}
	obs, err := ObservationOf(st, f)
	switch {
	case err != nil:
		t.Fatal(err)
	case !obs.TriggerSet || !obs.Opportunistic || !obs.TriggeredAt.Equal(now.Add(-time.Minute)) || obs.TriggerFor != "1796151600":
		t.Errorf("trigger %+v", obs.TriggerView)
	case obs.ManualBlocked != protocol.ManualExcluded || asked != 1:
		t.Errorf("the policy asked %d times, blocked %q", asked, obs.ManualBlocked)
	case obs.Idle || obs.Busy != protocol.BusyAccelerators || !obs.PodsKnown:
		t.Errorf("idleness %t %q", obs.Idle, obs.Busy)
	case obs.Perform == nil || obs.RequestID != "req-2" || obs.BootID != "b1" || !obs.Now.Equal(now):
		t.Errorf("observation %+v", obs)
	}

	// Another request's result is not this state's; no trigger, no
	// question to the policy; a trigger's time unreadable is said.
	f.Node, f.Performed = node(""), &PerformResult{RequestID: "req-0"}
	if obs, _ := ObservationOf(st, f); obs.Perform != nil || obs.TriggerSet || asked != 1 {
		t.Errorf("no trigger: perform %v, trigger %t, policy asked %d times", obs.Perform, obs.TriggerSet, asked)
	}
	f.Node = node("yesterday")
	if obs, err := ObservationOf(st, f); err == nil || !obs.TriggeredAt.IsZero() {
		t.Errorf("an unreadable trigger time: err %v, at %v", err, obs.TriggeredAt)
	}
}
