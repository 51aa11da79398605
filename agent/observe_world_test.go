package agent_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestObserveOnlyChangesNothing: an observed node's agent says a manual
// trigger and a host maintenance (the drain it would run, pod by pod, and
// the call it would make) and changes nothing: no key, taint, cordon or
// condition on the Node, no pod evicted or told, no Compute Engine call.
// When the node is no longer observed, the agent acts on the maintenance
// under way from the Node as it is.
func TestObserveOnlyChangesNothing(t *testing.T) {
	testworld.Need(t)
	v, observed := observedVM(t, "agent-observe-0")
	withCompute(t, v)
	ns := world.Namespace(t)
	createPod(t, makePod(ns, "trainer", v.name, 2, time.Second))
	world.WaitRunning(t, v.name, 1)
	trainer := watchPod(t, ns, "trainer")

	before := getNode(t, v.name)
	history := world.NodeHistory(t, v.name, before.ResourceVersion)
	r := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitEvent(t, v.name, protocol.EventObserveOnly, "nothing is changed")
	world.WaitEvent(t, v.name, protocol.EventMaintenanceScheduled, "Observe-only (nothing was changed): ")

	// A manual trigger: the plan, then the call it would make.
	setTrigger(t, v.name, protocol.TriggerValue, true)
	world.WaitEvent(t, v.name, protocol.EventObserveOnly, "voluntary", "would ask 1 pod(s) to stop", ns+"/trainer", "none was asked")
	world.WaitEvent(t, v.name, protocol.EventManualObserved, "no pod was evicted and no call made")
	if got := testutil.ToFloat64(r.metrics.ManualTriggers.WithLabelValues(protocol.ManualObserved)); got != 1 {
		t.Errorf("manual_triggers_total{outcome=observe_only} = %v, want 1", got)
	}
	setTrigger(t, v.name, "", false)

	// A host maintenance: the forced drain's plan.
	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitEvent(t, v.name, protocol.EventTerminateOnHost, "Observe-only (nothing was changed): ")
	world.WaitEvent(t, v.name, protocol.EventObserveOnly, "forced", ns+"/trainer", "none was asked")

	// What it would have written is on the node's Lease, for the
	// aggregator: the maintenance under way.
	// The agent publishes its shadow after the step whose Event was seen:
	// the Lease is awaited through a watch.
	node := getNode(t, v.name)
	testworld.WaitFor(t, world.Client.CoordinationV1().RESTClient(), "leases", testworld.ShippedAgentNamespace, v.name, "showing the maintenance under way",
		func(l *coordinationv1.Lease) bool {
			shadow, err := protocol.DecodeShadow(l.Annotations[protocol.AnnotationShadow])
			if err != nil {
				return false
			}
			shown := node.DeepCopy()
			shadow.Overlay(shown)
			return protocol.HasTaint(shown) && shown.Labels[protocol.LabelActiveMaintenance] != "" && shown.Spec.Unschedulable
		})

	for _, n := range history() {
		if got, want := testworld.ProjectState(n), testworld.ProjectState(before); got != want {
			t.Fatalf("an observed node changed (resourceVersion %s):\n got %s\nwant %s", n.ResourceVersion, got, want)
		}
	}
	if calls := v.emu.Calls(); len(calls) != 0 {
		t.Errorf("Compute Engine was called: %+v", calls)
	}
	p, err := world.Client.CoreV1().Pods(ns).Get(testworld.Ctx(t, 10*time.Second), "trainer", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil || p.Annotations[protocol.PodAnnotationNotice] != "" {
		t.Fatalf("the observed node's pod was touched: %v %+v", err, p)
	}

	// Observed no more: the agent drains for the maintenance under way.
	observed.Store(false)
	r.agent.Wake()
	world.WaitEvent(t, v.name, protocol.EventObserveOnly, "Observe-only ended", "from the Node as it is")
	world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating && protocol.HasTaint(n)
	})
	if end := trainer.gone(t); !end.terminated {
		t.Errorf("the pod was not drained once the node was acted on: %+v", end)
	}
	if _, err := world.Client.CoordinationV1().Leases(testworld.ShippedAgentNamespace).Get(testworld.Ctx(t, 10*time.Second), v.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Lease of a node no longer observed: %v, want it gone", err)
	}
}

// TestObservedNodesPodsToldOnceActed: a node with a pending maintenance is
// observed, so its pods are not told; once it is acted on, they are told
// of the maintenance at once, not at the notice's next change.
func TestObservedNodesPodsToldOnceActed(t *testing.T) {
	testworld.Need(t)
	v, observed := observedVM(t, "agent-observe-1")
	ns := world.Namespace(t)
	createPod(t, makePod(ns, "trainer", v.name, 2, time.Second))
	world.WaitRunning(t, v.name, 1)
	r := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitEvent(t, v.name, protocol.EventMaintenanceScheduled, "Observe-only (nothing was changed): ")

	observed.Store(false)
	r.agent.Wake()
	world.WaitEvent(t, v.name, protocol.EventObserveOnly, "Observe-only ended")
	waitNotice(t, ns, "trainer", "told of the pending maintenance", func(text string, cond *corev1.PodCondition) bool {
		n, err := protocol.ParseWorkloadNotice(text)
		return err == nil && n.Phase == protocol.NoticePending && cond != nil
	})
}

// observedVM is a VM with a pending maintenance whose node is observed
// until the flag it returns is cleared (and the agent woken).
func observedVM(t *testing.T, name string) (*vm, *atomic.Bool) {
	t.Helper()
	v := newVMWith(t, name, gceemu.Config{})
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 20, 2, 0, 0, 0, time.UTC), 4*time.Hour))
	observed := &atomic.Bool{}
	observed.Store(true)
	v.observe = func(*corev1.Node) (bool, bool) { return observed.Load(), true }
	return v, observed
}
