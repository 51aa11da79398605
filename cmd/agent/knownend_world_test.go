package main

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestKnownEnd: the agent binary reads its VM's known end (a flex-start
// VM's time limit) with instances.get (--known-end=auto). Before the
// lead, the Node carries the end under the project's own label, the
// MaintenancePlanned condition says it, and every pod is told a pending
// window that opens at the end. From the lead on, the node drains by
// force with the end as its deadline: every pod's grace ends before the
// end, a grace longer than the time left included, and the interruption
// is counted once as TerminationEvent/AutomaticTermination.
func TestKnownEnd(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	ns := world.Namespace(t)
	const name = "bin-end-0"
	world.NodeT(t, testworld.NodeSpec{Name: name})
	// The agent must start, and tell the pods, within the 55 s before the
	// drain: far more than it needs on a loaded machine.
	const lead = 45 * time.Second
	end := time.Now().Add(100 * time.Second).Truncate(time.Second)
	emu := gceemu.StartT(t, gceemu.Config{Name: name, TimeLimit: &gceemu.TimeLimit{End: end, MaxRunDuration: 7 * 24 * time.Hour, Action: "DELETE", FlexStart: true}})
	graces := map[string]int64{"short": 20, "long": 600} // the long one's grace must be cut to end before the end
	for pod, grace := range graces {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod, Annotations: map[string]string{testworld.PodDeleteDelayAnnotation: "1s"}},
			Spec: corev1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/trainer:1"}}}}
		if _, err := world.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for pod := range graces {
		world.WaitPod(t, ns, pod, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	asked := map[string]func() *corev1.Pod{}
	for pod := range graces {
		asked[pod] = world.PodSeen(t, ns, pod, "asked to stop", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	}
	proc := runAgent(t, name, emu, "--compute-endpoint", emu.ComputeEndpoint(), "--known-end-lead", lead.String())
	poll(t, "healthy", 30*time.Second, func() bool { code, _ := proc.get("/healthz"); return code == 200 })

	endLabel := strconv.FormatInt(end.Unix(), 10)
	world.WaitNode(t, name, "labelled with its end and planned", func(n *corev1.Node) bool {
		if n.Labels[protocol.LabelKnownEnd] != endLabel || protocol.ReadAgentState(n).Active() {
			return false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == protocol.ConditionMaintenancePlanned && c.Status == corev1.ConditionTrue && c.Reason == "KnownEnd" {
				return true
			}
		}
		return false
	})
	world.WaitEvent(t, name, protocol.EventKnownEndScheduled, "maxRunDuration 604800s", "deletes the VM")
	for pod := range graces {
		world.WaitPod(t, ns, pod, "told of the end as a pending window", func(p *corev1.Pod) bool {
			n, err := protocol.ParseWorkloadNotice(p.Annotations[protocol.PodAnnotationNotice])
			return err == nil && n.Phase == protocol.NoticePending && n.WindowStart.Equal(end)
		})
	}

	n := world.WaitNode(t, name, "draining for its end", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Reason == protocol.ReasonKnownEnd
	})
	if st := protocol.ReadAgentState(n); !st.Deadline.Equal(end) || st.Started.Before(end.Add(-lead-time.Second)) {
		t.Errorf("drains from %s by %s; want from %s on, by the end %s", st.Started, st.Deadline, end.Add(-lead), end)
	}
	world.WaitEvent(t, name, protocol.EventKnownEndDrain, end.UTC().Format(time.RFC3339))
	for pod := range graces {
		p := asked[pod]()
		// The deletion timestamp is when the grace ends.
		if p.DeletionTimestamp.After(end) {
			t.Errorf("%s's grace ends at %s, after the VM's end at %s", pod, p.DeletionTimestamp.UTC(), end)
		}
	}
	n = world.WaitNode(t, name, "drained and counted", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	if c := protocol.ReadAgentState(n).Interruptions; len(c) != 1 || c[protocol.KnownEnd.Key()] != 1 {
		t.Errorf("interruptions %v; want one %s", c, protocol.KnownEnd.Key())
	}
}

// TestKnownEndLeadFitsThePods: a flex-start VM with 45 minutes left, well
// within the hour of --known-end-lead, whose pods have 30 s graces: the
// agent tells the pods of the end and keeps them running; its drain is
// due as long before the end as they need (30 s and the drain's 3 s
// margin) and a minute more, as its Event says.
func TestKnownEndLeadFitsThePods(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 3*time.Minute)
	ns := world.Namespace(t)
	const name = "bin-end-1"
	world.NodeT(t, testworld.NodeSpec{Name: name})
	end := time.Now().Add(45 * time.Minute).Truncate(time.Second)
	emu := gceemu.StartT(t, gceemu.Config{Name: name, TimeLimit: &gceemu.TimeLimit{End: end, MaxRunDuration: 2 * time.Hour, FlexStart: true}})
	grace := int64(30)
	for _, pod := range []string{"rank-0", "rank-1"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod},
			Spec: corev1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/trainer:1"}}}}
		if _, err := world.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		world.WaitPod(t, ns, pod, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	runAgent(t, name, emu, "--compute-endpoint", emu.ComputeEndpoint())
	drainFrom := end.Add(-33*time.Second - lifecycle.KnownEndSlack)
	// The Event is written by the step that decided on the end: that step
	// drained nothing.
	world.WaitEvent(t, name, protocol.EventKnownEndScheduled, "drains from "+drainFrom.UTC().Format(time.RFC3339))
	n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := protocol.ReadAgentState(n); st.Active() || protocol.HasTaint(n) || n.Labels[protocol.LabelKnownEnd] != strconv.FormatInt(end.Unix(), 10) {
		t.Errorf("45 minutes before its end: %s %s, tainted %t, end label %q; want it in service, its end mirrored", st.Phase, st.Reason, protocol.HasTaint(n), n.Labels[protocol.LabelKnownEnd])
	}
	for _, pod := range []string{"rank-0", "rank-1"} {
		if p, err := world.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Errorf("%s: %v, deleted %v; want it running", pod, err, p.DeletionTimestamp)
		}
	}
}
