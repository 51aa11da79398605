package aggregator

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// fleetNodes makes n Node objects in pools of 100, as the agents publish
// them: every node with a pending notice, a third of them busy.
func fleetNodes(n int) []*corev1.Node {
	start := now.Add(3 * 24 * time.Hour).UTC().Format(time.RFC3339)
	out := make([]*corev1.Node, 0, n)
	for i := range n {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gpu-%05d", i), Labels: map[string]string{protocol.LabelNodePool: fmt.Sprintf("pool-%02d", i/100)},
				Annotations: map[string]string{
					protocol.AnnotationOpportunisticConfig: "node-idle-time=600s,min-nodes=90,window=2419200s,max-unavailable=10",
					protocol.AnnotationUpcomingMaintenance: `{"can_reschedule":true,"maintenance_status":"PENDING","type":"SCHEDULED","window_start_time":"` + start + `"}`,
				}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
				Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
		}
		if i%3 == 0 {
			node.Annotations[protocol.AnnotationBusy] = protocol.BusyAccelerators
		} else {
			node.Annotations[protocol.AnnotationIdleSince] = now.Add(-time.Duration(600+i) * time.Second).UTC().Format(time.RFC3339Nano)
		}
		out = append(out, node)
	}
	return out
}

// BenchmarkDecide5000Nodes is one decision pass (reading every Node and
// deciding every pool) over 5,000 nodes in 50 pools; min-nodes and the
// pool caps let 10 nodes of each pool go, the cluster cap all.
func BenchmarkDecide5000Nodes(b *testing.B) {
	objs := fleetNodes(5000)
	var plans []PoolPlan
	for b.Loop() {
		views := make([]Node, 0, len(objs))
		for _, n := range objs {
			views = append(views, NodeOf(n, protocol.LabelNodePool, ""))
		}
		plans = Decide(now, policy.Config{MaxVoluntary: policy.Budget{Percent: 100}}, views)
	}
	triggers := 0
	for _, p := range plans {
		triggers += len(p.Trigger)
	}
	if len(plans) != 50 || triggers != 50*10 {
		b.Fatalf("%d pools, %d triggers; want 50 pools, 10 triggers each", len(plans), triggers)
	}
	perPass := time.Duration(b.Elapsed().Nanoseconds() / int64(b.N))
	fmt.Printf("decision pass over 5,000 nodes in 50 pools: %s\n", perPass.Round(10*time.Microsecond))
}
