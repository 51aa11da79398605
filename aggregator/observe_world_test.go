package aggregator_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// observedAgent writes what an observed node's agent publishes on its
// Lease: the notice mirrored, the node idle for idleFor, as the changes
// it did not make on the Node.
func observedAgent(t *testing.T, name string, windowStart time.Time, idleFor time.Duration) {
	t.Helper()
	before, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after := before.DeepCopy()
	after.Labels[protocol.LabelScheduledMaintenanceTime] = strconv.FormatInt(windowStart.Unix(), 10)
	after.Annotations[protocol.AnnotationUpcomingMaintenance] = notice(windowStart, true)
	after.Annotations[protocol.AnnotationIdleSince] = time.Now().Add(-idleFor).UTC().Format(time.RFC3339Nano)
	var s protocol.Shadow
	s.Record(before, after)
	leases := world.Client.CoordinationV1().Leases(testworld.ShippedAgentNamespace)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: protocol.ObservedNodeLabels, Annotations: map[string]string{protocol.AnnotationShadow: s.Encode()}}}
	if _, err := leases.Create(testworld.Ctx(t, 10*time.Second), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leases.Delete(testworld.Ctx(t, 10*time.Second), name, metav1.DeleteOptions{}) })
}

// TestObserveOnlyPoolIsPickedAndNotTouched: a policy observes one pool
// only, another acts. The observed pool's agents publish their state on
// their Leases: the aggregator picks one of its idle nodes as it would,
// says so (its Events marked observe-only, triggers_total{observe_only}),
// tells the agents' steps in notifications marked observe-only, and
// changes none of its Nodes; the acting pool's node is triggered.
func TestObserveOnlyPoolIsPickedAndNotTouched(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	config := "node-idle-time=600s,min-nodes=0,window=2419200s"
	configMap(t, ns, "cluster:\n  maxVoluntaryMaintenance: 100%\npools:\n  watched:\n    observeOnly: true\n    opportunistic: "+config+"\n  trusted:\n    opportunistic: "+config+"\n")
	nodes(t, "watched", "observed-0", "observed-1")
	nodes(t, "trusted", "acting-0")
	start := time.Now().Add(72 * time.Hour)
	publish(t, "acting-0", published{windowStart: start, canReschedule: true, idleFor: time.Hour})
	var histories []func() []*corev1.Node
	befores := map[string]string{}
	for _, name := range []string{"observed-0", "observed-1"} {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		befores[name] = testworld.ProjectState(n)
		histories = append(histories, world.NodeHistory(t, name, n.ResourceVersion))
	}

	rcv := &receiver{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	urlFile := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(urlFile, []byte(srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startAggregatorOpts(t, aggregator.Options{Namespace: ns, ConfigMap: "maintenance-handler", AgentNamespace: testworld.ShippedAgentNamespace,
		Notify: &aggregator.NotifyOptions{URLFile: urlFile, Format: "json"}})
	waitPasses(t, r.agg, 1)
	observedAgent(t, "observed-0", start, time.Hour)
	observedAgent(t, "observed-1", start, time.Minute)

	world.WaitNode(t, "acting-0", "triggered", triggered)
	// observed-0 has been idle long enough, observed-1 not.
	world.WaitEvent(t, "observed-0", protocol.EventTriggered, "Observe-only (nothing was changed): ")
	world.WaitEvent(t, "observed-1", protocol.EventSkipped, "Observe-only (nothing was changed): ", "idle for")
	if got := testworld.Settled(t, r.metrics.Triggers.WithLabelValues(protocol.ManualObserved), 1); got != 1 {
		t.Errorf("triggers_total{observe_only} = %v, want 1", got)
	}
	for _, name := range []string{"observed-0", "observed-1"} {
		for {
			if got := rcv.of(name); len(got) > 0 {
				if x := got[0]; x.Step != fleet.StepScheduled || !x.ObserveOnly {
					t.Errorf("%s told %+v, want its scheduled step, marked observe-only", name, x)
				}
				break
			}
			select {
			case <-rcv.got:
			case <-time.After(testworld.WaitTimeout):
				t.Fatalf("%s's scheduled step never reached the webhook", name)
			}
		}
	}
	waitPasses(t, r.agg, 3) // what must not happen would have by now
	for i, name := range []string{"observed-0", "observed-1"} {
		for _, n := range histories[i]() {
			if got := testworld.ProjectState(n); got != befores[name] {
				t.Errorf("observed node %s changed:\n got %s\nwant %s", name, got, befores[name])
			}
		}
	}
}
