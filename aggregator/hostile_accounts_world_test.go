package aggregator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// The aggregator's accounts against one hostile node: its pool's
// repairRate counts only the repairs the aggregator approved, and the
// bounds it holds of the node outlive the node's Node object.

// TestHostileNowRepairFillsNoRate: a node whose agent's token writes, again
// and again, that its last repair ended just now (each time a value the
// aggregator could believe) takes no place under its pool's repairRate
// (one repair a week): the honest node of the pool that a person reports
// faulty has its repair approved, and the leader reports its host to
// Compute Engine.
func TestHostileNowRepairFillsNoRate(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	project := relayProject(t)
	p := newProcs(t, "--eviction-retry-interval", "1s")
	p.f.Project = project
	const pool = "hnr"
	machines := relayPool(t, ctx, p, pool, 2)
	honest, liar := pool+"-0", pool+"-1"
	configMap(t, p.ns, "pools:\n  "+pool+":\n    faults:\n      maxInRepair: \"5\"\n      drainTimeout: 1m\n      repairRate: 1/168h\n")
	agent := hostileAgent(t, p, liar)
	lie := func() {
		forge(t, agent, liar, func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationLastFaultRepair] = protocol.Encode(protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: time.Now().UTC()})
		})
	}
	lie()
	addr := relayAggregator(t, p, project, pool, "maintenance-handler")
	passes(t, ctx, addr, 1)
	lie()
	passes(t, ctx, addr, 2)
	setLabel(t, ctx, honest, protocol.LabelReportFaulty, protocol.BehaviorChipError)
	n := world.WaitNode(t, honest, "approved for a repair", func(n *corev1.Node) bool { _, ok := protocol.ReadRepairApproval(n); return ok })
	approval, _ := protocol.ReadRepairApproval(n)
	world.WaitNode(t, honest, "reported to Compute Engine", func(n *corev1.Node) bool {
		a, ok := protocol.ReadComputeAnswer(n)
		return ok && a.ID == approval.Request && a.Operation != ""
	})
	if got := reports(machines[honest]); len(got) != 1 || got[0].RequestID != approval.Request {
		t.Errorf("reports of %s %+v; want one, for the approval's request %s", honest, got, approval.Request)
	}
	if got := reports(machines[liar]); len(got) != 0 {
		t.Errorf("reports of %s %+v; want none", liar, got)
	}
}

// TestHostileReRegistrationKeepsClaimBound: a node whose agent's token
// claims six interruptions within the hour has two refused; its Node then
// goes away (a person deletes it: its kubelet may not) and its kubelet
// registers it again, and the agent's token claims more: they are refused
// too (a Warning Event on the new Node, the metric), as the hour's bound
// is held by the node's name, not its Node object.
func TestHostileReRegistrationKeepsClaimBound(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 3*time.Minute)
	const pool, name = "hrc", "hrc-0"
	original := world.NodeT(t, testworld.NodeSpec{Name: name, Pool: pool})
	r := startAggregator(t, world.Namespace(t), "")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return r.agg.Leading(), nil
	}); err != nil {
		t.Fatal("never leading")
	}
	h := world.HostileNode(t, name)
	for k := 1; k <= 6; k++ {
		forge(t, h.Agent, name, func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationInterruptions] = fmt.Sprintf(`{%q:%d}`, protocol.UnannouncedReboot.Key(), k)
			n.Annotations[protocol.AnnotationLastBootID] = fmt.Sprintf("boot-%d", k)
		})
	}
	world.WaitEvent(t, name, protocol.EventClaimsRefused, "in an hour (4)")
	refused := r.metrics.RefusedClaims.WithLabelValues(name, pool)
	if got := testworld.Settled(t, refused, 2); got != 2 {
		t.Fatalf("refused_interruption_claims_total{%s} = %v, want 2", name, got)
	}

	if err := h.Kubelet.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the kubelet deleting its own Node: %v, want forbidden", err)
	}
	if err := world.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: original.Labels,
		Annotations: map[string]string{testworld.KwokNodeAnnotation: testworld.KwokNodeValue}},
		Spec: corev1.NodeSpec{ProviderID: original.Spec.ProviderID}}
	reborn, err := h.Kubelet.CoreV1().Nodes().Create(ctx, again, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the kubelet registering its Node again: %v", err)
	}
	agent := world.HostileNode(t, name).Agent
	for k := 1; k <= 2; k++ {
		forge(t, agent, name, func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationInterruptions] = fmt.Sprintf(`{%q:%d}`, protocol.UnannouncedReboot.Key(), k)
			n.Annotations[protocol.AnnotationLastBootID] = fmt.Sprintf("reborn-%d", k)
		})
	}
	if got := testworld.Settled(t, refused, 4); got != 4 {
		t.Errorf("refused_interruption_claims_total{%s} = %v after the Node was registered again, want 4", name, got)
	}
	// The Warning is told of the Node registered again (WaitEvent matches
	// its UID).
	if e := world.WaitEvent(t, name, protocol.EventClaimsRefused, "in an hour (4)"); e.InvolvedObject.UID != reborn.UID {
		t.Errorf("the refusal is told of %s, want the Node registered again (%s)", e.InvolvedObject.UID, reborn.UID)
	}
}
