package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/agent"
	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(testworld.RunMain(m, &world)) }

// vm is one simulated VM: a kwok Node and its metadata emulator.
type vm struct {
	name string
	emu  *gceemu.Server
	// compute, when set, is the next agent's performMaintenance.
	compute agent.Maintainer
	// gate, when set, is the next agent's ManualGate.
	gate func(*corev1.Node, time.Time) (string, string)
	// observe, when set, is the next agent's ObserveOnly.
	observe func(*corev1.Node) (bool, bool)
}

func newVM(t testing.TB, name string) *vm {
	t.Helper()
	return newVMWith(t, name, gceemu.Config{})
}

// newVMWith is newVM with an emulator configured as cfg.
func newVMWith(t testing.TB, name string, cfg gceemu.Config) *vm {
	t.Helper()
	return newVMOn(t, testworld.NodeSpec{Name: name}, cfg)
}

// newVMOn is newVMWith for a Node made as spec.
func newVMOn(t testing.TB, spec testworld.NodeSpec, cfg gceemu.Config) *vm {
	t.Helper()
	world.NodeT(t, spec)
	cfg.Name = spec.Name
	emu := gceemu.StartT(t, cfg)
	return &vm{name: spec.Name, emu: emu}
}

// running is one agent process, in-process.
type running struct {
	metrics *metrics.Agent
	watcher *metadata.Watcher
	agent   *agent.Agent
	cfg     lifecycle.Config
	stop    func()
}

// startAgent runs v's agent with the agent's shipped identity: its
// service account with a token bound to v's Node, held by its RBAC and
// admission policies as in a cluster.
func startAgent(t testing.TB, v *vm, cfg lifecycle.Config) *running {
	t.Helper()
	path, err := world.AgentKubeconfig(testworld.Ctx(t, 30*time.Second), v.name)
	if err != nil {
		t.Fatal(err)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	return startAgentWith(t, v, cfg, restCfg)
}

// kubeClient is the agent's API client for restCfg.
func kubeClient(t testing.TB, restCfg *rest.Config) *kube.Client {
	t.Helper()
	c, err := kube.New(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startAgentWith runs an agent whose API client is made from restCfg.
func startAgentWith(t testing.TB, v *vm, cfg lifecycle.Config, restCfg *rest.Config) *running {
	t.Helper()
	client := kubeClient(t, restCfg)
	node, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), v.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewAgent(metrics.NewRegistry())
	events := kube.NewNodeEvents(client.EventSink(), protocol.EventSourceAgent, v.name, node.UID)
	w := metadata.NewWatcher(metadata.WatcherOptions{
		Client: metadata.NewClient(2*time.Second, v.emu.Host()), Timeout: 2 * time.Second,
		Backoff: backoff.Policy{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond}, Recorder: m,
	})
	a, err := agent.New(agent.Options{
		Client: client, NodeName: v.name, Self: types.NamespacedName{Namespace: "kube-system", Name: "agent-" + v.name},
		Watcher: w, Pods: drain.NewNodePods(client.PodListWatch(v.name), nil), Config: cfg, Maintainer: v.compute, ManualGate: v.gate, ObserveOnly: v.observe,
		Leases: client, ShadowNamespace: testworld.ShippedAgentNamespace,
		RetryInterval: 500 * time.Millisecond, Metrics: m, Events: events,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	r := &running{metrics: m, watcher: w, cfg: cfg, agent: a}
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		events.Shutdown()
	}
	t.Cleanup(r.stop)
	return r
}

func getNode(t testing.TB, name string) *corev1.Node {
	t.Helper()
	n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nodeEvents counts the Events on the Node named name, by reason. Only this
// Node object's Events count (by UID): a Node of the same name from an
// earlier run is another object.
func nodeEvents(t *testing.T, name string) map[string]int {
	t.Helper()
	uid := getNode(t, name).UID
	list, err := world.Client.CoreV1().Events("").List(testworld.Ctx(t, 10*time.Second), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range list.Items {
		out[e.Reason] += int(max(e.Count, 1))
	}
	return out
}

func makePod(ns, name, node string, grace int64, delay time.Duration) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{testworld.PodDeleteDelayAnnotation: delay.String()}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "main", Image: "registry.invalid/trainer:1"}},
		},
	}
}

func createPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := world.Client.CoreV1().Pods(p.Namespace).Create(testworld.Ctx(t, 10*time.Second), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = world.Client.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

func podGone(t *testing.T, ns, name string) bool {
	_, err := world.Client.CoreV1().Pods(ns).Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// podEnd is how a watched pod ended.
type podEnd struct {
	at time.Time
	// grace is the deletion grace period the pod got when it began to
	// terminate (0 when it was deleted at once: a force delete).
	grace int64
	// terminated: the pod was seen terminating (deletionTimestamp set)
	// before it was deleted.
	terminated bool
	// ends is its deletionTimestamp: when its grace ends.
	ends time.Time
}

// podWatch follows one pod through a watch.
type podWatch struct{ end chan podEnd }

// watchPod watches ns/name from now on. A watch delivers every change in
// order, so a short terminating state is not missed, and the deletion
// carries the pod's last state.
func watchPod(t *testing.T, ns, name string) *podWatch {
	t.Helper()
	w, err := world.Client.CoreV1().Pods(ns).Watch(testworld.Ctx(t, 5*time.Minute), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	pw := &podWatch{end: make(chan podEnd, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var end podEnd
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				end.at = time.Now()
				pw.end <- end
				return
			}
			if p.DeletionTimestamp != nil && !end.terminated {
				end.terminated, end.ends = true, p.DeletionTimestamp.Time
				if p.DeletionGracePeriodSeconds != nil {
					end.grace = *p.DeletionGracePeriodSeconds
				}
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return pw
}

// gone waits for the pod's deletion.
func (pw *podWatch) gone(t *testing.T) podEnd {
	t.Helper()
	select {
	case e := <-pw.end:
		return e
	case <-time.After(90 * time.Second):
		t.Fatal("the pod was never deleted")
		return podEnd{}
	}
}

// reboot simulates the VM stopping and coming back: the agent dies with the
// VM, the node reports a new boot ID, the metadata server is quiet again,
// and a new agent starts.
func reboot(t testing.TB, v *vm, r *running) *running {
	t.Helper()
	r.stop()
	v.emu.Clear()
	boot := testworld.NewBootID()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, v.name)
		n.Status.NodeInfo.BootID = boot
		_, err := world.Client.CoreV1().Nodes().UpdateStatus(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return startAgent(t, v, r.cfg)
}

func TestNoticeScheduledRescheduledCancelled(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-notice-0")
	startAgent(t, v, lifecycle.DefaultConfig)
	start := time.Date(2026, 12, 1, 19, 0, 1, 0, time.UTC)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(start, 2*time.Hour))
	n := world.WaitNode(t, v.name, "scheduled label", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelScheduledMaintenanceTime] == strconv.FormatInt(start.Unix(), 10)
	})
	if ann := n.Annotations[protocol.AnnotationUpcomingMaintenance]; ann == "" || !contains(ann, `"maintenance_status":"PENDING"`) {
		t.Errorf("notice annotation %q, want the snake_case notice", ann)
	}
	if protocol.HasTaint(n) || n.Spec.Unschedulable {
		t.Errorf("a pending notice tainted or cordoned the node")
	}
	later := start.Add(72 * time.Hour)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(later, 2*time.Hour))
	world.WaitNode(t, v.name, "rescheduled label", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelScheduledMaintenanceTime] == strconv.FormatInt(later.Unix(), 10)
	})
	v.emu.ClearNotice()
	world.WaitNode(t, v.name, "label and annotation removed", func(n *corev1.Node) bool {
		_, l := n.Labels[protocol.LabelScheduledMaintenanceTime]
		_, a := n.Annotations[protocol.AnnotationUpcomingMaintenance]
		return !l && !a
	})
	for _, r := range []string{protocol.EventMaintenanceScheduled, protocol.EventMaintenanceRescheduled, protocol.EventMaintenanceCancelled} {
		world.WaitEvent(t, v.name, r)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestHostMaintenanceEndToEnd(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-host-0")
	ns := world.Namespace(t)
	createPod(t, makePod(ns, "trainer", v.name, 3, 3*time.Second))
	createPod(t, makePod(metav1.NamespaceSystem, "dns-"+v.name, v.name, 1, time.Second))
	r := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "agent settled", func(*corev1.Node) bool {
		return !r.watcher.LastGood(metadata.KeyMaintenanceEvent).IsZero()
	})

	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	n := world.WaitNode(t, v.name, "taint and ONGOING", func(n *corev1.Node) bool {
		return protocol.HasTaint(n) && n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueOngoing
	})
	if !n.Spec.Unschedulable {
		t.Error("node not cordoned during maintenance")
	}
	// A new pod for this node is not scheduled there.
	newcomer := makePod(ns, "newcomer", "", 1, time.Second)
	newcomer.Spec.NodeSelector = map[string]string{corev1.LabelHostname: v.name}
	createPod(t, newcomer)

	world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	if !podGone(t, ns, "trainer") || !podGone(t, metav1.NamespaceSystem, "dns-"+v.name) {
		t.Error("terminating while pods remain")
	}
	p, err := world.Client.CoreV1().Pods(ns).Get(testworld.Ctx(t, 10*time.Second), "newcomer", metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != "" {
		t.Errorf("newcomer scheduled onto the node in maintenance: %v %q", err, p.Spec.NodeName)
	}
	if got := testworld.Settled(t, r.metrics.Interruptions.WithLabelValues(protocol.HostMaintenance.Labels()...), 1); got != 1 {
		t.Errorf("interruptions{MaintenanceEvent,HW/SW Maintenance} = %v, want 1", got)
	}
	if got := testworld.Settled(t, r.metrics.Evictions.WithLabelValues(drain.OutcomeEvicted), 2); got != 2 {
		t.Errorf("evictions{evicted} = %v, want 2", got)
	}
	if got := testworld.Settled(t, r.metrics.Phase.WithLabelValues("Terminating"), 1); got != 1 {
		t.Errorf("phase{Terminating} = %v, want 1", got)
	}
	// The drain's duration is observed before the phase is set.
	if got := testworld.HistogramCount(r.metrics.TaintLatencySeconds); got != 1 {
		t.Errorf("taint latency observations = %d, want 1", got)
	}
	if got := testworld.HistogramCount(r.metrics.DrainDurationSeconds); got != 1 {
		t.Errorf("drain duration observations = %d, want 1", got)
	}

	// The VM comes back: back in service, and the waiting pod lands there.
	reboot(t, v, r)
	world.WaitNode(t, v.name, "back in service", func(n *corev1.Node) bool {
		_, active := n.Labels[protocol.LabelActiveMaintenance]
		return !active && !protocol.HasTaint(n) && !n.Spec.Unschedulable && n.Annotations[protocol.AnnotationPhase] == ""
	})
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 60*time.Second), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := world.Client.CoreV1().Pods(ns).Get(ctx, "newcomer", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == v.name, nil
	})
	if err != nil {
		t.Errorf("newcomer never scheduled after the node came back: %v", err)
	}
	for _, reason := range []string{protocol.EventTerminateOnHost, protocol.EventEvictionComplete, protocol.EventMaintenanceCleared} {
		world.WaitEvent(t, v.name, reason)
	}
}

func TestCordonedNodeStaysCordoned(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-cordon-0")
	// A person cordons the node (kwok and the node controller update it
	// too, so retry on conflict as kubectl does).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, v.name)
		n.Spec.Unschedulable = true
		_, err := world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r := startAgent(t, v, lifecycle.DefaultConfig)
	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	reboot(t, v, r)
	n := world.WaitNode(t, v.name, "taint removed", func(n *corev1.Node) bool { return !protocol.HasTaint(n) })
	if !n.Spec.Unschedulable {
		t.Error("a node a person had cordoned was uncordoned")
	}
}

// guard puts pod p, which must be running or about to, under a
// PodDisruptionBudget of its own that allows no eviction (minAvailable 1),
// and waits until the budget counts it.
func guard(t *testing.T, p *corev1.Pod) {
	t.Helper()
	world.Budget(t, p.Namespace, p.Name, p.Labels, intstr.FromInt32(1), "1 healthy pod", healthy(1))
}

// preemptUntilTerminating preempts v's VM and waits for its node to be
// terminating: the deadline on the Node is the preemption's 30 s, and the
// pod ns/pod was gone first. (How long the drain took is the benchmarks'
// to measure, not a test's to assert.)
func preemptUntilTerminating(t *testing.T, v *vm, ns, pod string) {
	t.Helper()
	start := time.Now()
	v.emu.SetPreempted(true)
	n := world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	deadline, err := time.Parse(time.RFC3339Nano, n.Annotations[protocol.AnnotationDeadline])
	if err != nil || deadline.Before(start) || deadline.After(start.Add(31*time.Second)) {
		t.Errorf("deadline %v (%v), want within 30 s of the preemption at %v", deadline, err, start)
	}
	if !podGone(t, ns, pod) {
		t.Errorf("terminating before pod %s was gone", pod)
	}
}

func TestAgentRestartedMidDrainDrainsOnce(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-restart-0")
	ns := world.Namespace(t)
	createPod(t, makePod(ns, "slow", v.name, 6, 6*time.Second))
	createPod(t, makePod(ns, "slower", v.name, 8, 8*time.Second))
	first := startAgent(t, v, lifecycle.DefaultConfig)
	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitNode(t, v.name, "draining", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueOngoing
	})
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := world.Client.CoreV1().Pods(ns).Get(ctx, "slow", metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatal("the first agent never began the drain")
	}
	first.stop() // killed mid-drain
	second := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	// The restarted agent continues the node's total: one, not two.
	if got := testworld.Settled(t, second.metrics.Interruptions.WithLabelValues(protocol.HostMaintenance.Labels()...), 1); got != 1 {
		t.Errorf("the restarted agent's count is %v, want the node's total, 1", got)
	}
	if got := protocol.NodeInterruptions(getNode(t, v.name)); got[protocol.HostMaintenance.Key()] != 1 {
		t.Errorf("interruptions on the Node %v, want one host maintenance", got)
	}
	if got := nodeEvents(t, v.name)[protocol.EventTerminateOnHost]; got != 1 {
		t.Errorf("%d TerminateOnHostMaintenance Events, want 1 (one drain)", got)
	}
	if !podGone(t, ns, "slow") || !podGone(t, ns, "slower") {
		t.Error("terminating while pods remain")
	}
}

// TestNodeConditionsFollowTheMaintenance: the node lifecycle conditions,
// watched over a whole host maintenance whose agent is restarted mid-drain:
// each goes False, True, False once (MaintenancePlanned with the notice,
// the others with the drain and the VM's return), and the restart flips
// none.
func TestNodeConditionsFollowTheMaintenance(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-conditions-0")
	ns := world.Namespace(t)
	var mu sync.Mutex
	seen := map[corev1.NodeConditionType][]corev1.ConditionStatus{}
	w, err := world.Client.CoreV1().Nodes().Watch(testworld.Ctx(t, 3*time.Minute), metav1.ListOptions{FieldSelector: "metadata.name=" + v.name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			mu.Lock()
			for _, c := range n.Status.Conditions {
				if got := seen[c.Type]; slices.Contains(protocol.NodeConditionTypes, c.Type) && (len(got) == 0 || got[len(got)-1] != c.Status) {
					seen[c.Type] = append(got, c.Status)
				}
			}
			mu.Unlock()
		}
	}()
	createPod(t, makePod(ns, "slow", v.name, 6, 6*time.Second))
	first := startAgent(t, v, lifecycle.DefaultConfig)
	hasCondition := func(typ corev1.NodeConditionType, status corev1.ConditionStatus) func(*corev1.Node) bool {
		return func(n *corev1.Node) bool {
			for _, c := range n.Status.Conditions {
				if c.Type == typ {
					return c.Status == status
				}
			}
			return false
		}
	}
	world.WaitNode(t, v.name, "no maintenance planned", hasCondition(protocol.ConditionMaintenancePlanned, corev1.ConditionFalse))
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(time.Hour), time.Hour))
	world.WaitNode(t, v.name, "maintenance planned", hasCondition(protocol.ConditionMaintenancePlanned, corev1.ConditionTrue))
	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitNode(t, v.name, "draining", hasCondition(protocol.ConditionDrainInProgress, corev1.ConditionTrue))
	first.stop() // mid-drain: the pod takes 6 s to go
	second := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "drained", hasCondition(protocol.ConditionDrained, corev1.ConditionTrue))
	reboot(t, v, second)
	world.WaitNode(t, v.name, "back: no maintenance in progress, none planned", func(n *corev1.Node) bool {
		return hasCondition(protocol.ConditionMaintenanceInProgress, corev1.ConditionFalse)(n) && hasCondition(protocol.ConditionDrained, corev1.ConditionFalse)(n) &&
			hasCondition(protocol.ConditionMaintenancePlanned, corev1.ConditionFalse)(n)
	})
	// This test's own watch has seen it too.
	_ = wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(seen[protocol.ConditionMaintenanceInProgress]) >= 3 && len(seen[protocol.ConditionDrained]) >= 3 && len(seen[protocol.ConditionMaintenancePlanned]) >= 3, nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, typ := range protocol.NodeConditionTypes {
		if got := fmt.Sprint(seen[typ]); got != "[False True False]" {
			t.Errorf("%s went %s, want [False True False]", typ, got)
		}
	}
}

// setNodeInfo changes what the node reports it runs, as a reboot (and an
// upgrade) would.
func setNodeInfo(t *testing.T, name, bootID, kubelet string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, name)
		n.Status.NodeInfo.BootID = bootID
		if kubelet != "" {
			n.Status.NodeInfo.KubeletVersion = kubelet
		}
		_, err := world.Client.CoreV1().Nodes().UpdateStatus(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnannouncedRebootsAreCounted: a reboot with nothing announced is a
// host error; one into another kubelet version is a node upgrade; each is
// an Event, a count on the Node and in the metrics, and changes nothing else.
func TestUnannouncedRebootsAreCounted(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-reboot-0")
	r := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "boot ID recorded", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationLastBootID] != "" })
	r.stop()
	setNodeInfo(t, v.name, testworld.NewBootID(), "") // crashed and came back
	r = startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitEvent(t, v.name, protocol.EventUnexpectedReboot)
	n := world.WaitNode(t, v.name, "host error counted", func(n *corev1.Node) bool {
		return protocol.NodeInterruptions(n)[protocol.UnannouncedReboot.Key()] == 1
	})
	if protocol.HasTaint(n) || n.Spec.Unschedulable {
		t.Error("an unannounced reboot tainted or cordoned the node")
	}
	if got := testworld.Settled(t, r.metrics.Interruptions.WithLabelValues(protocol.UnannouncedReboot.Labels()...), 1); got != 1 {
		t.Errorf("interruptions{TerminationEvent,HostError} = %v, want 1", got)
	}
	r.stop()
	setNodeInfo(t, v.name, testworld.NewBootID(), "v1.37.0")
	r = startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitEvent(t, v.name, protocol.EventNodeUpgraded)
	world.WaitNode(t, v.name, "upgrade counted", func(n *corev1.Node) bool {
		c := protocol.NodeInterruptions(n)
		return c[protocol.Upgrade.Key()] == 1 && c[protocol.UnannouncedReboot.Key()] == 1
	})
	// The restarted agent's counters carry the node's totals.
	if got := testworld.Settled(t, r.metrics.Interruptions.WithLabelValues(protocol.UnannouncedReboot.Labels()...), 1); got != 1 {
		t.Errorf("interruptions{TerminationEvent,HostError} after a restart = %v, want 1", got)
	}
	if got := testworld.Settled(t, r.metrics.Interruptions.WithLabelValues(protocol.Upgrade.Labels()...), 1); got != 1 {
		t.Errorf("interruptions{MaintenanceEvent,NodeUpgrade} = %v, want 1", got)
	}
	// What the aggregator counts on the Node (a repair) reaches the counters.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, v.name)
		c := protocol.NodeInterruptions(n)
		c["TerminationEvent/AutoRepair"] = 1
		b, _ := json.Marshal(c)
		n.Annotations[protocol.AnnotationInterruptions] = string(b)
		_, err := world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(r.metrics.Interruptions.WithLabelValues(protocol.Repair.Labels()...)) == 1, nil
	})
	if err != nil {
		t.Error("a repair counted on the Node never reached the agent's counters")
	}
	if got := testworld.Settled(t, r.metrics.Interruptions.WithLabelValues(protocol.UnannouncedReboot.Labels()...), 1); got != 1 {
		t.Errorf("interruptions{TerminationEvent,HostError} = %v after the repair, want still 1", got)
	}
}

// TestAgentStartedLateDrainsByThePlatformsDeadline: an agent that starts
// (after a crash, or installed) when TERMINATE_ON_HOST_MAINTENANCE has been
// showing for a while does not take the hour for its own: the signal came
// inside the maintenance window, which opened 59 min 20 s ago, so the VM
// stops 40 s from now. Every pod gets SIGTERM with a grace that ends before
// then: the one a PodDisruptionBudget holds, the one with a 10 min
// checkpoint lead, the system pod and the DaemonSet pod.
func TestAgentStartedLateDrainsByThePlatformsDeadline(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-late-1")
	ns := world.Namespace(t)
	held := makePod(ns, "held", v.name, 5, time.Second)
	held.Labels = map[string]string{"app": "held"}
	lead := makePod(ns, "lead", v.name, 5, time.Second)
	lead.Annotations[protocol.PodAnnotationCheckpointLead] = "10m"
	system := makePod(metav1.NamespaceSystem, "system-"+v.name, v.name, 3, time.Second)
	for _, p := range []*corev1.Pod{held, lead, system} {
		createPod(t, p)
	}
	guard(t, held)
	dsLabels := map[string]string{"app": "exporter"}
	tmpl := makePod(ns, "", "", 2, time.Second)
	tmpl.Labels, tmpl.Spec.NodeName, tmpl.Spec.NodeSelector = dsLabels, "", map[string]string{corev1.LabelHostname: v.name}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "exporter"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: dsLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}}}
	if _, err := world.Client.AppsV1().DaemonSets(ns).Create(testworld.Ctx(t, 10*time.Second), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	world.WaitRunning(t, v.name, 4)
	pods, err := world.Client.CoreV1().Pods(ns).List(testworld.Ctx(t, 10*time.Second), metav1.ListOptions{LabelSelector: "app=exporter"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("DaemonSet pods: %v %v, want 1", len(pods.Items), err)
	}
	watches := map[string]*podWatch{}
	for _, p := range []*corev1.Pod{held, lead, system, &pods.Items[0]} {
		watches[p.Namespace+"/"+p.Name] = watchPod(t, p.Namespace, p.Name)
	}

	opened := time.Now().Add(-59*time.Minute - 20*time.Second).Truncate(time.Second)
	n := gceemu.ScheduledNotice(opened, 4*time.Hour)
	n.MaintenanceStatus, n.CanReschedule = gceemu.StatusOngoing, false
	v.emu.ScheduleNotice(n)
	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	startAgent(t, v, lifecycle.DefaultConfig)

	stop := opened.Add(time.Hour)
	// The keys answer in any order: the deadline may first count from now,
	// until the window is read.
	world.WaitNode(t, v.name, "the deadline an hour from the window's opening, the earliest the signal can have come", func(n *corev1.Node) bool {
		got, err := time.Parse(time.RFC3339Nano, n.Annotations[protocol.AnnotationDeadline])
		return err == nil && got.Equal(stop)
	})
	for ref, w := range watches {
		end := w.gone(t)
		// deletionTimestamp has whole seconds; a grace rounded up to whole
		// seconds ends at most 1 s past the deadline.
		if !end.terminated || end.grace < 1 || end.ends.After(stop.Add(time.Second)) {
			t.Errorf("%s: terminated %t with a %d s grace ending %s, want SIGTERM with a grace ending by the VM's stop at %s",
				ref, end.terminated, end.grace, end.ends.UTC().Format(time.RFC3339), stop.UTC().Format(time.RFC3339))
		}
	}
	world.WaitEvent(t, v.name, protocol.EventEscalated)
}
