package aggregator

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// fleetNodes makes n Node objects in pools of 100, as the agents publish
// them: every node with a pending notice, a third of them busy.
func fleetNodes(n int) []*corev1.Node {
	out := make([]*corev1.Node, 0, n)
	for i := range n {
		out = append(out, fleetNode(i))
	}
	return out
}

// fleetNode is node i of fleetNodes.
func fleetNode(i int) *corev1.Node {
	start := now.Add(3 * 24 * time.Hour).UTC().Format(time.RFC3339)
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
	return node
}

// BenchmarkPass is the aggregator's read of the node cache and its
// decision, in memory, over 5,000, 20,000 and 65,000 GKE-shaped nodes
// (gkeNode, slimmed as the informer keeps them) in pools of 100
// (min-nodes and the pools' caps let 10 nodes of each pool go, the
// cluster's cap all):
//   - first: the pass of a new leader, which reads every Node and decides
//     every pool;
//   - steady: a pass after 10 Nodes, or 1% of them, changed (an agent's
//     write each, spread over the fleet), which reads those again and
//     decides their pools alone;
//
// and the interruption accounting of one Node update (two reads of the
// agent's state and the counts compared), which the leader does for every
// update it watches. Each prints its time and what it allocates. The whole
// pass, with the API server, is BenchmarkWholePass.
func BenchmarkPass(b *testing.B) {
	cfg := policy.Config{MaxVoluntary: policy.Budget{Percent: 100}, Version: "bench"}
	read := func(n *corev1.Node, _ []string) fleet.Node {
		return fleet.NodeOf(n, protocol.Grouping{PoolLabel: protocol.LabelNodePool})
	}
	for _, size := range []int{5000, 20000, 65000} {
		src := memSource{}
		for i := range size { // GKE-shaped, as the informer keeps them
			n := slimNode(gkeNode(i)).(*corev1.Node)
			n.ResourceVersion = "1"
			src[n.Name] = n
		}
		check := func(b *testing.B, plans []fleet.PoolPlan) {
			triggers := 0
			for _, p := range plans {
				triggers += len(p.Trigger)
			}
			if len(plans) != size/100 || triggers != size/100*10 {
				b.Fatalf("%d pools, %d triggers; want %d pools, 10 triggers each", len(plans), triggers, size/100)
			}
		}
		b.Run(fmt.Sprintf("nodes=%d/first", size), func(b *testing.B) {
			b.ReportAllocs()
			var plans []fleet.PoolPlan
			for b.Loop() {
				var c viewCache
				f, _ := c.refresh(src, nil, read)
				plans = f.Decide(now, cfg)
			}
			check(b, plans)
			report(b, size, "a new leader's first pass (every Node read, every pool decided)")
		})
		for _, changed := range []int{10, size / 100} {
			b.Run(fmt.Sprintf("nodes=%d/changed=%d", size, changed), func(b *testing.B) {
				b.ReportAllocs()
				var c viewCache
				f, _ := c.refresh(src, nil, read)
				f.Decide(now, cfg)
				var plans []fleet.PoolPlan
				version, decided := 1, 0
				for b.Loop() {
					version++
					for i := range changed { // spread over the fleet, each a new object as an informer holds it
						name := fmt.Sprintf("gpu-%05d", (i*6491+version)%size)
						n := src[name].DeepCopy()
						n.ResourceVersion = fmt.Sprint(version)
						n.Annotations[protocol.AnnotationLastBootID] = fmt.Sprint("boot-", version) // an agent's write
						src[name] = n
						c.mark(name)
					}
					f, _ := c.refresh(src, nil, read)
					plans = f.Decide(now, cfg)
					fresh, _ := f.Changes()
					decided += len(fresh)
				}
				check(b, plans)
				report(b, size, fmt.Sprintf("a pass after %d Nodes changed (%.0f pools decided again)", changed, float64(decided)/float64(b.N)))
				if changed != size/100 {
					return
				}
				// What a leader holds: the Node objects (as its informer
				// does) and the fleet.
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				runtime.KeepAlive(&c)
				runtime.KeepAlive(src)
				b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
				fmt.Printf("%d nodes and their views held: %.0f MiB of heap\n", size, float64(ms.HeapAlloc)/(1<<20))
			})
		}
	}
	b.Run("accounting", func(b *testing.B) {
		b.ReportAllocs()
		old := fleetNodes(1)[0]
		old.Annotations[protocol.AnnotationInterruptions] = `{"` + protocol.Preemption.Key() + `":1}`
		cur := old.DeepCopy()
		cur.Annotations[protocol.AnnotationInterruptions] = `{"` + protocol.Preemption.Key() + `":2}`
		var got []protocol.Interruption
		for b.Loop() {
			got = begun(old, cur)
		}
		if len(got) != 1 {
			b.Fatalf("begun %v, want one preemption", got)
		}
		per := time.Duration(b.Elapsed().Nanoseconds() / int64(b.N))
		fmt.Printf("accounting of one Node update: %s (65,000 updates: %s)\n", per, (per * 65000).Round(time.Millisecond))
	})
}

// report prints the pass's time per pass.
func report(b *testing.B, size int, what string) {
	per := time.Duration(b.Elapsed().Nanoseconds() / int64(b.N))
	fmt.Printf("decision pass over %d nodes, %s: %s\n", size, what, per.Round(10*time.Microsecond))
}

// memSource is a node cache in memory.
type memSource map[string]*corev1.Node

func (m memSource) List() []kube.Object {
	out := make([]kube.Object, 0, len(m))
	for _, n := range m {
		out = append(out, n)
	}
	return out
}

func (m memSource) Get(name string) (kube.Object, bool) {
	n, ok := m[name]
	return n, ok
}
