package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(vms.RunMain(m, &world)) }

// published is what an agent publishes on its Node, written directly: the
// aggregator's half of the protocol, on its own.
type published struct {
	windowStart   time.Time
	canReschedule bool
	idleFor       time.Duration // < 0: busy
	busy          string
	labels        map[string]string
	config        string
}

func notice(start time.Time, canReschedule bool) string {
	b, _ := json.Marshal(map[string]any{"can_reschedule": canReschedule, "maintenance_status": "PENDING", "type": "SCHEDULED",
		"window_start_time": start.UTC().Format(time.RFC3339), "window_end_time": start.Add(4 * time.Hour).UTC().Format(time.RFC3339),
		"latest_window_start_time": start.UTC().Format(time.RFC3339)})
	return string(b)
}

func publish(t *testing.T, name string, p published) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Annotations[protocol.AnnotationUpcomingMaintenance] = notice(p.windowStart, p.canReschedule)
		if p.idleFor >= 0 {
			n.Annotations[protocol.AnnotationIdleSince] = time.Now().Add(-p.idleFor).UTC().Format(time.RFC3339Nano)
			delete(n.Annotations, protocol.AnnotationBusy)
		} else {
			delete(n.Annotations, protocol.AnnotationIdleSince)
			n.Annotations[protocol.AnnotationBusy] = p.busy
		}
		if p.config != "" {
			n.Annotations[protocol.AnnotationOpportunisticConfig] = p.config
		}
		for k, v := range p.labels {
			n.Labels[k] = v
		}
		_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

type running struct {
	agg     *aggregator.Aggregator
	metrics *metrics.Aggregator
}

func startAggregator(t *testing.T, ns, configMap string) *running {
	t.Helper()
	return startAggregatorWith(t, ns, configMap, 0)
}

func startAggregatorWith(t *testing.T, ns, configMap string, recreateWindow time.Duration) *running {
	t.Helper()
	return startAggregatorOpts(t, aggregator.Options{Namespace: ns, ConfigMap: configMap, RecreateWindow: recreateWindow})
}

// clients are the product's clients of the test world's API server, as
// cmd/aggregator makes them, as the admin.
func clients(t testing.TB) (*kube.Client, coordinationv1client.LeasesGetter) {
	t.Helper()
	return clientsFor(t, world.Config)
}

// clientsFor are the product's clients of cfg, as cmd/aggregator makes
// them.
func clientsFor(t testing.TB, cfg *rest.Config) (*kube.Client, coordinationv1client.LeasesGetter) {
	t.Helper()
	c, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, l
}

// shippedLease is the aggregator's Lease as shipped (the names its Role
// grants).
const shippedLease = "maintenance-handler-aggregator"

// shippedClients are the product's clients as the aggregator's shipped
// identity in ns: its service account, ClusterRole and policies, and its
// Role granted in ns, as a replica running in ns has them.
func shippedClients(t testing.TB, ns string) (*kube.Client, coordinationv1client.LeasesGetter) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", world.AggregatorKubeconfigT(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	return clientsFor(t, cfg)
}

// startAggregatorOpts runs an in-process aggregator with o, with the
// aggregator's shipped identity and Lease, and the tests' timings and
// metrics.
func startAggregatorOpts(t *testing.T, o aggregator.Options) *running {
	t.Helper()
	m := metrics.NewAggregator(metrics.NewRegistry())
	o.Client, o.Leases = shippedClients(t, o.Namespace)
	o.LeaseName, o.Identity, o.Metrics = shippedLease, "test-"+t.Name(), m
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	o.Interval, o.MinInterval = time.Second, 100*time.Millisecond
	a, err := aggregator.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &running{agg: a, metrics: m}
}

// waitPasses waits until a has finished n more decision passes: the work
// after which what must not happen would have happened.
func waitPasses(t *testing.T, a *aggregator.Aggregator, n uint64) {
	t.Helper()
	target := a.Passes() + n
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return a.Passes() >= target, nil
	})
	if err != nil {
		t.Fatalf("the aggregator did not finish %d more passes (%d done)", n, a.Passes())
	}
}

func triggered(n *corev1.Node) bool {
	if n.Labels[protocol.LabelPerformMaintenance] != protocol.TriggerValue {
		return false
	}
	_, _, ms := protocol.ReadTrigger(n)
	return ms.OpportunisticTriggered
}

func nodes(t *testing.T, pool string, names ...string) {
	t.Helper()
	for _, name := range names {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: pool})
	}
}

// TestGKEExample: four nodes, node-idle-time=600s, window=2419200s,
// min-nodes=3; node1 busy, node2 idle 60 s, node3 and node4 idle 600 s:
// exactly one of node3 and node4 is triggered, and every node says why.
func TestGKEExample(t *testing.T) {
	testworld.Need(t)
	names := []string{"gke-ex-node1", "gke-ex-node2", "gke-ex-node3", "gke-ex-node4"}
	nodes(t, "gke-ex", names...)
	cfg := "node-idle-time=600s,min-nodes=3,window=2419200s"
	start := time.Now().Add(7 * 24 * time.Hour)
	publish(t, names[0], published{windowStart: start, canReschedule: true, idleFor: -1, busy: protocol.BusyAccelerators, config: cfg})
	publish(t, names[1], published{windowStart: start, canReschedule: true, idleFor: 60 * time.Second, config: cfg})
	publish(t, names[2], published{windowStart: start, canReschedule: true, idleFor: 600 * time.Second, config: cfg})
	publish(t, names[3], published{windowStart: start, canReschedule: true, idleFor: 600 * time.Second, config: cfg})
	r := startAggregator(t, world.Namespace(t), "")

	world.WaitEvent(t, names[0], protocol.EventSkipped, "pods on it use accelerators")
	world.WaitEvent(t, names[1], protocol.EventSkipped, "less than node-idle-time=600s")
	var picked, other string
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for i, name := range names[2:] {
			n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err == nil && triggered(n) {
				picked, other = name, names[2+(1-i)]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("neither node3 nor node4 was triggered")
	}
	world.WaitEvent(t, picked, protocol.EventTriggered, "Picked for opportunistic maintenance")
	world.WaitEvent(t, other, protocol.EventSkipped, "min-nodes=3")
	// Several more passes: still exactly one.
	waitPasses(t, r.agg, 3)
	count := 0
	for _, name := range names {
		n, _ := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if triggered(n) {
			count++
		}
	}
	if count != 1 {
		t.Errorf("%d nodes triggered, want exactly 1", count)
	}
	if got := testworld.Settled(t, r.metrics.Decisions.WithLabelValues("triggered", string(fleet.ReasonTriggered)), 1); got != 1 {
		t.Errorf("decisions{triggered} = %v, want 1", got)
	}
	if got, ok := poolGauge(t, r.metrics, "pool_nodes_in_maintenance", "gke-ex"); got != 1 {
		t.Errorf("pool_nodes_in_maintenance{gke-ex} = %v (exported: %t), want 1", got, ok)
	}
	if !r.agg.Leading() || testutil.ToFloat64(r.metrics.Leader) != 1 {
		t.Error("the only aggregator is not leading")
	}

	// The picked node's agent drains it and Compute Engine begins the
	// maintenance: the agent counts it, and so does the pool, under its
	// own reason.
	answer := func(change func(*protocol.AgentState)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), picked, metav1.GetOptions{})
			if err != nil {
				return err
			}
			st := protocol.ReadAgentState(n)
			change(&st)
			protocol.WriteAgentState(n, st)
			_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	answer(func(st *protocol.AgentState) {
		st.Phase, st.Reason, st.Started, st.Deadline = protocol.PhaseDraining, protocol.ReasonManual, time.Now(), time.Now().Add(time.Hour)
	})
	answer(func(st *protocol.AgentState) { st.Phase = protocol.PhaseTerminating })
	answer(func(st *protocol.AgentState) {
		st.Begun, st.Interruptions = true, st.Interruptions.Add(protocol.HostMaintenance, 1)
	})
	opportunistic := r.metrics.PoolInterruptions.WithLabelValues(append([]string{"gke-ex"}, protocol.OpportunisticMaintenance.Labels()...)...)
	if got := testworld.Settled(t, opportunistic, 1); got != 1 {
		t.Errorf("pool_interruptions_total{gke-ex, Opportunistic} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.metrics.PoolInterruptions.WithLabelValues(append([]string{"gke-ex"}, protocol.HostMaintenance.Labels()...)...)); got != 0 {
		t.Errorf("pool_interruptions_total{gke-ex, HW/SW Maintenance} = %v, want 0: the maintenance was opportunistic", got)
	}
}

func configMap(t testing.TB, ns, text string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "maintenance-handler", Namespace: ns}, Data: map[string]string{policy.ConfigKey: text}}
	if _, err := world.Client.CoreV1().ConfigMaps(ns).Create(testworld.Ctx(t, 10*time.Second), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestNotTriggeredWithTheReason: every condition that keeps an idle node
// out of opportunistic maintenance is said on the node, and none is
// triggered.
func TestNotTriggeredWithTheReason(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	now := time.Now().UTC()
	soon := now.Add(24 * time.Hour)
	// Pool "reasons": min-nodes=0, so only the reasons below hold nodes back.
	names := []string{"why-optout", "why-fixed", "why-far", "why-pinned"}
	nodes(t, "reasons", names...)
	publish(t, "why-optout", published{windowStart: soon, canReschedule: true, idleFor: time.Hour, labels: map[string]string{protocol.LabelOpportunisticDisable: "true"}})
	publish(t, "why-fixed", published{windowStart: soon, canReschedule: false, idleFor: time.Hour})
	publish(t, "why-far", published{windowStart: now.Add(60 * 24 * time.Hour), canReschedule: true, idleFor: time.Hour})
	publish(t, "why-pinned", published{windowStart: soon, canReschedule: true, idleFor: -1, busy: protocol.BusySafeToEvict})
	// Pool "windowed": a maintenance window that opens tomorrow; pool
	// "frozen": inside an exclusion (which wins over its open window).
	nodes(t, "windowed", "why-window")
	nodes(t, "frozen", "why-excluded")
	publish(t, "why-window", published{windowStart: soon, canReschedule: true, idleFor: time.Hour})
	publish(t, "why-excluded", published{windowStart: soon, canReschedule: true, idleFor: time.Hour})
	configMap(t, ns, `
pools:
  reasons:
    opportunistic: node-idle-time=600s,min-nodes=0,window=604800s
  windowed:
    opportunistic: node-idle-time=600s,min-nodes=0,window=604800s
    maintenanceWindow: {startTime: "`+now.Add(24*time.Hour).Format(time.RFC3339)+`", duration: 4h, recurrence: "FREQ=WEEKLY;BYDAY=SA,SU"}
  frozen:
    opportunistic: node-idle-time=600s,min-nodes=0,window=604800s
    maintenanceWindow: {startTime: "`+now.Add(-time.Hour).Format(time.RFC3339)+`", duration: 4h, recurrence: FREQ=DAILY}
    exclusions:
    - {name: launch-week, startTime: "`+now.Add(-time.Hour).Format(time.RFC3339)+`", endTime: "`+now.Add(7*24*time.Hour).Format(time.RFC3339)+`"}
`)
	startAggregator(t, ns, "maintenance-handler")
	for node, text := range map[string]string{
		"why-optout":   protocol.LabelOpportunisticDisable + "=true",
		"why-fixed":    "cannot be rescheduled",
		"why-far":      "more than window=604800s away",
		"why-pinned":   protocol.PodAnnotationSafeToEvict + "=false",
		"why-window":   "outside the maintenance window",
		"why-excluded": `inside the maintenance exclusion "launch-week"`,
	} {
		world.WaitEvent(t, node, protocol.EventSkipped, text)
	}
	for _, name := range append(names, "why-window", "why-excluded") {
		n, _ := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if triggered(n) {
			t.Errorf("%s was triggered", name)
		}
	}
}

// TestInvalidConfigurationIsAnsweredAndChangesNothing: a bad gcloud string
// on the nodes, disagreeing nodes, a slice pool with min-nodes, and a bad
// RRULE in the ConfigMap: Warning Events, no trigger.
func TestInvalidConfigurationIsAnsweredAndChangesNothing(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	soon := time.Now().Add(24 * time.Hour)
	nodes(t, "bad-string", "bad-string-0")
	publish(t, "bad-string-0", published{windowStart: soon, canReschedule: true, idleFor: time.Hour, config: "node-idle-time=10m,min-nodes=0,window=604800s"})
	nodes(t, "bad-mixed", "bad-mixed-0", "bad-mixed-1")
	publish(t, "bad-mixed-0", published{windowStart: soon, canReschedule: true, idleFor: time.Hour, config: "node-idle-time=600s,min-nodes=0,window=604800s"})
	publish(t, "bad-mixed-1", published{windowStart: soon, canReschedule: true, idleFor: time.Hour, config: "node-idle-time=60s,min-nodes=0,window=604800s"})
	r := startAggregator(t, ns, "maintenance-handler")
	world.WaitEvent(t, "bad-string-0", protocol.EventInvalidConfig, "node-idle-time=10m: want seconds")
	world.WaitEvent(t, "bad-mixed-1", protocol.EventInvalidConfig, "disagree")
	if got, ok := poolGauge(t, r.metrics, "pool_config_valid", "bad-mixed"); got != 0 || !ok {
		t.Errorf("pool_config_valid{bad-mixed} = %v (exported: %t), want 0", got, ok)
	}

	// A ConfigMap with a bad RRULE: nothing at all is triggered, even in a
	// pool whose own annotation is fine.
	nodes(t, "good", "good-0")
	configMap(t, ns, `
cluster:
  maintenanceWindow: {startTime: "2026-11-21T00:00:00Z", duration: 48h, recurrence: "FREQ=WEEKLY;BYDAY=SATURDAY"}
`)
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := world.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ConfigMap,reason=" + protocol.EventInvalidConfig})
		return err == nil && len(list.Items) > 0 && strings.Contains(list.Items[0].Message, "BYDAY"), nil
	})
	if err != nil {
		t.Fatal("no Warning Event on the ConfigMap naming the bad RRULE")
	}
	publish(t, "good-0", published{windowStart: soon, canReschedule: true, idleFor: time.Hour, config: "node-idle-time=600s,min-nodes=0,window=604800s"})
	waitPasses(t, r.agg, 3)
	for _, name := range []string{"bad-string-0", "bad-mixed-0", "bad-mixed-1", "good-0"} {
		n, _ := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if triggered(n) {
			t.Errorf("%s triggered under an invalid configuration", name)
		}
	}
}

// TestSliceCountsAgainstTheCaps: an idle 4-host TPU slice (pool
// a-slice) and two pools of three idle GPU nodes, with a cluster cap of 6
// nodes in voluntary maintenance. The slice goes first and takes 4 of the
// 6 (one trigger, on its first host, which asks Compute Engine for the
// slice); b-gpu takes the 2 left; c-gpu none, and is told why. Further
// passes take nothing more.
func TestSliceCountsAgainstTheCaps(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	cfg := "node-idle-time=60s,min-nodes=0,window=604800s,max-unavailable=3"
	soon := time.Now().Add(24 * time.Hour)
	var all []string
	for i := range 4 {
		name := fmt.Sprintf("a-slice-%d", i)
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "a-slice", TPU: true, Labels: map[string]string{testworld.LabelTPUTopology: "2x2x4"}})
		proveVMs(t, testworld.Ctx(t, 30*time.Second), protocol.VMFacts{MachineType: v5pMachine, Status: "RUNNING"}, name)
		publish(t, name, published{windowStart: soon, canReschedule: true, idleFor: time.Hour, config: "node-idle-time=60s,min-nodes=0,window=604800s"})
		all = append(all, name)
	}
	all = append(all, idlePool(t, "b-gpu", "b-gpu", 3, cfg)...)
	all = append(all, idlePool(t, "c-gpu", "c-gpu", 3, cfg)...)
	configMap(t, ns, "cluster: {maxVoluntaryMaintenance: \"6\"}\n")
	r := startAggregator(t, ns, "maintenance-handler")
	world.WaitNodes(t, []string{"a-slice-0"}, "triggered for the whole slice", triggered)
	world.WaitEvent(t, "c-gpu-00", protocol.EventSkipped, "maxVoluntaryMaintenance=6")
	waitPasses(t, r.agg, 3)
	var got []string
	for _, name := range all {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if triggered(n) {
			got = append(got, name)
		}
	}
	// a-slice-0 takes its slice's 4 nodes; two of b-gpu the rest.
	if len(got) != 3 || got[0] != "a-slice-0" || !strings.HasPrefix(got[1], "b-gpu-") || !strings.HasPrefix(got[2], "b-gpu-") {
		t.Errorf("triggered %v; want a-slice-0 (4 nodes with its slice) and two of b-gpu: 6 nodes, the cluster's cap", got)
	}
	world.WaitEvent(t, "a-slice-0", protocol.EventTriggered, "with the whole multi-host TPU slice a-slice (4 nodes, all idle)")
}

// TestRecreatedNodeCountedAsAutoRepair: a Node deleted and created again
// under its name is counted once as TerminationEvent/AutoRepair, on the new
// Node (carrying the old object's counts) and per pool.
func TestRecreatedNodeCountedAsAutoRepair(t *testing.T) {
	testworld.Need(t)
	const name = "repair-0"
	nodes(t, "repair", name)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Annotations[protocol.AnnotationInterruptions] = `{"MaintenanceEvent/HW/SW Maintenance":1}`
		_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r := startAggregator(t, world.Namespace(t), "")
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return r.agg.Leading(), nil
	})
	if err != nil {
		t.Fatal("never leading")
	}
	old, _ := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
	if err := world.Client.CoreV1().Nodes().Delete(testworld.Ctx(t, 10*time.Second), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatal("the node was never deleted")
	}
	if _, err := world.AddNode(testworld.Ctx(t, time.Minute), testworld.NodeSpec{Name: name, Pool: "repair"}); err != nil {
		t.Fatal(err)
	}
	var n *corev1.Node
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err = world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && n.UID != old.UID && protocol.NodeInterruptions(n)[protocol.Repair.Key()] == 1, nil
	})
	if err != nil {
		t.Fatalf("the repair was never counted on the new Node: %v", n.Annotations)
	}
	if got := protocol.NodeInterruptions(n)[protocol.HostMaintenance.Key()]; got != 1 {
		t.Errorf("the old object's counts were not carried over: %v", protocol.NodeInterruptions(n))
	}
	if v := n.Annotations[protocol.AnnotationInterruptions]; v != "" {
		t.Errorf("the aggregator wrote the agent's key %s: %s", protocol.AnnotationInterruptions, v)
	}
	world.WaitEvent(t, name, protocol.EventRecreated, "counted as "+protocol.Repair.Key())
	if got := testworld.Settled(t, r.metrics.PoolInterruptions.WithLabelValues(append([]string{"repair"}, protocol.Repair.Labels()...)...), 1); got != 1 {
		t.Errorf("pool_interruptions{repair,TerminationEvent,AutoRepair} = %v, want 1", got)
	}
	// Later passes do not count it again.
	waitPasses(t, r.agg, 3)
	n, _ = world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
	if got := protocol.NodeInterruptions(n)[protocol.Repair.Key()]; got != 1 {
		t.Errorf("AutoRepair counted %d times", got)
	}
}

// TestVanishedNodeCounted: a Node deleted while NotReady and not created
// again within the window is counted as a host error no agent could
// report; one deleted while Ready (a scale-down) is not.
func TestVanishedNodeCounted(t *testing.T) {
	testworld.Need(t)
	// Not managed by kwok: never Ready, as a node whose VM is gone.
	lost := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vanish-lost", Labels: map[string]string{testworld.LabelNodePool: "vanish"}}}
	if _, err := world.Client.CoreV1().Nodes().Create(testworld.Ctx(t, 10*time.Second), lost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().Nodes().Delete(context.Background(), "vanish-lost", metav1.DeleteOptions{})
	})
	nodes(t, "vanish", "vanish-ready")
	// Scaled down: NotReady (its VM went first), but tainted by the
	// cluster autoscaler.
	scaled := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vanish-scaled", Labels: map[string]string{testworld.LabelNodePool: "vanish"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: protocol.TaintToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := world.Client.CoreV1().Nodes().Create(testworld.Ctx(t, 10*time.Second), scaled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().Nodes().Delete(context.Background(), "vanish-scaled", metav1.DeleteOptions{})
	})
	r := startAggregatorWith(t, world.Namespace(t), "", 2*time.Second)
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return r.agg.Leading(), nil
	})
	if err != nil {
		t.Fatal("never leading")
	}
	for _, name := range []string{"vanish-lost", "vanish-ready", "vanish-scaled"} {
		if err := world.Client.CoreV1().Nodes().Delete(testworld.Ctx(t, 10*time.Second), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	counter := r.metrics.VanishedNodes.WithLabelValues(append([]string{"vanish-lost", "vanish"}, protocol.UnannouncedReboot.Labels()...)...)
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(counter) == 1, nil
	})
	if err != nil {
		t.Fatal("the vanished node was never counted")
	}
	waitPasses(t, r.agg, 3)
	if got := testworld.Settled(t, counter, 1); got != 1 {
		t.Errorf("vanished node counted %v times", got)
	}
	if got := testutil.CollectAndCount(r.metrics.VanishedNodes); got != 1 {
		t.Errorf("%d vanished series, want 1 (a Ready node deleted, or one the autoscaler tainted, is a scale-down, not an interruption)", got)
	}
}

// poolFamilies gathers m's pool gauges.
func poolFamilies(t *testing.T, m *metrics.Aggregator) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Pools)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// poolSeries lists the pools m exports pool_nodes_pending_maintenance for.
func poolSeries(t *testing.T, m *metrics.Aggregator) []string {
	t.Helper()
	var pools []string
	for _, f := range poolFamilies(t, m) {
		if f.GetName() != "maintenance_handler_aggregator_pool_nodes_pending_maintenance" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "node_pool_name" {
					pools = append(pools, l.GetValue())
				}
			}
		}
	}
	sort.Strings(pools)
	return pools
}

// poolGauge reads maintenance_handler_aggregator_<name>{node_pool_name=pool}
// and whether it is exported.
func poolGauge(t *testing.T, m *metrics.Aggregator, name, pool string) (float64, bool) {
	t.Helper()
	for _, f := range poolFamilies(t, m) {
		if f.GetName() != "maintenance_handler_aggregator_"+name {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "node_pool_name" && l.GetValue() == pool {
					return s.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestOnlyTheLeaderExportsPoolSeries: a replica that stops leading drops
// its pool series (sums by pool are never stale or doubled after a
// failover), and a pool that is gone leaves none.
func TestOnlyTheLeaderExportsPoolSeries(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	for _, name := range []string{"agg-pools-a", "agg-pools-b"} {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "pool-" + strings.TrimPrefix(name, "agg-pools-")})
		publish(t, name, published{windowStart: time.Now().Add(72 * time.Hour), canReschedule: true, idleFor: -1, busy: "accelerators"})
	}
	start := func(identity string) (*metrics.Aggregator, func()) {
		m := metrics.NewAggregator(metrics.NewRegistry())
		c, l := shippedClients(t, ns)
		a, err := aggregator.New(aggregator.Options{Client: c, Leases: l, Namespace: ns, LeaseName: shippedLease, Identity: identity, Metrics: m,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
			Interval: time.Second, MinInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Start(ctx) }()
		stop := sync.OnceFunc(func() { cancel(); <-done })
		t.Cleanup(stop)
		return m, stop
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return cond(), nil })
		if err != nil {
			t.Fatalf("%s never happened", what)
		}
	}
	first, stopFirst := start("first")
	waitFor("the first replica leads and exports both pools", func() bool {
		return testutil.ToFloat64(first.Leader) == 1 && fmt.Sprint(poolSeries(t, first)) == "[pool-a pool-b]"
	})
	second, _ := start("second")
	stopFirst()
	waitFor("the second replica leads and exports both pools", func() bool {
		return testutil.ToFloat64(second.Leader) == 1 && fmt.Sprint(poolSeries(t, second)) == "[pool-a pool-b]"
	})
	if got := poolSeries(t, first); len(got) != 0 {
		t.Errorf("the replica that stopped leading still exports pools %v", got)
	}
	// pool-b's only node goes: its series goes with it.
	if err := world.Client.CoreV1().Nodes().Delete(testworld.Ctx(t, 10*time.Second), "agg-pools-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("pool-b's series to go", func() bool { return fmt.Sprint(poolSeries(t, second)) == "[pool-a]" })
}

// TestGKEsOwnNodesLeftToGKE: on nodes where GKE's own maintenance handler
// runs (GKE's kubelet, 1.33 here), the aggregator does not act on the
// opportunistic-config annotation GKE acts on, and says so on the Node.
func TestGKEsOwnNodesLeftToGKE(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	names := []string{"gke-own-0", "gke-own-1"}
	for _, name := range names {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "gke-own", KubeletVersion: "v1.33.2-gke.1240000"})
		publish(t, name, published{windowStart: time.Now().Add(72 * time.Hour), canReschedule: true, idleFor: time.Hour,
			config: "node-idle-time=600s,min-nodes=0,window=2419200s"})
	}
	r := startAggregator(t, ns, "")
	world.WaitEvent(t, names[0], protocol.EventSkipped, "GKE's own maintenance handler acts on")
	waitPasses(t, r.agg, 3)
	for _, name := range names {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil || triggered(n) {
			t.Errorf("%s triggered where GKE's handler acts (%v)", name, err)
		}
	}
	if got := testworld.Settled(t, r.metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonGKEHandles)), 2); got != 2 {
		t.Errorf("decisions{skipped,gke_handles} = %v, want 2", got)
	}
}

// idlePool makes n nodes of pool, named prefix-00 on, each idle for an
// hour with a maintenance pending in 3 days that can be rescheduled, and
// the opportunistic setting config; it returns their names.
func idlePool(t *testing.T, pool, prefix string, n int, config string) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		names = append(names, name)
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: pool})
		publish(t, name, published{windowStart: time.Now().Add(72 * time.Hour), canReschedule: true, idleFor: time.Hour, config: config})
	}
	return names
}

// TestVoluntaryMaintenanceCapped: a pool of 20 idle nodes, min-nodes=0,
// max-unavailable=2: two are triggered, and however many passes follow,
// no more while those two are in maintenance; the others are told why.
func TestVoluntaryMaintenanceCapped(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	names := idlePool(t, "capped", "cap", 20, "node-idle-time=600s,min-nodes=0,window=2419200s,max-unavailable=2")
	r := startAggregator(t, ns, "")
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(r.metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonMaxVoluntary))) == 18, nil
	})
	if err != nil {
		t.Fatalf("decisions{skipped,max_voluntary} = %v, want 18", testutil.ToFloat64(r.metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonMaxVoluntary))))
	}
	waitPasses(t, r.agg, 3)
	count := 0
	var skippedOne string
	for _, name := range names {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if triggered(n) {
			count++
		} else if skippedOne == "" {
			skippedOne = name
		}
	}
	if count != 2 {
		t.Errorf("%d of 20 idle nodes triggered, want 2 (max-unavailable=2)", count)
	}
	world.WaitEvent(t, skippedOne, protocol.EventSkipped, "max-unavailable=2")
}
