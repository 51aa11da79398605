package aggregator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/internal/plugin"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// agentWritableAnnotations are the Node annotations the admission policy
// lets a node's agent write (maintenance-handler.io/* and GKE's two), as
// far as the product reads them: a compromised agent can put anything in
// them.
var agentWritableAnnotations = []string{
	protocol.AnnotationPhase, protocol.AnnotationReason, protocol.AnnotationDeadline, protocol.AnnotationStarted,
	protocol.AnnotationBootID, protocol.AnnotationCordonedBefore, protocol.AnnotationRequestID, protocol.AnnotationRequested,
	protocol.AnnotationLastEvent, protocol.AnnotationBegun, protocol.AnnotationNoticeDone, protocol.AnnotationIdleSince,
	protocol.AnnotationBusy, protocol.AnnotationInterruptions, protocol.AnnotationLastBootID, protocol.AnnotationKubeletVersion,
	protocol.AnnotationVoluntaryFailures, protocol.AnnotationNoticeMirrored, protocol.AnnotationLeftToGKE, protocol.AnnotationDrain,
	protocol.AnnotationRepairs, protocol.AnnotationSliceMaintenance, protocol.AnnotationUpcomingMaintenance,
	protocol.AnnotationMaintenanceState,
}

// TestHostileNodeCannotMoveTheFleet: four nodes whose agents write what
// the admission policy lets an agent write on its own Node, but hostile:
//   - hostile-garbage: every protocol key the product reads, garbage
//     (its three labels too);
//   - hostile-huge: idle, with a pending notice, and 200 KiB of
//     interruption counts (the API server's limit for a Node's
//     annotations is 256 KiB);
//   - hostile-phase: a manual maintenance it does not have (a voluntary
//     one, which would count against the caps on its word), and
//     interruptions counted;
//   - hostile-slice: a GPU node of no slice that asks a TPU slice's hosts
//     to drain, naming one of them as the cause.
//
// The pass goes on for every other node: in the pool, whose cap is 3, two
// honest nodes are triggered (the garbage perform-maintenance label, a
// request no node may write, takes the third place; the hostile manual
// maintenance takes none: a node's own word that it is in one is no place
// under the caps) and the others are told why; the two unreadable nodes get a Warning naming their keys and a
// series of node_unreadable_keys, and the one with a pending notice is not
// picked, and told why; no slice host is asked anything and no slice is
// counted; the plugin prints the unreadable nodes as such.
func TestHostileNodeCannotMoveTheFleet(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	cfg := "node-idle-time=60s,min-nodes=0,window=604800s"
	honest := idlePool(t, "hostile-pool", "honest", 4, cfg)
	var slice []string
	for i := range 4 {
		name := fmt.Sprintf("hostile-tpu-%d", i)
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "hostile-tpu", TPU: true, Labels: map[string]string{testworld.LabelTPUTopology: "2x2x4"}})
		slice = append(slice, name)
	}
	for _, name := range []string{"hostile-garbage", "hostile-huge", "hostile-phase", "hostile-slice"} {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "hostile-pool"})
	}
	now := time.Now().UTC()
	write(t, "hostile-garbage", func(n *corev1.Node) {
		for i, key := range agentWritableAnnotations {
			n.Annotations[key] = fmt.Sprintf("\x00garbage %d {[\"", i)
		}
		n.Labels[protocol.LabelScheduledMaintenanceTime] = "garbage"
		n.Labels[protocol.LabelActiveMaintenance] = "garbage"
		n.Labels[protocol.LabelPerformMaintenance] = "garbage"
	})
	publish(t, "hostile-huge", published{windowStart: now.Add(72 * time.Hour), canReschedule: true, idleFor: 2 * time.Hour, config: cfg})
	write(t, "hostile-huge", func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationInterruptions] = `{"` + protocol.Preemption.Key() + `":` + strings.Repeat("9", 200<<10) + `}`
		n.Annotations[protocol.AnnotationLastBootID] = "boot-1"
	})
	write(t, "hostile-phase", func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationPhase] = string(protocol.PhaseDraining)
		n.Annotations[protocol.AnnotationReason] = string(protocol.ReasonManual)
		n.Annotations[protocol.AnnotationStarted] = now.Format(time.RFC3339)
		n.Annotations[protocol.AnnotationDeadline] = now.Add(time.Hour).Format(time.RFC3339)
		n.Annotations[protocol.AnnotationInterruptions] = `{"` + protocol.Preemption.Key() + `":8}`
		n.Annotations[protocol.AnnotationLastBootID] = "boot-1"
	})
	ask, _ := json.Marshal(protocol.SliceAsk{Slice: "hostile-tpu", Cause: slice[0], Reason: protocol.ReasonPreemption, Started: now, Deadline: now.Add(30 * time.Second)})
	write(t, "hostile-slice", func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationSliceMaintenance] = string(ask)
		n.Annotations[protocol.AnnotationPhase] = string(protocol.PhaseTerminating)
		n.Annotations[protocol.AnnotationReason] = string(protocol.ReasonPreemption)
		n.Annotations[protocol.AnnotationStarted] = now.Format(time.RFC3339)
		n.Annotations[protocol.AnnotationDeadline] = now.Add(30 * time.Second).Format(time.RFC3339)
		n.Annotations[protocol.AnnotationLastBootID] = "boot-1"
	})
	configMap(t, ns, "cluster: {maxVoluntaryMaintenance: \"100%\"}\npools:\n  hostile-pool: {maxVoluntaryMaintenance: \"3\"}\n")
	r := startAggregator(t, ns, "maintenance-handler")

	world.WaitEvent(t, "hostile-garbage", protocol.EventUnreadableState, protocol.AnnotationPhase, protocol.AnnotationSliceMaintenance, protocol.AnnotationUpcomingMaintenance)
	world.WaitEvent(t, "hostile-huge", protocol.EventUnreadableState, protocol.AnnotationInterruptions)
	world.WaitEvent(t, "hostile-huge", protocol.EventSkipped, "its agent wrote values the aggregator cannot read ("+protocol.AnnotationInterruptions+")")
	waitPasses(t, r.agg, 2) // the triggers are written within a pass
	picked := map[string]bool{}
	world.WaitNodes(t, honest, "two honest nodes triggered", func(n *corev1.Node) bool {
		picked[n.Name] = triggered(n)
		return true
	})
	for _, name := range honest {
		if !picked[name] {
			world.WaitEvent(t, name, protocol.EventSkipped, "max-unavailable=3")
		}
	}
	waitPasses(t, r.agg, 3)

	var got []string
	for _, name := range append(append([]string{}, honest...), slice...) {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if triggered(n) {
			got = append(got, name)
		}
		if a, ok := n.Annotations[protocol.AnnotationSliceMaintenance]; ok || protocol.HasTaintKey(n, protocol.TaintSliceDown) {
			t.Errorf("%s asked to drain for its slice (%q): a host of no slice moved it", name, a)
		}
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "honest-") || !strings.HasPrefix(got[1], "honest-") {
		t.Errorf("triggered %v, want exactly two honest nodes: the pool's cap of 3 less the garbage request's place (the forged manual maintenance takes none)", got)
	}
	for _, name := range []string{"hostile-garbage", "hostile-huge", "hostile-phase", "hostile-slice"} {
		n, _ := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if triggered(n) {
			t.Errorf("%s was triggered", name)
		}
	}
	if v := testutil.ToFloat64(r.metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonUnreadable))); v != 1 {
		t.Errorf("decisions{skipped,unreadable} = %v, want 1 (hostile-huge)", v)
	}
	if v := testutil.CollectAndCount(r.metrics.SliceInterruptions); v != 0 {
		t.Errorf("%d slice interruption series counted, want none", v)
	}
	if v := testutil.CollectAndCount(r.metrics.VanishedNodes); v != 0 {
		t.Errorf("%d vanished nodes counted, want none", v)
	}
	var exported strings.Builder
	unreadable := prometheus.NewPedanticRegistry()
	unreadable.MustRegister(r.metrics.Unreadable)
	exported.WriteString(testworld.Exposition(t, unreadable))
	for _, name := range []string{"hostile-garbage", "hostile-huge"} {
		if !strings.Contains(exported.String(), `maintenance_handler_aggregator_node_unreadable_keys{node_name="`+name+`"}`) {
			t.Errorf("no node_unreadable_keys series for %s:\n%s", name, exported.String())
		}
	}
	if strings.Count(exported.String(), "node_name=") != 2 {
		t.Errorf("node_unreadable_keys names other nodes:\n%s", exported.String())
	}

	// The plugin: the two unreadable nodes said to be so, with their keys;
	// the others read.
	c, _ := clients(t)
	in, err := plugin.Read(testworld.Ctx(t, 30*time.Second), c, time.Now(), plugin.ReadOptions{Pool: "hostile-pool", PoolLabel: protocol.LabelNodePool}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := plugin.BuildStatus(in).WriteTable(&table, time.Now(), time.UTC, false); err != nil {
		t.Fatal(err)
	}
	out := table.String()
	for _, want := range []string{"UNREADABLE:", "hostile-garbage: " + protocol.AnnotationBegun, "hostile-huge: " + protocol.AnnotationInterruptions} {
		if !strings.Contains(out, want) {
			t.Errorf("the plugin's status does not say %q:\n%.3000s", want, out)
		}
	}
	if strings.Count(out, "unreadable") != 2 { // the two nodes' phase
		t.Errorf("the plugin's status names %d unreadable things, want the two nodes:\n%.3000s", strings.Count(out, "unreadable"), out)
	}
}

// write changes node as its agent would, on the Node object.
func write(t *testing.T, node string, change func(*corev1.Node)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestInterruptionClaimsBounded: a node whose agent counts an interruption
// on each of six updates within the hour adds four to its pool's counters;
// the rest are a Warning on the node and a metric, not counts.
func TestInterruptionClaimsBounded(t *testing.T) {
	testworld.Need(t)
	const name = "claims-0"
	world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "claims-pool"})
	r := startAggregator(t, world.Namespace(t), "")
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return r.agg.Leading(), nil
	})
	if err != nil {
		t.Fatal("never leading")
	}
	for k := 1; k <= 6; k++ {
		write(t, name, func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationInterruptions] = fmt.Sprintf(`{%q:%d}`, protocol.UnannouncedReboot.Key(), k)
			n.Annotations[protocol.AnnotationLastBootID] = fmt.Sprintf("boot-%d", k)
		})
	}
	world.WaitEvent(t, name, protocol.EventClaimsRefused, "in an hour (4)")
	if got := testworld.Settled(t, r.metrics.RefusedClaims.WithLabelValues(name, "claims-pool"), 2); got != 2 {
		t.Errorf("refused_interruption_claims_total{%s} = %v, want 2", name, got)
	}
	counted := r.metrics.PoolInterruptions.WithLabelValues(append([]string{"claims-pool"}, protocol.UnannouncedReboot.Labels()...)...)
	if got := testutil.ToFloat64(counted); got != aggregator.MaxClaimsPerHour {
		t.Errorf("pool_interruptions_total{claims-pool} = %v, want %d", got, aggregator.MaxClaimsPerHour)
	}
}
