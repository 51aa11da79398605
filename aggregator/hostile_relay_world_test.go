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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/internal/plugin"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// The Compute relay against one hostile node: what its agent's token
// writes on its own Node is an ask, and the leader makes no call, and
// gives no place under the caps, that keys the node cannot write do not
// stand behind.

// TestHostileRelayForgedGroupMaintenance: one member of a two-VM
// reservation sub-block (both running their workload, a maintenance
// pending on each) writes with its agent's token, on its own Node, a
// manual maintenance under way and an ask for its group's maintenance.
// No one asked for it (no perform-maintenance label): the leader answers
// not-vouched, with a Warning Event and the metric, calls Compute Engine
// for neither VM nor the sub-block, and the node takes no place under its
// pool's caps.
func TestHostileRelayForgedGroupMaintenance(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	project := relayProject(t)
	p := newProcs(t, "--eviction-retry-interval", "1s", "--reservation-groups", "subblock")
	p.f.Project = project
	sb := gceemu.SubBlock{Reservation: "hr-res", Block: "block-5", SubBlock: "sub-5"}
	hosts, emus := subBlockMembers(t, ctx, p, sb, "hrg", "a4h", 2)
	world.WaitNodes(t, hosts, "mirrored their notices", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	for i := range hosts {
		world.WaitPod(t, p.ns, fmt.Sprintf("rank-%d", i), "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	addr := relayAggregator(t, p, project, "hrg", "", "--reservation-groups", "subblock")

	hostile := hosts[0]
	h := hostileAgent(t, p, hostile)
	const id = "forged-group-1"
	forge(t, h, hostile, func(n *corev1.Node) {
		now := time.Now()
		protocol.WriteAgentState(n, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: now,
			Deadline: now.Add(time.Hour), RequestID: id, BootID: n.Status.NodeInfo.BootID, Drain: protocol.DrainDone})
		n.Annotations[protocol.AnnotationComputeCall] = protocol.Encode(protocol.ComputeCall{ID: id, Method: protocol.CallGroupMaintenance, SubBlock: true})
	})
	world.WaitEvent(t, hostile, protocol.EventComputeCallNotVouched, "no one asked")
	n := world.WaitNode(t, hostile, "answered", func(n *corev1.Node) bool {
		a, ok := protocol.ReadComputeAnswer(n)
		return ok && a.ID == id
	})
	if a, _ := protocol.ReadComputeAnswer(n); a.Outcome != protocol.CallNotVouched || a.Operation != "" {
		t.Errorf("the forged group ask's answer %+v; want %s and no operation", a, protocol.CallNotVouched)
	}
	waitMetric(t, ctx, addr, `maintenance_handler_aggregator_compute_calls_total{method="groupMaintenance",outcome="not-vouched"}`, 1)
	if c := callsTo(emus); c != 0 {
		t.Errorf("%d Compute Engine calls for the sub-block's VMs; want none", c)
	}
	for _, e := range emus {
		if calls := e.Calls(); len(calls) != 0 {
			t.Errorf("calls %+v; want none", calls)
		}
	}
	// What a person reading the status sees: no node of the pool in
	// voluntary maintenance.
	c, _ := clients(t)
	in, err := plugin.Read(ctx, c, time.Now(), plugin.ReadOptions{Pool: "a4h", PoolLabel: protocol.LabelNodePool, ReservationGroups: protocol.ReservationGroupSubblock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range plugin.BuildStatus(in).Pools {
		if ps.Pool == "a4h" && ps.Voluntary != 0 {
			t.Errorf("the pool a4h has %d node(s) in voluntary maintenance; want none (the forged one takes no place)", ps.Voluntary)
		}
	}
}

// TestHostileRelayOneApprovalOneReport: a faulty node's repair is
// approved, for one request: its agent drains and asks for the report
// with that request, the leader makes it and withdraws the approval with
// its answer. The node's agent token then asks for a report again (a
// fault's repair under way, a new request): the leader answers
// not-vouched, and Compute Engine has had one report.
func TestHostileRelayOneApprovalOneReport(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	project := relayProject(t)
	p := newProcs(t, "--eviction-retry-interval", "1s")
	p.f.Project = project
	const pool = "hrr"
	machines := relayPool(t, ctx, p, pool, 2)
	configMap(t, p.ns, fmt.Sprintf(faultPolicy, pool, 2*time.Second))
	addr := relayAggregator(t, p, project, pool, "maintenance-handler")
	world.WaitNodes(t, []string{pool + "-0"}, "told what instances.get says of its VM", func(n *corev1.Node) bool {
		f, ok := protocol.ReadVMFacts(n)
		return ok && f.Error == ""
	})

	faulty := pool + "-0"
	setCondition(t, faulty, corev1.ConditionTrue)
	n := world.WaitNode(t, faulty, "approved for a repair", func(n *corev1.Node) bool { _, ok := protocol.ReadRepairApproval(n); return ok })
	approval, _ := protocol.ReadRepairApproval(n)
	if approval.Request == "" {
		t.Fatalf("the approval %+v names no request", approval)
	}
	world.WaitNode(t, faulty, "reported, its approval withdrawn with the answer", func(n *corev1.Node) bool {
		a, ok := protocol.ReadComputeAnswer(n)
		_, approved := n.Annotations[protocol.AnnotationFaultRepair]
		return ok && a.ID == approval.Request && a.Operation != "" && !approved
	})
	if got := reports(machines[faulty]); len(got) != 1 || got[0].RequestID != approval.Request {
		t.Fatalf("reports %+v; want one, for the approval's request %s", got, approval.Request)
	}

	// The node, holding its agent's token, asks for a second report.
	h := hostileAgent(t, p, faulty)
	const again = "second-report"
	forge(t, h, faulty, func(n *corev1.Node) {
		st := protocol.ReadAgentState(n)
		st.Phase, st.Reason, st.RepairCall, st.RequestID, st.Requested = protocol.PhaseDraining, protocol.ReasonFault, protocol.RepairReport, again, time.Now()
		st.Call = protocol.Call{}
		protocol.WriteAgentState(n, st)
		n.Annotations[protocol.AnnotationComputeCall] = protocol.Encode(protocol.ComputeCall{ID: again, Method: protocol.CallReportHostAsFaulty,
			Behavior: approval.Behavior, Description: "again"})
	})
	n = world.WaitNode(t, faulty, "answered", func(n *corev1.Node) bool {
		a, ok := protocol.ReadComputeAnswer(n)
		return ok && a.ID == again
	})
	if a, _ := protocol.ReadComputeAnswer(n); a.Outcome != protocol.CallNotVouched || a.Operation != "" {
		t.Errorf("the second report's answer %+v; want %s", a, protocol.CallNotVouched)
	}
	waitMetric(t, ctx, addr, `maintenance_handler_aggregator_compute_calls_total{method="reportHostAsFaulty",outcome="not-vouched"}`, 1)
	if got := reports(machines[faulty]); len(got) != 1 {
		t.Errorf("reports %+v; want the one the approval bought", got)
	}
}

// TestHostileRelayRotatingReads: a node whose agent's token asks for one
// VM read after another, each under a new ID, has the leader read its VM
// no more than its bucket's burst: the next read waits for the node's
// rate (relay_limited_total), and the project's instances.get calls stay
// bounded.
func TestHostileRelayRotatingReads(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	project := relayProject(t)
	p := newProcs(t)
	p.f.Project = project
	const pool = "hrv"
	relayPool(t, ctx, p, pool, 1)
	addr := relayAggregator(t, p, project, pool, "")
	node := pool + "-0"
	world.WaitNode(t, node, "told what instances.get says of its VM", func(n *corev1.Node) bool {
		f, ok := protocol.ReadVMFacts(n)
		return ok && f.Error == ""
	})
	h := hostileAgent(t, p, node)
	const reads = `maintenance_handler_aggregator_compute_calls_total{method="instances.get",outcome="accepted"}`
	const burst = 10 // the relay's burst per node and kind
	made := int(metricSumQuiet(addr, reads))
	for i := made; i < burst; i++ {
		id := fmt.Sprintf("rotated-%d", i)
		forge(t, h, node, func(n *corev1.Node) { n.Annotations[protocol.AnnotationVMRead] = id })
		world.WaitNode(t, node, "its read "+id+" answered", func(n *corev1.Node) bool {
			f, ok := protocol.ReadVMFacts(n)
			return ok && f.ID == id
		})
	}
	forge(t, h, node, func(n *corev1.Node) { n.Annotations[protocol.AnnotationVMRead] = "rotated-over" })
	waitMetric(t, ctx, addr, `maintenance_handler_aggregator_relay_limited_total{kind="read"}`, 1)
	// The held read is made once the node's rate allows, a minute on.
	if got := metricSumQuiet(addr, reads); got > burst+1 {
		t.Errorf("the leader read the VM %v times; want at most %d", got, burst+1)
	}
}

// TestHostileFutureRepairFillsNoRate: a node whose agent's token writes
// that its last repair ended a year from now takes no place under its
// pool's repairRate (one repair a week): another node of the pool that a
// person reports faulty has its repair approved, and the liar's value is
// said as unreadable (a Warning Event naming the key).
func TestHostileFutureRepairFillsNoRate(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	const pool = "hfr"
	liar, real := pool+"-liar", pool+"-real"
	for _, name := range []string{liar, real} {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: pool})
	}
	configMap(t, ns, "pools:\n  "+pool+":\n    faults:\n      maxInRepair: \"5\"\n      repairRate: 1/168h\n")
	h := world.HostileNode(t, liar)
	forge(t, h.Agent, liar, func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationLastFaultRepair] = protocol.Encode(protocol.LastFaultRepair{Outcome: protocol.RepairDone,
			Ended: time.Now().Add(365 * 24 * time.Hour).UTC()})
	})
	setLabel(t, testworld.Ctx(t, 10*time.Second), real, protocol.LabelReportFaulty, protocol.BehaviorChipError)
	startAggregator(t, ns, "maintenance-handler")
	world.WaitEvent(t, real, protocol.EventFaultRepairApproved)
	world.WaitEvent(t, liar, protocol.EventUnreadableState, protocol.AnnotationLastFaultRepair)
}

// relayProject is a project whose Compute API only the aggregator's
// identity may call.
func relayProject(t *testing.T) *gceemu.Project {
	t.Helper()
	project, err := gceemu.NewProject()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(project.Close)
	return project
}

// relayPool adds size GPU nodes of pool, each running a workload pod.
func relayPool(t *testing.T, ctx context.Context, p *procs, pool string, size int) map[string]*vms.VM {
	t.Helper()
	machines := map[string]*vms.VM{}
	for i := range size {
		name := fmt.Sprintf("%s-%d", pool, i)
		v, err := p.f.Add(ctx, testworld.NodeSpec{Name: name, Pool: pool}, gceemu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		machines[name] = v
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		grace := int64(3)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-" + name, Namespace: p.ns},
			Spec: corev1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "train", Image: "trainer", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("8")}, Limits: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("8")}}}}}}
		if _, err := world.Client.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return machines
}

// relayAggregator starts the aggregator as shipped, calling Compute
// Engine for the agents with its own identity, and returns its metrics
// address.
func relayAggregator(t *testing.T, p *procs, project *gceemu.Project, id, configMap string, args ...string) string {
	t.Helper()
	addr := testworld.FreeAddrT(t)
	agg, err := world.StartProcessEnv("aggregator-"+id, []string{"GCE_METADATA_HOST=" + project.Identity.Host()}, filepath.Join(p.bins, "aggregator"),
		append([]string{"--kubeconfig", world.AggregatorKubeconfigT(t, p.ns), "--namespace", p.ns, "--identity", "agg-" + id, "--config-map", configMap,
			"--interval", "1s", "--listen-address", addr, "--log-level", "warn", "--compute-endpoint", project.ComputeEndpoint()}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agg.Kill() })
	return addr
}

// hostileAgent stops node's agent (what is written on its Node from now
// on is the attacker's) and returns the node's agent token, bound to a
// pod on it.
func hostileAgent(t *testing.T, p *procs, node string) kubernetes.Interface {
	t.Helper()
	for _, v := range p.f.VMs {
		if v.Name == node {
			if err := v.Agent.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return world.HostileNode(t, node).Agent
}

// forge changes node's Node with c, the node's own agent token.
func forge(t *testing.T, c kubernetes.Interface, node string, change func(*corev1.Node)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		change(n)
		_, err = c.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the node's agent token writing its own Node: %v", err)
	}
}
