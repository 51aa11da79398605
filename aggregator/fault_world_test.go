package aggregator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/gkeemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// faultPolicy finds a faulty GPU by the condition GPUUnhealthy held for
// the given time, or by the agent's own device health condition, one node
// of the pool in repair at a time.
const faultPolicy = `
pools:
  %[1]s:
    faults:
      conditions:
      - type: GPUUnhealthy
        for: %[2]s
        behavior: UNRECOVERABLE_GPU_ERROR
      - type: maintenance-handler.io/DeviceUnhealthy
        for: %[2]s
        behavior: UNRECOVERABLE_GPU_ERROR
      maxInRepair: "1"
      drainTimeout: 1m
`

// faultyPool is a pool of GPU nodes with real agents, each running one
// workload pod (3 s of grace), and a real aggregator reading faultPolicy.
type faultyPool struct {
	p     *procs
	vms   map[string]*vms.VM
	agg   string // the aggregator's metrics address
	names []string
}

func newFaultyPool(t testing.TB, ctx context.Context, pool string, size int) *faultyPool {
	t.Helper()
	return newFaultyPoolOf(t, ctx, pool, size, 2*time.Second, func(*testworld.NodeSpec) {})
}

// newFaultyPoolOf is newFaultyPool, the condition held for hold, each
// node's spec changed by change.
func newFaultyPoolOf(t testing.TB, ctx context.Context, pool string, size int, hold time.Duration, change func(*testworld.NodeSpec)) *faultyPool {
	t.Helper()
	return newFaultyPoolOfVMs(t, ctx, pool, size, hold, change, gceemu.Config{})
}

// newFaultyPoolOfVMs is newFaultyPoolOf, its VMs as cfg says, their agents
// run with agentArgs too.
func newFaultyPoolOfVMs(t testing.TB, ctx context.Context, pool string, size int, hold time.Duration, change func(*testworld.NodeSpec), cfg gceemu.Config, agentArgs ...string) *faultyPool {
	t.Helper()
	fp := &faultyPool{p: newProcs(t, append([]string{"--eviction-retry-interval", "1s"}, agentArgs...)...), vms: map[string]*vms.VM{}}
	for i := range size {
		name := fmt.Sprintf("%s-%d", pool, i)
		fp.names = append(fp.names, name)
		spec := testworld.NodeSpec{Name: name, Pool: pool}
		change(&spec)
		v, err := fp.p.f.Add(ctx, spec, cfg)
		if err != nil {
			t.Fatal(err)
		}
		fp.vms[name] = v
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		grace := int64(3)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-" + name, Namespace: fp.p.ns},
			Spec: corev1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "train", Image: "trainer", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("8")}, Limits: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("8")}}}}}}
		if _, err := world.Client.CoreV1().Pods(fp.p.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	world.WaitNodes(t, fp.names, "published busy", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationBusy] != "" })
	configMap(t, fp.p.ns, fmt.Sprintf(faultPolicy, pool, hold))
	fp.agg = testworld.FreeAddrT(t)
	fp.p.aggregatorWith("agg-"+pool, fp.agg, "maintenance-handler")
	return fp
}

// setCondition writes the GPUUnhealthy condition on name, as a fault
// detector does (status "" removes it).
func setCondition(t testing.TB, name string, status corev1.ConditionStatus) {
	t.Helper()
	if err := writeCondition(testworld.Ctx(t, 30*time.Second), name, status); err != nil {
		t.Fatal(err)
	}
}

func writeCondition(ctx context.Context, name string, status corev1.ConditionStatus) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == "GPUUnhealthy" })
		if status != "" {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "GPUUnhealthy", Status: status, Reason: "XID79",
				Message: "GPU has fallen off the bus", LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()})
		}
		_, err = world.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// reports are the fault reports v's Compute Engine accepted.
func reports(v *vms.VM) []gceemu.Call {
	var out []gceemu.Call
	for _, c := range v.Emu.Calls() {
		if c.Method == "reportHostAsFaulty" && c.Status == 200 {
			out = append(out, c)
		}
	}
	return out
}

func inService(n *corev1.Node) bool {
	st := protocol.ReadAgentState(n)
	_, approved := n.Annotations[protocol.AnnotationFaultRepair]
	return st.Phase == protocol.PhaseIdle && !protocol.HasTaint(n) && !protocol.HasTaintKey(n, protocol.TaintFaulty) && !n.Spec.Unschedulable && !approved
}

// TestFaultDrainedReportedOnceAndBack: real agents and a real aggregator.
// Two nodes' GPUs turn unhealthy: both are tainted faulty at once; the
// pool's cap lets one repair run, and the other waits, said. The first is
// drained (its pod told to stop with its grace) and reported once, with
// the behavior and the signal; Compute Engine stops the VM at once, as a
// report's IMMEDIATE schedule does (the emulator plays it), and when the
// VM comes back healthy, the node is back in service and the repair is
// counted. Then the
// second's repair starts; its agent lacks the permission: a Warning naming
// it, the metric, and the node stays drained and tainted faulty.
func TestFaultDrainedReportedOnceAndBack(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	fp := newFaultyPool(t, ctx, "xid", 3)
	first, second := "xid-0", "xid-1"
	fp.vms[second].Emu.Deny(gceemu.PermissionReportHostAsFaulty, true)
	told := world.PodSeen(t, fp.p.ns, "train-"+first, "told to stop with its grace", func(p *corev1.Pod) bool { // from before its drain can begin
		return p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 3
	})
	setCondition(t, first, corev1.ConditionTrue)
	setCondition(t, second, corev1.ConditionTrue)

	world.WaitNodes(t, []string{first, second}, "tainted faulty", func(n *corev1.Node) bool { return protocol.HasTaintKey(n, protocol.TaintFaulty) })
	world.WaitEvent(t, first, protocol.EventFaultRepairApproved, "UNRECOVERABLE_GPU_ERROR", "GPUUnhealthy")
	world.WaitEvent(t, second, protocol.EventFaultDetected, "the pool xid has 1 node(s) in repair, its cap")
	// Compute Engine stops the VM the moment it takes the report, and
	// brings it back on a healthy host.
	back := fp.p.f.RepairOnReport(ctx, fp.vms[first], 2*time.Second, func() error { return writeCondition(ctx, first, "") })
	told()
	n := world.WaitNode(t, first, "asking for its repair", func(n *corev1.Node) bool {
		return n.Annotations[protocol.AnnotationRepairCall] == string(protocol.RepairReport)
	})
	// The waiting node keeps its workload.
	if p, err := world.Client.CoreV1().Pods(fp.p.ns).Get(ctx, "train-"+second, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod of %s, whose repair waits: %v, %v; want it running", second, err, p.DeletionTimestamp)
	}
	if err := <-back; err != nil {
		t.Fatalf("the VM's return from its repair: %v", err)
	}
	got := reports(fp.vms[first])
	if len(got) != 1 || got[0].Behavior != protocol.BehaviorUnrecoverableGPUError || got[0].Schedule != "IMMEDIATE" ||
		!strings.Contains(got[0].Description, "GPUUnhealthy") || got[0].RequestID != n.Annotations[protocol.AnnotationRequestID] {
		t.Fatalf("reports %+v; want one, of UNRECOVERABLE_GPU_ERROR, naming the condition, with the request ID on the Node", got)
	}
	n = world.WaitNode(t, first, "back in service", inService)
	st := protocol.ReadAgentState(n)
	if st.LastRepair.Outcome != protocol.RepairDone || st.Interruptions[protocol.FaultRepair.Key()] != 1 {
		t.Errorf("back: last repair %+v, interruptions %v; want repaired and one %s", st.LastRepair, st.Interruptions, protocol.FaultRepair.Key())
	}
	world.WaitEvent(t, first, protocol.EventFaultRepaired)
	if got := reports(fp.vms[first]); len(got) != 1 {
		t.Errorf("%d reports of %s; want one", len(got), first)
	}

	// The cap is free: the second node's repair starts, and its report is
	// refused for the permission.
	world.WaitEvent(t, second, protocol.EventFaultRepairApproved)
	world.WaitEvent(t, second, protocol.EventPermissionDenied, compute.ReportPermission)
	world.WaitEvent(t, second, protocol.EventFaultRepairFailed, "stays faulty")
	world.WaitNode(t, second, "drained, tainted faulty, the approval gone", func(n *corev1.Node) bool {
		_, approved := n.Annotations[protocol.AnnotationFaultRepair]
		return !approved && protocol.HasTaintKey(n, protocol.TaintFaulty) && protocol.ReadAgentState(n).LastRepair.Outcome == protocol.RepairPermissionDenied
	})
	// The refused repair repaired nothing: the condition, written before
	// it, still holds, and the node stays faulty through later passes.
	passes := `maintenance_handler_aggregator_pass_duration_seconds_count`
	waitMetric(t, ctx, fp.agg, passes, metricSumQuiet(fp.agg, passes)+3)
	if n, err := world.Client.CoreV1().Nodes().Get(ctx, second, metav1.GetOptions{}); err != nil || !protocol.HasTaintKey(n, protocol.TaintFaulty) {
		t.Errorf("%s after a refused repair, three passes on: %v, taints %v; want it tainted faulty still", second, err, n.Spec.Taints)
	}
	waitMetric(t, ctx, fp.vms[second].MetricsAddr, `maintenance_handler_agent_compute_permission_denied_total{node_name="xid-1",node_pool_name="xid",permission="`+compute.ReportPermission+`"}`, 1)
	waitMetric(t, ctx, fp.vms[second].MetricsAddr, `maintenance_handler_agent_fault_repairs_total{behavior="UNRECOVERABLE_GPU_ERROR",node_name="xid-1",node_pool_name="xid",outcome="permission_denied",source="condition"}`, 1)
	if p, err := world.Client.CoreV1().Pods(fp.p.ns).Get(ctx, "train-"+second, metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("the pod of %s is still running after its drain", second)
	}
}

// TestFaultPersonsRequestStandsRefused: a person asks for a node's repair,
// and Compute Engine refuses the report (its agent lacks the
// permission). The request stands: the label stays, the node stays
// drained and tainted faulty, and its repair waits for the pool's
// cool-down before it is approved again; removing the label withdraws
// the request, and the node goes back in service.
func TestFaultPersonsRequestStandsRefused(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	fp := newFaultyPool(t, ctx, "ask", 1)
	name := fp.names[0]
	fp.vms[name].Emu.Deny(gceemu.PermissionReportHostAsFaulty, true)
	setLabel(t, ctx, name, protocol.LabelReportFaulty, protocol.BehaviorChipError)
	world.WaitEvent(t, name, protocol.EventFaultRepairApproved, "CHIP_ERROR", "a person")
	world.WaitEvent(t, name, protocol.EventFaultRepairFailed, "stays faulty")
	world.WaitEvent(t, name, protocol.EventFaultDetected, "cool-down")
	n := world.WaitNode(t, name, "the approval gone", func(n *corev1.Node) bool {
		_, approved := n.Annotations[protocol.AnnotationFaultRepair]
		return !approved && protocol.ReadAgentState(n).LastRepair.Outcome == protocol.RepairPermissionDenied
	})
	if _, asked := n.Labels[protocol.LabelReportFaulty]; !asked || !protocol.HasTaintKey(n, protocol.TaintFaulty) {
		t.Errorf("after the refusal: the request %t, tainted faulty %t; want both", asked, protocol.HasTaintKey(n, protocol.TaintFaulty))
	}
	setLabel(t, ctx, name, protocol.LabelReportFaulty, "")
	world.WaitNode(t, name, "the request withdrawn: untainted", func(n *corev1.Node) bool { return !protocol.HasTaintKey(n, protocol.TaintFaulty) })
}

// TestFaultStaleConditionRepairsOnce: a node's condition stays True
// through its repair (the drain evicted its detector, which never came
// back to clear it), the pool's cool-down a second. Back from the repair,
// the node goes back in service, untainted, and no second repair starts,
// pass after pass; once the detector writes the condition again, it does.
func TestFaultStaleConditionRepairsOnce(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	fp := newFaultyPool(t, ctx, "stale", 1)
	name := fp.names[0]
	cm, err := world.Client.CoreV1().ConfigMaps(fp.p.ns).Get(ctx, "maintenance-handler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[policy.ConfigKey] += "      cooldown: 1s\n"
	if _, err := world.Client.CoreV1().ConfigMaps(fp.p.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	back := fp.p.f.RepairOnReport(ctx, fp.vms[name], 2*time.Second, nil)
	setCondition(t, name, corev1.ConditionTrue)
	if err := <-back; err != nil {
		t.Fatalf("the VM's return from its repair: %v", err)
	}
	world.WaitNode(t, name, "back in service, untainted, its condition still True", func(n *corev1.Node) bool {
		return inService(n) && protocol.ReadAgentState(n).LastRepair.Outcome == protocol.RepairDone
	})
	passes := `maintenance_handler_aggregator_pass_duration_seconds_count`
	waitMetric(t, ctx, fp.agg, passes, metricSumQuiet(fp.agg, passes)+3)
	if got := reports(fp.vms[name]); len(got) != 1 {
		t.Fatalf("%d reports on a condition from before the repair; want one", len(got))
	}
	setCondition(t, name, corev1.ConditionTrue) // the detector, back, writes it again
	select {
	case err := <-back:
		if err != nil {
			t.Fatalf("the VM's return from its second repair: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("no second repair once the detector wrote the condition again")
	}
	if got := reports(fp.vms[name]); len(got) != 2 {
		t.Errorf("%d reports once the detector wrote the condition again; want two", len(got))
	}
}

// TestFaultReportFollowedToItsEnd: Compute Engine takes the report and
// keeps the VM RUNNING through its operation, then stops it ("Report
// faulty host"). Here the operation runs 16 s, past the agent's
// --manual-start-timeout of 5 s, which once bounded the wait: the scaled
// form of a report running 16 minutes against the 15-minute default. The
// node names the operation, and stays drained and cordoned from then until
// the VM stops (every version of the Node, seen through a watch); the stop
// is counted once as the host's repair, after one report.
func TestFaultReportFollowedToItsEnd(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	fp := newFaultyPoolOfVMs(t, ctx, "op16", 1, 2*time.Second, func(*testworld.NodeSpec) {}, gceemu.Config{}, "--manual-start-timeout", "5s")
	name := fp.names[0]
	v := fp.vms[name]
	v.Emu.SetReportDuration(16 * time.Second)
	n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	boot := n.Status.NodeInfo.BootID
	var mu sync.Mutex
	var named bool
	var broken []string
	inf := informers.NewSharedInformerFactoryWithOptions(world.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + name
	})).Core().V1().Nodes().Informer()
	firstSeen(t, ctx, inf, func(o any) (string, bool) {
		n := o.(*corev1.Node)
		st := protocol.ReadAgentState(n)
		mu.Lock()
		defer mu.Unlock()
		if n.Status.NodeInfo.BootID != boot {
			return "", false
		}
		named = named || st.Call.Operation != ""
		if named && (st.Phase != protocol.PhaseTerminating || !n.Spec.Unschedulable) {
			broken = append(broken, fmt.Sprintf("%s cordoned %t", st.Phase, n.Spec.Unschedulable))
		}
		return "", false
	})
	back := fp.p.f.RepairOnReport(ctx, v, 2*time.Second, func() error { return writeCondition(ctx, name, "") })
	setCondition(t, name, corev1.ConditionTrue)
	if err := <-back; err != nil {
		t.Fatalf("the VM's return from its repair: %v", err)
	}
	st := protocol.ReadAgentState(world.WaitNode(t, name, "back in service", inService))
	mu.Lock()
	defer mu.Unlock()
	if !named || len(broken) > 0 {
		t.Errorf("while the report's operation ran: operation on the Node %t, not drained and cordoned %v; want named, and drained throughout", named, broken)
	}
	if got := reports(v); len(got) != 1 {
		t.Errorf("%d reports; want one", len(got))
	}
	if st.LastRepair.Outcome != protocol.RepairDone || st.Interruptions[protocol.FaultRepair.Key()] != 1 {
		t.Errorf("back: last repair %+v, interruptions %v; want repaired, counted once as %s", st.LastRepair, st.Interruptions, protocol.FaultRepair.Key())
	}
}

// TestFaultNotReportableDrainsNothing: a GPU node whose VM Compute Engine
// takes no faulty-host report from (a G2 VM on demand, as its
// instances.get says) turns faulty, and its repair is approved: the node
// is tainted faulty, and its agent says why no report can come, drains
// nothing (its pod, held by a budget, keeps running) and calls nothing.
func TestFaultNotReportableDrainsNothing(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	fp := newFaultyPoolOfVMs(t, ctx, "g2", 1, 2*time.Second, func(*testworld.NodeSpec) {}, gceemu.Config{MachineType: "g2-standard-48", ProvisioningModel: "STANDARD"})
	name := fp.names[0]
	patchPod(t, ctx, fp.p.ns, "train-"+name, func(p *corev1.Pod) { p.Labels = map[string]string{"guard": "yes"} })
	holdOne(t, ctx, fp.p.ns, map[string]string{"guard": "yes"})
	setCondition(t, name, corev1.ConditionTrue)
	world.WaitEvent(t, name, protocol.EventFaultRepairApproved)
	world.WaitEvent(t, name, protocol.EventFaultNotReportable, "g2-standard-48", "not drained")
	n := world.WaitNode(t, name, "tainted faulty, the approval gone", func(n *corev1.Node) bool {
		_, approved := n.Annotations[protocol.AnnotationFaultRepair]
		return !approved && protocol.HasTaintKey(n, protocol.TaintFaulty) && protocol.ReadAgentState(n).LastRepair.Outcome == protocol.RepairNotReportable
	})
	if st := protocol.ReadAgentState(n); st.Phase != protocol.PhaseIdle || protocol.HasTaint(n) {
		t.Errorf("%s is %s %s, maintenance taint %t; want it left as it was, but for the faulty taint", name, st.Phase, st.Reason, protocol.HasTaint(n))
	}
	if p, err := world.Client.CoreV1().Pods(fp.p.ns).Get(ctx, "train-"+name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the budget-held pod of %s: %v, deleted %v; want it running", name, err, p.DeletionTimestamp)
	}
	if calls := fp.vms[name].Emu.Calls(); len(calls) != 0 {
		t.Errorf("calls %+v; want none", calls)
	}
}

// TestFaultRepairAsksOnce: a person asks for a node's repair (the label
// and a description): a repair Compute Engine already booked is pulled
// forward with performMaintenance, not reported again. Another node's
// agent is killed while its report hangs: restarted, it asks again with
// the same request ID, and Compute Engine takes one report.
func TestFaultRepairAsksOnce(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	fp := newFaultyPool(t, ctx, "xb", 2)
	booked, hung := "xb-0", "xb-1"
	fp.vms[booked].Emu.ScheduleNotice(gceemu.RepairNotice(time.Now().Add(72*time.Hour), 4*time.Hour, "FAILURE_GPU"))
	world.WaitNode(t, booked, "the booked repair mirrored", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, booked, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels[protocol.LabelReportFaulty] = protocol.BehaviorChipError
		n.Annotations[protocol.AnnotationReportFaultyDescription] = "GPU 3 stopped answering"
		_, err = world.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	world.WaitEvent(t, booked, protocol.EventFaultRepairApproved, "CHIP_ERROR", "GPU 3 stopped answering")
	world.WaitNode(t, booked, "the booked repair pulled forward and begun: terminating, the person's request standing", func(n *corev1.Node) bool {
		_, asked := n.Labels[protocol.LabelReportFaulty]
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating && asked &&
			n.Annotations[protocol.AnnotationRepairCall] == string(protocol.RepairPerformMaintenance)
	})
	// Said either way Compute Engine's taking is seen first: the call's
	// answer, or the notice no longer reschedulable on the metadata server.
	world.WaitEvent(t, booked, protocol.EventFaultReported)
	var methods []string
	for _, c := range fp.vms[booked].Emu.Calls() {
		methods = append(methods, c.Method)
	}
	if !slices.Equal(methods, []string{"performMaintenance"}) {
		t.Errorf("calls %v; want the booked repair pulled forward, once, and no report", methods)
	}
	if err := fp.p.f.Reboot(ctx, fp.vms[booked]); err != nil {
		t.Fatal(err)
	}
	n := world.WaitNode(t, booked, "back in service, the person's request answered", func(n *corev1.Node) bool {
		_, asked := n.Labels[protocol.LabelReportFaulty]
		_, described := n.Annotations[protocol.AnnotationReportFaultyDescription]
		return inService(n) && !asked && !described
	})
	if st := protocol.ReadAgentState(n); st.Interruptions[protocol.FaultRepair.Key()] != 1 {
		t.Errorf("interruptions %v; want one %s", st.Interruptions, protocol.FaultRepair.Key())
	}

	// The second node's report hangs; its agent is killed and restarted.
	v := fp.vms[hung]
	v.Emu.InjectFault(gceemu.Fault{Path: gceemu.ComputePrefix + "projects/", Kind: gceemu.FaultHang, Times: 1})
	setCondition(t, hung, corev1.ConditionTrue)
	n = world.WaitNode(t, hung, "asking for its repair", func(n *corev1.Node) bool {
		return n.Annotations[protocol.AnnotationRepairCall] == string(protocol.RepairReport) && n.Annotations[protocol.AnnotationRequested] != ""
	})
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return v.Emu.FaultsServed() >= 1, nil }); err != nil {
		t.Fatal("the report never reached Compute Engine")
	}
	if err := v.Agent.Kill(); err != nil {
		t.Fatal(err)
	}
	v.Emu.ClearFaults()
	if err := fp.p.f.StartAgent(v); err != nil {
		t.Fatal(err)
	}
	world.WaitNode(t, hung, "reported and terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	got := reports(v)
	if len(got) != 1 || got[0].RequestID != n.Annotations[protocol.AnnotationRequestID] {
		t.Errorf("reports %+v; want one, with the request ID %s written before the first try", got, n.Annotations[protocol.AnnotationRequestID])
	}
}

// TestFaultRepairThroughGKE: on GKE nodes that run GKE's own
// report-and-replace flow (a stand-in here, as GKE documents it), the agent
// drains in order first, then sets GKE's fault-behavior label, follows
// GKE's status, and makes no Compute Engine call of its own; the VM's
// return ends the repair. Where GKE's flow ends in Error, the label is
// removed and the node stays faulty.
func TestFaultRepairThroughGKE(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	gke := gkeemu.Start(ctx, world.Client)
	fp := newFaultyPoolOf(t, ctx, "a3u", 2, 2*time.Second, func(s *testworld.NodeSpec) {
		s.KubeletVersion = "v1.32.3-gke.1057001"
		s.Labels = map[string]string{corev1.LabelInstanceTypeStable: "a3-ultragpu-8g"}
	})
	node := "a3u-0"
	told := world.PodSeen(t, fp.p.ns, "train-"+node, "told to stop by the agent's drain", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	setCondition(t, node, corev1.ConditionTrue)
	told()
	n := world.WaitNode(t, node, "reported by GKE: terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	if n.Annotations[protocol.AnnotationRepairCall] != string(protocol.RepairGKE) || n.Labels[protocol.LabelReportAndReplaceOperation] == "" {
		t.Errorf("repair call %q, GKE's operation %q; want GKE's flow, under way", n.Annotations[protocol.AnnotationRepairCall], n.Labels[protocol.LabelReportAndReplaceOperation])
	}
	world.WaitEvent(t, node, protocol.EventFaultReported, "GKE's report-and-replace")
	if got := gke.Reports(); len(got) != 1 || got[0].Behavior != "XID" {
		t.Errorf("GKE's reports %+v; want one, XID", got)
	}
	if calls := fp.vms[node].Emu.Calls(); len(calls) != 0 {
		t.Errorf("Compute Engine calls %+v; want none: GKE reports", calls)
	}
	setCondition(t, node, "")
	if err := fp.p.f.Reboot(ctx, fp.vms[node]); err != nil {
		t.Fatal(err)
	}
	world.WaitNode(t, node, "back in service, GKE's flow done", func(n *corev1.Node) bool {
		_, label := n.Labels[protocol.LabelFaultBehavior]
		return inService(n) && !label && n.Labels[protocol.LabelReportAndReplaceStatus] == protocol.GKEStatusOperationDone
	})

	// A person asks for the node's repair again: GKE left its status,
	// OperationDone, which is not this attempt's. The label goes on, and
	// GKE reports the host a second time.
	firstOp := n.Labels[protocol.LabelReportAndReplaceOperation]
	setLabel(t, ctx, node, protocol.LabelReportFaulty, protocol.BehaviorChipError)
	world.WaitNode(t, node, "reported by GKE again: terminating", func(n *corev1.Node) bool {
		op := n.Labels[protocol.LabelReportAndReplaceOperation]
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating && op != "" && op != firstOp
	})
	if got := gke.Reports(); len(got) != 2 || got[1].Node != node {
		t.Errorf("GKE's reports %+v; want two, both of %s", got, node)
	}
	if err := fp.p.f.Reboot(ctx, fp.vms[node]); err != nil {
		t.Fatal(err)
	}
	world.WaitNode(t, node, "back in service again", inService)

	// GKE refuses the other node (not reservation-bound), writing ERROR
	// and removing its label: the attempt ends once, the label not put
	// back.
	gke.SetRefuse(true)
	gke.SetErrorStatus("ERROR")
	other := "a3u-1"
	setCondition(t, other, corev1.ConditionTrue)
	world.WaitEvent(t, other, protocol.EventFaultRepairFailed, "GKE's report-and-replace flow ended in ERROR")
	world.WaitNode(t, other, "drained, faulty, GKE's label removed", func(n *corev1.Node) bool {
		_, label := n.Labels[protocol.LabelFaultBehavior]
		return !label && protocol.HasTaintKey(n, protocol.TaintFaulty) && protocol.ReadAgentState(n).LastRepair.Outcome == protocol.RepairFailed
	})
	if got := gke.Attempts(other); got != 1 {
		t.Errorf("GKE began %d attempts on %s; want one: the label it removed is not put back", got, other)
	}
}

// BenchmarkFaultToRepair: a GPU node (a real agent, a real aggregator, the
// shipped defaults but the policy's) whose detector's condition turns bad,
// held 0 s: the time from the condition written to the first eviction
// (its pod told to stop), and to Compute Engine's report.
func BenchmarkFaultToRepair(b *testing.B) {
	testworld.Need(b)
	ctx := testworld.Ctx(b, 5*time.Minute)
	fp := newFaultyPoolOf(b, ctx, "fbench", 1, 0, func(*testworld.NodeSpec) {})
	node := "fbench-0"
	b.ResetTimer()
	told := world.PodSeen(b, fp.p.ns, "train-"+node, "told to stop", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	start := time.Now()
	setCondition(b, node, corev1.ConditionTrue)
	told()
	evicted := time.Since(start)
	world.WaitNode(b, node, "reported", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	b.StopTimer()
	got := reports(fp.vms[node])
	if len(got) != 1 {
		b.Fatalf("reports %+v; want one", got)
	}
	b.ReportMetric(evicted.Seconds(), "s-condition-to-first-eviction")
	b.ReportMetric(got[0].At.Sub(start).Seconds(), "s-condition-to-report")
}
