package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestSpotPreemptionNotice: the agent binary reads its Spot VM's
// preemption notice with instances.get (--preemption-notice=auto). With a
// 120 s notice, a preemption drains by the notice and the 30 s soft-off:
// a PodDisruptionBudget that releases its pod after 60 s is kept (the pod
// is evicted, never deleted). A Spot VM without a notice drains by the
// 30 s rule, as before.
func TestSpotPreemptionNotice(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	ns := world.Namespace(t)
	const withNotice, without = "bin-spot-0", "bin-spot-1"
	emus := map[string]*gceemu.Server{}
	for name, notice := range map[string]time.Duration{withNotice: 2 * time.Minute, without: 0} {
		world.NodeT(t, testworld.NodeSpec{Name: name, Spot: true})
		emus[name] = gceemu.StartT(t, gceemu.Config{Name: name, Preemptible: true, PreemptionNotice: notice})
	}
	grace := int64(10)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "trainer", Labels: map[string]string{"app": "spot-trainer"},
		Annotations: map[string]string{testworld.PodDeleteDelayAnnotation: "2s"}},
		Spec: corev1.PodSpec{NodeName: withNotice, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/trainer:1"}}}}
	if _, err := world.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	world.Budget(t, ns, "trainer", pod.Labels, intstr.FromInt32(1), "computed", nil)
	world.WaitPod(t, ns, "trainer", "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	procs := map[string]*agentProc{}
	for name, emu := range emus {
		procs[name] = runAgent(t, name, emu, "--compute-endpoint", emu.ComputeEndpoint(), "--eviction-retry-interval", "1s")
	}
	for name, p := range procs {
		poll(t, name+" healthy", 30*time.Second, func() bool { code, _ := p.get("/healthz"); return code == 200 })
		world.WaitNode(t, name, "seen by its agent", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationLastBootID] != "" })
	}

	preempted := map[string]time.Time{}
	for name, emu := range emus {
		preempted[name] = time.Now()
		emu.SetPreempted(true)
	}
	for name, want := range map[string]time.Duration{withNotice: 150 * time.Second, without: 30 * time.Second} {
		n := world.WaitNode(t, name, "draining for the preemption", func(n *corev1.Node) bool {
			return protocol.ReadAgentState(n).Reason == protocol.ReasonPreemption
		})
		if got := protocol.ReadAgentState(n).Deadline.Sub(preempted[name]); got < want-3*time.Second || got > want+time.Second {
			t.Errorf("%s drains by %s after the preemption, want %s", name, got, want)
		}
	}

	// The budget holds the trainer for 60 s, then releases it; the agent
	// has been refused meanwhile.
	poll(t, "an eviction refused by the budget", time.Minute, func() bool {
		_, m := procs[withNotice].get("/metrics")
		return metricValue(t, m, "maintenance_handler_agent_evictions_total", map[string]string{"node_name": withNotice, "node_pool_name": "default-pool", "outcome": "blocked"}) >= 1
	})
	time.Sleep(time.Until(preempted[withNotice].Add(60 * time.Second)))
	if p, err := world.Client.CoreV1().Pods(ns).Get(ctx, "trainer", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the trainer before its budget released it: %v, deleting %v; want it kept", err, p.DeletionTimestamp)
	}
	evicted := world.PodSeen(t, ns, "trainer", "evicted", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	if err := world.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "trainer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := evicted()
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Reason != "EvictionByEvictionAPI" {
			t.Errorf("the trainer's DisruptionTarget says %s; want it evicted (EvictionByEvictionAPI), not deleted", c.Reason)
		}
	}
	_, m := procs[withNotice].get("/metrics")
	if v := metricValue(t, m, "maintenance_handler_agent_eviction_escalations_total", map[string]string{"node_name": withNotice, "node_pool_name": "default-pool"}); v != 0 {
		t.Errorf("%v escalations to delete; want none: the budget released in time", v)
	}
}
