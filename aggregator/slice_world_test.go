package aggregator_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// slice is a multi-host TPU slice (topology 2x2x4, 4 chips each, TPU VMs
// that do not serve maintenance-event) with a real agent on each host,
// running a job of one pod per host with 20 s of grace; and what
// happens to it, as it happens: when each Node is first tainted, and when
// and with what grace each pod is told to stop.
type slice struct {
	p     *procs
	hosts []string
	vms   map[string]*vms.VM

	mu      sync.Mutex
	tainted map[string]time.Time
	stopped map[string]podStop
}

type podStop struct {
	at    time.Time // when its grace ends (its deletionTimestamp)
	grace int64
	told  time.Time // when its deletion was seen
}

func newSlice(t testing.TB, ctx context.Context, pool string, size int) *slice {
	t.Helper()
	return newSliceOf(t, ctx, newProcs(t, "--eviction-retry-interval", "1s"), pool, size)
}

// newSliceOf is newSlice with p's agents.
func newSliceOf(t testing.TB, ctx context.Context, p *procs, pool string, size int) *slice {
	t.Helper()
	s := newSliceHostsOf(t, ctx, p, pool, size)
	for i, host := range s.hosts {
		grace := int64(20)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", i), Namespace: s.p.ns, Labels: map[string]string{"job": "train"}},
			Spec: corev1.PodSpec{NodeName: host, TerminationGracePeriodSeconds: &grace,
				Tolerations: []corev1.Toleration{{Key: "google.com/tpu", Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "train", Image: "trainer", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{protocol.ResourceTPU: resource.MustParse("4")}, Limits: corev1.ResourceList{protocol.ResourceTPU: resource.MustParse("4")}}}}}}
		if _, err := world.Client.CoreV1().Pods(s.p.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.follow(t, ctx, pool)
	return s
}

// newSliceHosts is the slice's hosts, each with its agent, and no pod.
func newSliceHosts(t testing.TB, ctx context.Context, pool string, size int) *slice {
	t.Helper()
	return newSliceHostsOf(t, ctx, newProcs(t, "--eviction-retry-interval", "1s"), pool, size)
}

// newSliceHostsOf is newSliceHosts with p's agents: TPU VMs (ct5p-hightpu-4t,
// as GKE's tpu-v5p-slice nodes are). Where p's agents make their own
// Compute calls (no p.f.Project), none asks the aggregator to read its VM,
// so the test writes what that read says (proveVMs): a slice's membership
// rests on it.
func newSliceHostsOf(t testing.TB, ctx context.Context, p *procs, pool string, size int) *slice {
	t.Helper()
	s := &slice{p: p, vms: map[string]*vms.VM{}, tainted: map[string]time.Time{}, stopped: map[string]podStop{}}
	for i := range size {
		name := fmt.Sprintf("%s-%d", pool, i)
		s.hosts = append(s.hosts, name)
		v, err := p.f.Add(ctx, testworld.NodeSpec{Name: name, Pool: pool, TPU: true, Labels: map[string]string{protocol.LabelTPUTopology: "2x2x4"}},
			gceemu.Config{NoMaintenanceEvent: true, MachineType: v5pMachine})
		if err != nil {
			t.Fatal(err)
		}
		s.vms[name] = v
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	if p.f.Project == nil {
		proveVMs(t, ctx, protocol.VMFacts{MachineType: v5pMachine, Status: "RUNNING"}, s.hosts...)
	}
	return s
}

// follow waits until a pod runs on every host of the slice (other pods
// of the namespace aside), and each
// host's agent publishes it busy, then follows what happens to the
// slice's Nodes and pods.
func (s *slice) follow(t testing.TB, ctx context.Context, pool string) {
	t.Helper()
	size := len(s.hosts)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := world.Client.CoreV1().Pods(s.p.ns).List(ctx, metav1.ListOptions{})
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && slices.Contains(s.hosts, p.Spec.NodeName) {
				running++
			}
		}
		return err == nil && running == size, nil
	})
	if err != nil {
		t.Fatalf("the job's %d pods never ran", size)
	}
	// The agents have read their Nodes: each publishes its host busy.
	world.WaitNodes(t, s.hosts, "published busy", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationBusy] != "" })

	factory := informers.NewSharedInformerFactoryWithOptions(world.Client, 0, informers.WithNamespace(s.p.ns))
	podInf := factory.Core().V1().Pods().Informer()
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil {
			s.mu.Lock()
			if _, ok := s.stopped[p.Name]; !ok {
				s.stopped[p.Name] = podStop{at: p.DeletionTimestamp.Time, grace: *p.DeletionGracePeriodSeconds, told: time.Now()}
			}
			s.mu.Unlock()
		}
	}})
	nodeFactory := informers.NewSharedInformerFactory(world.Client, 0)
	nodeInf := nodeFactory.Core().V1().Nodes().Informer()
	_, _ = nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) {
		n := o.(*corev1.Node)
		if protocol.HasTaint(n) || protocol.HasTaintKey(n, protocol.TaintSliceDown) {
			s.mu.Lock()
			if _, ok := s.tainted[n.Name]; !ok && strings.HasPrefix(n.Name, pool+"-") {
				s.tainted[n.Name] = time.Now()
			}
			s.mu.Unlock()
		}
	}})
	watchCtx, stopWatch := context.WithCancel(ctx)
	t.Cleanup(stopWatch)
	go podInf.Run(watchCtx.Done())
	go nodeInf.Run(watchCtx.Done())
	cache.WaitForCacheSync(watchCtx.Done(), podInf.HasSynced, nodeInf.HasSynced)
}

// preempt preempts host and returns its drain's deadline.
func (s *slice) preempt(t testing.TB, ctx context.Context, host string) time.Time {
	t.Helper()
	s.vms[host].Emu.SetPreempted(true)
	var deadline time.Time
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, host, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		deadline = protocol.ReadAgentState(n).Deadline
		return !deadline.IsZero(), nil
	})
	if err != nil {
		t.Fatalf("%s never started draining on its preemption", host)
	}
	return deadline
}

// drainedWith waits until every one of hosts drains with its slice, by
// deadline, and every one of pods is told to stop with a grace that ends
// by it (to the second: deletion timestamps are).
func (s *slice) drainedWith(t *testing.T, ctx context.Context, deadline time.Time, hosts, pods []string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, h := range hosts {
			n, err := world.Client.CoreV1().Nodes().Get(ctx, h, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			st := protocol.ReadAgentState(n)
			if st.Reason != protocol.ReasonSlice || !protocol.HasTaint(n) || !n.Spec.Unschedulable {
				return false, nil
			}
			if !st.Deadline.Equal(deadline) {
				return false, fmt.Errorf("%s drains by %s, want the cause's deadline %s", h, st.Deadline, deadline)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the hosts did not drain with their slice: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.stopped) >= len(pods), nil
	})
	if err != nil {
		t.Fatalf("the pods were not all stopped: %v", s.stopped)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pod := range pods {
		st, ok := s.stopped[pod]
		if !ok || st.grace < 1 || st.at.After(deadline.Add(time.Second)) {
			t.Errorf("%s stopped %+v (told: %t); want a grace of 1 s or more ending by the deadline %s", pod, st, ok, deadline)
		}
	}
	first, last := s.tainted[s.hosts[1]], time.Time{}
	for _, h := range s.hosts {
		if s.tainted[h].After(last) {
			last = s.tainted[h]
		}
	}
	t.Logf("%s tainted at %s; every host tainted %s later", s.hosts[1], first.Format(time.RFC3339Nano), last.Sub(first))
}

// TestSliceDrainedAsOne: real agents on three hosts of the slice (the
// fourth's agent is down) and a real aggregator. Host 1 is preempted:
// every host with an agent is tainted and drained by host 1's deadline,
// each pod stopped with a grace period that ends by it; the host without
// an agent carries the ask and the slice-down taint, so no new pod lands
// there, and is told why. The slice interruption is counted once. When
// host 1 is back, every host goes back in service.
func TestSliceDrainedAsOne(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	s := newSlice(t, ctx, "slice", 4)
	if err := s.vms["slice-3"].Agent.Kill(); err != nil {
		t.Fatal(err)
	}
	metricsAddr := testworld.FreeAddrT(t)
	s.p.aggregator("agg-slice", metricsAddr)

	deadline := s.preempt(t, ctx, "slice-1")
	s.drainedWith(t, ctx, deadline, []string{"slice-0", "slice-2"}, []string{"job-0", "job-1", "job-2"})
	s.mu.Lock()
	if st, ok := s.stopped["job-3"]; ok {
		t.Errorf("job-3, on the host without an agent, was stopped: %+v", st)
	}
	s.mu.Unlock()

	// The host without an agent: the ask and the slice-down taint (the
	// hosts with an agent may have drained before the aggregator's pass),
	// and the aggregator's Event naming the cause.
	world.WaitNodes(t, []string{"slice-3"}, "the ask naming slice-1 and the slice-down taint", func(n *corev1.Node) bool {
		ask, ok := protocol.ReadSliceAsk(n)
		return ok && ask.Cause == "slice-1" && protocol.HasTaintKey(n, protocol.TaintSliceDown)
	})
	world.WaitEvent(t, "slice-3", protocol.EventSliceMaintenance, "Host slice-1 of the multi-host slice slice stops (preemption)")
	world.WaitEvent(t, "slice-0", protocol.EventSliceMaintenance, "Host slice-1")
	if got := metricSum(t, metricsAddr, `maintenance_handler_aggregator_slice_interruptions_total{interruption_reason="`+string(protocol.Preemption.Reason)+`",interruption_type="`+string(protocol.Preemption.Type)+`",slice="slice"}`); got != 1 {
		t.Errorf("slice_interruptions_total = %v, want 1", got)
	}

	// slice-1 comes back: every host goes back in service.
	if err := s.p.f.Reboot(ctx, s.vms["slice-1"]); err != nil {
		t.Fatal(err)
	}
	world.WaitNodes(t, s.hosts, "went back in service after slice-1 came back", func(n *corev1.Node) bool {
		_, asked := protocol.ReadSliceAsk(n)
		return !asked && !protocol.HasTaintKey(n, protocol.TaintSliceDown) && (n.Name == "slice-3" || !protocol.HasTaint(n) && !n.Spec.Unschedulable)
	})
}

// TestSliceFollowedWithNoAggregator: the same slice with an agent on every
// host and no aggregator at all (as during a failover, or while its node is
// down). Host 1 is preempted: every other host's agent, following its
// slice's Nodes, drains its host by host 1's deadline, each pod stopped
// with a grace that ends by it; when host 1 is back, every host goes back in
// service.
func TestSliceFollowedWithNoAggregator(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	s := newSlice(t, ctx, "lone", 4)
	deadline := s.preempt(t, ctx, "lone-1")
	s.drainedWith(t, ctx, deadline, []string{"lone-0", "lone-2", "lone-3"}, []string{"job-0", "job-1", "job-2", "job-3"})
	world.WaitEvent(t, "lone-0", protocol.EventSliceDrain, "Host lone-1 of the multi-host slice lone stops (preemption)")

	if err := s.p.f.Reboot(ctx, s.vms["lone-1"]); err != nil {
		t.Fatal(err)
	}
	world.WaitNodes(t, s.hosts, "went back in service after lone-1 came back", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Phase == protocol.PhaseIdle && !protocol.HasTaint(n) && !n.Spec.Unschedulable
	})
}

// TestSliceHostJoinsLate: a host of a two-host slice (topology 2x2x2: 8
// chips, which one v5e host could also have alone) whose agent starts
// before the TPU device plugin has registered its chips cannot yet be told
// a slice host. When its chips appear on the Node, its agent joins the
// slice; when the other host is preempted, it drains with it.
func TestSliceHostJoinsLate(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	p := newProcs(t)
	var first *vms.VM
	for i := range 2 {
		name := fmt.Sprintf("late-%d", i)
		v, err := p.f.Add(ctx, testworld.NodeSpec{Name: name, Pool: "late", TPU: true, Unregistered: i == 1, Labels: map[string]string{protocol.LabelTPUTopology: "2x2x2"}},
			gceemu.Config{NoMaintenanceEvent: true})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = v
		}
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	proveVMs(t, ctx, protocol.VMFacts{MachineType: v5pMachine, Status: "RUNNING"}, "late-0", "late-1")
	// Both agents have read their Nodes: each publishes its host idle.
	world.WaitNodes(t, []string{"late-0", "late-1"}, "published idle", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationIdleSince] != "" })

	// The device plugin registers late-1's chips.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, "late-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		four := resource.MustParse("4")
		n.Status.Capacity[protocol.ResourceTPU], n.Status.Allocatable[protocol.ResourceTPU] = four, four
		_, err = world.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	first.Emu.SetPreempted(true)
	world.WaitNodes(t, []string{"late-1"}, "drained with its slice", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Reason == protocol.ReasonSlice && protocol.HasTaint(n)
	})
	world.WaitEvent(t, "late-1", protocol.EventSliceDrain, "Host late-0 of the multi-host slice late stops (preemption)")
}

// metricSum reads one series from a /metrics endpoint (0 when absent).
func metricSum(t *testing.T, addr, series string) float64 {
	t.Helper()
	v, err := readMetric(addr, series)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// metricSumQuiet is metricSum, 0 while the endpoint does not answer.
// metricTotal sums every series of the metric name on a /metrics endpoint.
func metricTotal(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			var f float64
			_, _ = fmt.Sscan(rest[strings.LastIndex(rest, " ")+1:], &f)
			total += f
		}
	}
	return total
}

func metricSumQuiet(addr, series string) float64 {
	v, _ := readMetric(addr, series)
	return v
}

func readMetric(addr, series string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			_, _ = fmt.Sscan(v, &f)
			return f, nil
		}
	}
	return 0, nil
}

// TestSliceManualTriggerCallsOnceWhenEveryHostIsDrained: a person asks
// one host of a 4-host slice for its pending maintenance now, with the
// aggregator running. Every other host follows it and drains voluntarily:
// one's pod has a checkpoint lead, another's is held by a
// PodDisruptionBudget until the test lifts it. Compute Engine is asked
// once for the whole slice, by the host the person asked, only after the
// last host is drained; the call puts every instance into maintenance,
// which every host recognises as the slice's: counted once, as the
// person's maintenance.
func TestSliceManualTriggerCallsOnceWhenEveryHostIsDrained(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	s := newSlice(t, ctx, "taken", 4)
	var emus []*gceemu.Server
	for _, h := range s.hosts {
		emus = append(emus, s.vms[h].Emu)
		s.vms[h].Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(72*time.Hour), 4*time.Hour))
	}
	gceemu.JoinSlice(emus...)
	world.WaitNodes(t, s.hosts, "mirrored their notices", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	// job-1 checkpoints for 3 s before it is evicted; job-2 is held by a
	// budget.
	patchPod(t, ctx, s.p.ns, "job-1", func(p *corev1.Pod) { p.Annotations = map[string]string{protocol.PodAnnotationCheckpointLead: "3s"} })
	patchPod(t, ctx, s.p.ns, "job-2", func(p *corev1.Pod) { p.Labels["guard"] = "yes" })
	pdb := holdOne(t, ctx, s.p.ns, map[string]string{"guard": "yes"})
	metricsAddr := testworld.FreeAddrT(t)
	s.p.aggregator("agg-taken", metricsAddr)

	setLabel(t, ctx, "taken-0", protocol.LabelPerformMaintenance, protocol.TriggerValue)
	// The others follow, voluntarily: the lead drained, the hosts without
	// a budget drained, job-2's host still draining; nobody called.
	world.WaitNodes(t, []string{"taken-0"}, "drained, waiting for its slice", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Reason == protocol.ReasonManual && st.Phase == protocol.PhaseDraining && st.Drain == protocol.DrainDone
	})
	world.WaitNodes(t, []string{"taken-1", "taken-3"}, "drained with the slice", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Reason == protocol.ReasonSlice && st.Phase == protocol.PhaseTerminating
	})
	held := world.WaitNode(t, "taken-2", "draining with the slice", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Reason == protocol.ReasonSlice && protocol.HasTaint(n)
	})
	if st := protocol.ReadAgentState(held); st.Phase != protocol.PhaseDraining || st.Drain != "" {
		t.Fatalf("taken-2 is %s (drain %q) while its budget holds its pod", st.Phase, st.Drain)
	}
	if n := callsTo(emus); n != 0 {
		t.Fatalf("%d performMaintenance calls while taken-2 still drains, want none", n)
	}
	// The leader has written its asks, and passed three times since: the
	// slice is draining, not down, and nothing is counted yet.
	world.WaitNodes(t, []string{"taken-1", "taken-2", "taken-3"}, "asked by the leader", func(n *corev1.Node) bool {
		_, asked := protocol.ReadSliceAsk(n)
		return asked
	})
	passes := metricSum(t, metricsAddr, "maintenance_handler_aggregator_pass_duration_seconds_count")
	waitMetric(t, ctx, metricsAddr, "maintenance_handler_aggregator_pass_duration_seconds_count", passes+3)
	if got := metricTotal(t, metricsAddr, "maintenance_handler_aggregator_slice_interruptions_total"); got != 0 {
		t.Errorf("slice_interruptions_total = %v while the slice only drains; want 0 until its maintenance begins", got)
	}
	s.mu.Lock()
	lead0, lead1 := s.stopped["job-0"].told, s.stopped["job-1"].told
	s.mu.Unlock()
	if lead1.Sub(lead0) < 2*time.Second {
		t.Errorf("job-1 was told to stop %s after job-0; want its 3 s checkpoint lead", lead1.Sub(lead0))
	}

	if err := world.Client.PolicyV1().PodDisruptionBudgets(s.p.ns).Delete(ctx, pdb, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// One call, after job-2 was evicted; every instance in maintenance,
	// which every other host takes as the slice's.
	world.WaitNodes(t, []string{"taken-1", "taken-2", "taken-3"}, "in the slice's maintenance", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Reason == protocol.ReasonHostMaintenance
	})
	world.WaitNodes(t, []string{"taken-0"}, "asked, and its maintenance begun", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Phase == protocol.PhaseTerminating && st.Begun
	})
	var calls []gceemu.Call
	for _, e := range emus {
		calls = append(calls, e.Calls()...)
	}
	s.mu.Lock()
	evicted := s.stopped["job-2"].told
	s.mu.Unlock()
	if len(calls) != 1 || calls[0].Instance != "taken-0" || !calls[0].At.After(evicted) {
		t.Fatalf("calls %+v; want one, for taken-0, after job-2 was evicted at %s", calls, evicted.Format(time.RFC3339Nano))
	}
	t.Logf("job-2 evicted at %s; the slice's one call %s later", evicted.Format(time.RFC3339Nano), calls[0].At.Sub(evicted))
	world.WaitEvent(t, "taken-2", protocol.EventMaintenanceStarted, "It is the maintenance of the multi-host slice taken")
	manual, _ := protocol.ReasonManual.Interruption() // as the Node counts it
	for _, h := range s.hosts {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, h, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := protocol.Counts{}
		if h == "taken-0" {
			want = want.Add(manual, 1)
		}
		if got := protocol.ReadAgentState(n).Interruptions; !maps.Equal(got, want) {
			t.Errorf("%s counted %v, want %v", h, got, want)
		}
	}
	// Counted once, when it began, under the reason the pool counts it.
	person := protocol.ManualMaintenance
	waitMetric(t, ctx, metricsAddr, `maintenance_handler_aggregator_pool_interruptions_total{interruption_reason="`+string(person.Reason)+`",interruption_type="`+string(person.Type)+`",node_pool_name="taken"}`, 1)
	if got := metricSum(t, metricsAddr, `maintenance_handler_aggregator_slice_interruptions_total{interruption_reason="`+string(person.Reason)+`",interruption_type="`+string(person.Type)+`",slice="taken"}`); got != 1 {
		t.Errorf("slice_interruptions_total{%s} = %v, want 1", person.Reason, got)
	}
	if got := metricTotal(t, metricsAddr, "maintenance_handler_aggregator_slice_interruptions_total"); got != 1 {
		t.Errorf("slice_interruptions_total = %v in all, want 1", got)
	}
	for _, h := range s.hosts {
		if err := s.p.f.Reboot(ctx, s.vms[h]); err != nil {
			t.Fatal(err)
		}
	}
	world.WaitNodes(t, s.hosts, "back in service", func(n *corev1.Node) bool {
		_, asked := protocol.ReadSliceAsk(n)
		return protocol.ReadAgentState(n).Phase == protocol.PhaseIdle && !asked && !protocol.HasTaint(n) && !n.Spec.Unschedulable
	})
	if n := callsTo(emus); n != 1 {
		t.Errorf("%d performMaintenance calls in all, want 1", n)
	}
}

// callsTo counts the performMaintenance calls the emulators received.
func callsTo(emus []*gceemu.Server) int {
	n := 0
	for _, e := range emus {
		n += len(e.Calls())
	}
	return n
}

// patchPod changes pod name in ns with f.
func patchPod(t *testing.T, ctx context.Context, ns, name string, f func(*corev1.Pod)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := world.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		f(p)
		_, err = world.Client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setLabel sets a label on a Node, as a person would ("" removes it).
func setLabel(t *testing.T, ctx context.Context, node, key, value string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if value == "" {
			delete(n.Labels, key)
		} else {
			n.Labels[key] = value
		}
		_, err = world.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// holdAll puts the one pod of ns that matches selector under a
// PodDisruptionBudget that allows no eviction, once its controller says
// so; it returns the budget's name.
func holdOne(t *testing.T, ctx context.Context, ns string, selector map[string]string) string {
	t.Helper()
	// One pod: a percentage needs the pods' controller.
	world.Budget(t, ns, "hold", selector, intstr.FromInt32(1), "holding its pod", func(b *policyv1.PodDisruptionBudget) bool {
		return b.Status.ExpectedPods > 0 && b.Status.DisruptionsAllowed == 0
	})
	return "hold"
}

// TestSliceFailoverMidDrain: one host of a 4-host slice is preempted with
// an aggregator leading and another standing by; the leader has written
// its asks and counted the slice when it is killed. Every host still
// drains by the preempted host's deadline, each pod with a grace that
// ends by it; the new leader finds the asks written and undoes nothing,
// writes no ask again and counts nothing again; when the host is back,
// the new leader puts the slice back in service.
func TestSliceFailoverMidDrain(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	s := newSlice(t, ctx, "fail", 4)
	addrA, addrB := testworld.FreeAddrT(t), testworld.FreeAddrT(t)
	a := s.p.aggregator("agg-a", addrA)
	waitMetric(t, ctx, addrA, "maintenance_handler_aggregator_leader", 1)
	s.p.aggregator("agg-b", addrB)

	// Every change of an ask, or a host back in service, from now on.
	var mu sync.Mutex
	var undone []string
	inf := informers.NewSharedInformerFactory(world.Client, 0).Core().V1().Nodes().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
		old, cur := o.(*corev1.Node), n.(*corev1.Node)
		if !strings.HasPrefix(cur.Name, "fail-") {
			return
		}
		was, _ := protocol.ReadSliceAsk(old)
		is, _ := protocol.ReadSliceAsk(cur)
		mu.Lock()
		defer mu.Unlock()
		if was.Cause != "" && (was.Cause != is.Cause || !was.Started.Equal(is.Started) || !was.Deadline.Equal(is.Deadline)) {
			undone = append(undone, fmt.Sprintf("%s: ask %+v became %+v", cur.Name, was, is))
		}
		if protocol.ReadAgentState(old).Active() && !protocol.ReadAgentState(cur).Active() {
			undone = append(undone, cur.Name+" went back in service")
		}
	}})
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go inf.Run(watchCtx.Done())
	cache.WaitForCacheSync(watchCtx.Done(), inf.HasSynced)

	deadline := s.preempt(t, ctx, "fail-1")
	others := []string{"fail-0", "fail-2", "fail-3"}
	world.WaitNodes(t, others, "asked by the leader", func(n *corev1.Node) bool {
		ask, ok := protocol.ReadSliceAsk(n)
		return ok && ask.Cause == "fail-1"
	})
	series := `maintenance_handler_aggregator_slice_interruptions_total{interruption_reason="` + string(protocol.Preemption.Reason) + `",interruption_type="` + string(protocol.Preemption.Type) + `",slice="fail"}`
	waitMetric(t, ctx, addrA, series, 1)
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	s.drainedWith(t, ctx, deadline, others, []string{"job-0", "job-1", "job-2", "job-3"})

	// The new leader's passes: three after it leads.
	waitMetric(t, ctx, addrB, "maintenance_handler_aggregator_leader", 1)
	passes := metricSum(t, addrB, "maintenance_handler_aggregator_pass_duration_seconds_count")
	waitMetric(t, ctx, addrB, "maintenance_handler_aggregator_pass_duration_seconds_count", passes+3)
	if got := metricSum(t, addrB, series); got != 0 {
		t.Errorf("the new leader counted the slice again: %v", got)
	}
	mu.Lock()
	if len(undone) > 0 {
		t.Errorf("undone during the failover: %v", undone)
	}
	mu.Unlock()

	if err := s.p.f.Reboot(ctx, s.vms["fail-1"]); err != nil {
		t.Fatal(err)
	}
	world.WaitNodes(t, s.hosts, "back in service", func(n *corev1.Node) bool {
		_, asked := protocol.ReadSliceAsk(n)
		return protocol.ReadAgentState(n).Phase == protocol.PhaseIdle && !asked && !protocol.HasTaintKey(n, protocol.TaintSliceDown) && !protocol.HasTaint(n)
	})
}

// waitMetric waits until series on addr's /metrics reaches at least want.
func waitMetric(t *testing.T, ctx context.Context, addr, series string, want float64) {
	t.Helper()
	var got float64
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		got = metricSumQuiet(addr, series)
		return got >= want, nil
	})
	if err != nil {
		t.Fatalf("%s on %s is %v, want %v", series, addr, got, want)
	}
}
