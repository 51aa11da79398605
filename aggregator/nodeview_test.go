package aggregator

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestDecisiveUpdates: a heartbeat wakes no pass; a change of anything a
// pass reads does.
func TestDecisiveUpdates(t *testing.T) {
	base := fleetNodes(1)[0]
	base.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(now)
	for _, tc := range []struct {
		name   string
		change func(*corev1.Node)
		want   bool
	}{
		{"heartbeat", func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(now.Add(10 * time.Second))
			n.ResourceVersion = "2"
		}, false},
		{"another condition", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "MaintenancePlanned", Status: corev1.ConditionTrue})
		}, false},
		{"a fault detector's condition", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "GPUUnhealthy", Status: corev1.ConditionTrue})
		}, true},
		{"an annotation", func(n *corev1.Node) { n.Annotations[protocol.AnnotationIdleSince] = now.Format(time.RFC3339) }, true},
		{"a label", func(n *corev1.Node) { n.Labels[protocol.LabelPerformMaintenance] = protocol.TriggerValue }, true},
		{"a taint", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: protocol.TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule}}
		}, true},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		{"not Ready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
		{"allocatable", func(n *corev1.Node) { n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("4") }, true},
		{"allocatable written otherwise", func(n *corev1.Node) { n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("8000m") }, false},
		{"kubelet version", func(n *corev1.Node) { n.Status.NodeInfo.KubeletVersion = "v1.36.3-gke.100" }, true},
		{"recreated", func(n *corev1.Node) { n.UID = "other" }, true},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := decisive(base, cur); got != tc.want {
			t.Errorf("%s: decisive %t, want %t", tc.name, got, tc.want)
		}
	}

	// A fault detector's condition written before the node's last repair
	// is stale: its heartbeat after the repair makes it count again, and
	// wakes a pass; a heartbeat before, or of a fresh one, does not.
	repaired := base.DeepCopy()
	repaired.Annotations[protocol.AnnotationLastFaultRepair] = `{"outcome":"repaired","ended":"` + now.Add(time.Minute).UTC().Format(time.RFC3339) + `"}`
	repaired.Status.Conditions = append(repaired.Status.Conditions, corev1.NodeCondition{Type: "GPUUnhealthy", Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(now), LastHeartbeatTime: metav1.NewTime(now)})
	beat := func(n *corev1.Node, at time.Duration) *corev1.Node {
		c := n.DeepCopy()
		c.Status.Conditions[len(c.Status.Conditions)-1].LastHeartbeatTime = metav1.NewTime(now.Add(at))
		return c
	}
	if !decisive(repaired, beat(repaired, 2*time.Minute)) {
		t.Error("a stale condition written again after the repair: not decisive")
	}
	if decisive(repaired, beat(repaired, 30*time.Second)) {
		t.Error("a stale condition's heartbeat before the repair ended: decisive")
	}
	if fresh := beat(repaired, 2*time.Minute); decisive(fresh, beat(repaired, 3*time.Minute)) {
		t.Error("a fresh condition's heartbeat: decisive")
	}
}
