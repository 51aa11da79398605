package aggregator_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// TestRelayNodesHoldNoComputePermission: installed as by default, no
// node's service account may make any Compute Engine call (each VM's
// emulator refuses its own token), and the aggregator, with an identity
// of its own, makes every call the agents ask for through their Nodes:
// each VM's read, a fault's report, a manual maintenance's
// performMaintenance, each followed to its end. An ask that is not what
// the aggregator knows of the node (a forged request ID) is not made.
func TestRelayNodesHoldNoComputePermission(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	project, err := gceemu.NewProject()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(project.Close)
	p := newProcs(t, "--eviction-retry-interval", "1s")
	p.f.Project = project
	const pool = "relay"
	var names []string
	machines := map[string]*vms.VM{}
	for i := range 3 {
		name := fmt.Sprintf("%s-%d", pool, i)
		names = append(names, name)
		v, err := p.f.Add(ctx, testworld.NodeSpec{Name: name, Pool: pool}, gceemu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		machines[name] = v
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	grace := int64(3)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: p.ns},
		Spec: corev1.PodSpec{NodeName: names[0], TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "train", Image: "trainer", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("8")}, Limits: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("8")}}}}}}
	if _, err := world.Client.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	configMap(t, p.ns, fmt.Sprintf(faultPolicy, pool, 2*time.Second))
	addr := testworld.FreeAddrT(t)
	agg, err := world.StartProcessEnv("aggregator-relay", []string{"GCE_METADATA_HOST=" + project.Identity.Host()}, filepath.Join(p.bins, "aggregator"),
		"--kubeconfig", world.AggregatorKubeconfigT(t, p.ns), "--namespace", p.ns, "--identity", "agg-relay", "--config-map", "maintenance-handler",
		"--interval", "1s", "--listen-address", addr, "--log-level", "warn", "--compute-endpoint", project.ComputeEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agg.Kill() })

	// Every agent learns its VM through the aggregator's instances.get.
	world.WaitNodes(t, names, "told what instances.get says of its VM", func(n *corev1.Node) bool {
		f, ok := protocol.ReadVMFacts(n)
		return ok && f.ID == n.Annotations[protocol.AnnotationVMRead] && f.Error == "" && f.Status == "RUNNING"
	})

	// A fault's repair: the report is the aggregator's.
	faulty := names[0]
	back := p.f.RepairOnReport(ctx, machines[faulty], 2*time.Second, func() error { return writeCondition(ctx, faulty, "") })
	setCondition(t, faulty, corev1.ConditionTrue)
	world.WaitEvent(t, faulty, protocol.EventFaultRepairApproved)
	if err := <-back; err != nil {
		t.Fatalf("the VM's return from its repair: %v", err)
	}
	n := world.WaitNode(t, faulty, "back in service from its repair", inService)
	if st := protocol.ReadAgentState(n); st.LastRepair.Outcome != protocol.RepairDone {
		t.Errorf("%s's last repair %+v; want done", faulty, st.LastRepair)
	}
	if got := reports(machines[faulty]); len(got) != 1 || got[0].Token != project.Identity.AccessToken() {
		t.Errorf("reports %+v; want one, made with the aggregator's token", got)
	}

	// A manual maintenance: the node drains, the aggregator calls, and
	// Compute Engine begins it.
	manual := names[2]
	machines[manual].Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 20, 2, 0, 0, 0, time.UTC), 4*time.Hour))
	world.WaitNode(t, manual, "mirroring its notice", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	setLabel(t, ctx, manual, protocol.LabelPerformMaintenance, protocol.TriggerValue)
	world.WaitEvent(t, manual, protocol.EventManualAccepted)
	if calls := machines[manual].Emu.Calls(); len(calls) != 1 || calls[0].Method != "performMaintenance" || calls[0].Status != 200 ||
		calls[0].Token != project.Identity.AccessToken() {
		t.Errorf("%s's calls %+v; want one performMaintenance, made with the aggregator's token", manual, calls)
	}

	// A forged ask: a request ID that is not the node's maintenance,
	// written where the agent no longer runs (it would remove an ask its
	// maintenance does not make).
	forged := names[1]
	if err := machines[forged].Agent.Kill(); err != nil {
		t.Fatal(err)
	}
	write(t, forged, func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationComputeCall] = protocol.Encode(protocol.ComputeCall{ID: "forged", Method: protocol.CallPerformMaintenance})
	})
	world.WaitEvent(t, forged, protocol.EventComputeCallNotVouched, "not the one asked for")
	n = world.WaitNode(t, forged, "answered not vouched", func(n *corev1.Node) bool {
		a, ok := protocol.ReadComputeAnswer(n)
		return ok && a.ID == "forged"
	})
	if a, _ := protocol.ReadComputeAnswer(n); a.Outcome != protocol.CallNotVouched || a.Operation != "" {
		t.Errorf("the forged ask's answer %+v; want %s and no operation", a, protocol.CallNotVouched)
	}
	waitMetric(t, ctx, addr, `maintenance_handler_aggregator_compute_calls_total{method="performMaintenance",outcome="not-vouched"}`, 1)

	// No VM's own token made a call that Compute Engine took, and the
	// forged ask called nothing.
	for _, name := range names {
		for _, c := range machines[name].Emu.Calls() {
			if c.Token != project.Identity.AccessToken() {
				t.Errorf("%s: %s made with another token than the aggregator's", name, c.Method)
			}
		}
	}
	if calls := machines[forged].Emu.Calls(); len(calls) != 0 {
		t.Errorf("%s's calls %+v; want none", forged, calls)
	}
}
