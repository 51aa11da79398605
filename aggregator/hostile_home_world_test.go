package aggregator_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestHostileRelayVMOfItsNameElsewhere: two nodes whose kubelets
// registered them naming, in spec.providerID, a VM of their own name in
// another region of the aggregator's project and in another project, both
// reachable by the aggregator's identity. A person asks for each node's
// maintenance (perform-maintenance) and each node's agent token asks for
// performMaintenance: the leader, which runs in test-project and
// us-central1, answers not-vouched, with a Warning Event naming why and
// the metric, and calls Compute Engine for neither VM.
func TestHostileRelayVMOfItsNameElsewhere(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	project := relayProject(t)
	p := newProcs(t, "--eviction-retry-interval", "1s")
	p.f.Project = project
	cases := []struct {
		spec testworld.NodeSpec
		why  string
	}{
		{testworld.NodeSpec{Name: "hrh-region", Pool: "hrh", Zone: "europe-west4-b"}, "in none of the cluster's regions"},
		{testworld.NodeSpec{Name: "hrh-project", Pool: "hrh", Project: "another-project"}, "not the cluster's test-project"},
	}
	var emus []*gceemu.Server
	for _, tc := range cases {
		v, err := p.f.Add(ctx, tc.spec, gceemu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		emus = append(emus, v.Emu)
		name := tc.spec.Name
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	addr := relayAggregator(t, p, project, "hrh", "")
	for _, tc := range cases {
		name := tc.spec.Name
		h := hostileAgent(t, p, name)
		setLabel(t, ctx, name, protocol.LabelPerformMaintenance, protocol.TriggerValue)
		id := "asked-" + name
		forge(t, h, name, func(n *corev1.Node) {
			now := time.Now()
			protocol.WriteAgentState(n, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: now,
				Deadline: now.Add(time.Hour), RequestID: id, BootID: n.Status.NodeInfo.BootID, Drain: protocol.DrainDone})
			n.Annotations[protocol.AnnotationComputeCall] = protocol.Encode(protocol.ComputeCall{ID: id, Method: protocol.CallPerformMaintenance})
		})
		world.WaitEvent(t, name, protocol.EventComputeCallNotVouched, tc.why)
		n := world.WaitNode(t, name, "answered", func(n *corev1.Node) bool {
			a, ok := protocol.ReadComputeAnswer(n)
			return ok && a.ID == id
		})
		if a, _ := protocol.ReadComputeAnswer(n); a.Outcome != protocol.CallNotVouched || a.Operation != "" {
			t.Errorf("%s: the answer %+v; want %s and no operation", name, a, protocol.CallNotVouched)
		}
	}
	waitMetric(t, ctx, addr, `maintenance_handler_aggregator_compute_calls_total{method="performMaintenance",outcome="not-vouched"}`, 2)
	if c := callsTo(emus); c != 0 {
		t.Errorf("%d performMaintenance calls on VMs outside the cluster's project and region; want none", c)
	}
}
