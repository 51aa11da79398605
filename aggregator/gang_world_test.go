package aggregator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// TestGangDrainedTogetherAndCountedOnce: a job of three pods of one pod
// group, one on each of three GPU nodes, each with its real agent, and a
// real aggregator. The agents list the pod group on their Nodes; the
// aggregator reads each pod named and puts the three nodes in one gang
// (the label), and not a fourth node whose word (its agent down, its
// annotation forged) names a pod that runs elsewhere: that it refuses,
// saying why. Node 1 is preempted: the other two drain with it, by its
// deadline, each pod stopped with a grace that ends by it, and the gang's
// outage is counted once. When node 1 is back, every node goes back in
// service, and the gang, whose pods are gone, is no more.
func TestGangDrainedTogetherAndCountedOnce(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	p := newProcs(t, "--eviction-retry-interval", "1s")
	s := &slice{p: p, vms: map[string]*vms.VM{}, tainted: map[string]time.Time{}, stopped: map[string]podStop{}}
	for i := range 4 {
		name := fmt.Sprintf("gang-%d", i)
		v, err := p.f.Add(ctx, testworld.NodeSpec{Name: name, Pool: "gang"}, gceemu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		s.vms[name] = v
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		if i == 3 {
			continue
		}
		s.hosts = append(s.hosts, name)
		group, grace := "train", int64(20)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("train-%d", i), Namespace: p.ns},
			Spec: corev1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: &grace, SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: &group},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "train", Image: "trainer", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("8")}, Limits: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("8")}}}}}}
		created, err := world.Client.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.Spec.SchedulingGroup == nil {
			t.Skipf("pods' scheduling groups not kept on Kubernetes %s (GenericWorkload, from 1.35)", testworld.KubernetesVersion)
		}
	}
	// gang-3's agent is down, and its Node says it runs train-0, which
	// runs on gang-0.
	if err := s.vms["gang-3"].Agent.Kill(); err != nil {
		t.Fatal(err)
	}
	forged := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, protocol.AnnotationPodGroups, p.ns+"/train=train-0")
	if _, err := world.Client.CoreV1().Nodes().Patch(ctx, "gang-3", types.MergePatchType, []byte(forged), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	s.follow(t, ctx, "gang")
	metricsAddr := testworld.FreeAddrT(t)
	p.aggregator("agg-gang", metricsAddr)

	gang := protocol.GangName(p.ns, "train")
	world.WaitNodes(t, s.hosts, "in the gang "+gang, func(n *corev1.Node) bool { return n.Labels[protocol.LabelGang] == gang })
	world.WaitEvent(t, "gang-0", protocol.EventGangJoined, p.ns+"/train", gang)
	world.WaitEvent(t, "gang-3", protocol.EventPodGroupRefused, "train-0", `the pod runs on "gang-0"`)
	if n := world.WaitNode(t, "gang-3", "exists", func(*corev1.Node) bool { return true }); n.Labels[protocol.LabelGang] != "" {
		t.Errorf("gang-3, on its forged word, was put in the gang %q", n.Labels[protocol.LabelGang])
	}

	deadline := s.preempt(t, ctx, "gang-1")
	s.drainedWith(t, ctx, deadline, []string{"gang-0", "gang-2"}, []string{"train-0", "train-1", "train-2"})
	world.WaitEvent(t, "gang-0", protocol.EventSliceMaintenance, "Host gang-1", gang)
	series := `maintenance_handler_aggregator_slice_interruptions_total{interruption_reason="` + string(protocol.Preemption.Reason) +
		`",interruption_type="` + string(protocol.Preemption.Type) + `",slice="` + gang + `"}`
	waitMetric(t, ctx, metricsAddr, series, 1)
	if got := metricTotal(t, metricsAddr, "maintenance_handler_aggregator_slice_interruptions_total"); got != 1 {
		t.Errorf("slice_interruptions_total = %v in all, want the gang's outage counted once", got)
	}
	if n := world.WaitNode(t, "gang-3", "exists", func(*corev1.Node) bool { return true }); protocol.HasTaint(n) || protocol.HasTaintKey(n, protocol.TaintSliceDown) {
		t.Errorf("gang-3, in no gang, was taken down with it")
	}

	if err := p.f.Reboot(ctx, s.vms["gang-1"]); err != nil {
		t.Fatal(err)
	}
	world.WaitNodes(t, s.hosts, "back in service, in no gang", func(n *corev1.Node) bool {
		_, asked := protocol.ReadSliceAsk(n)
		return !asked && !protocol.HasTaint(n) && !n.Spec.Unschedulable && n.Labels[protocol.LabelGang] == ""
	})
	world.WaitEvent(t, "gang-0", protocol.EventGangLeft, gang)
}
