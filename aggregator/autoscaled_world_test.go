package aggregator_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAutoscaledPoolsSkipped: the cluster autoscaler's status lists the
// node groups of pools "scaled" and "opted-in"; the policy declares
// "declared" autoscaled and opts "opted-in" in. Idle nodes with a pending
// maintenance: the scaled and declared pools' are not triggered and say
// why, the gauge says which pools are autoscaled, and the opted-in and
// plain pools' are triggered.
func TestAutoscaledPoolsSkipped(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	ctx := testworld.Ctx(t, time.Minute)
	soon := time.Now().Add(24 * time.Hour)
	pools := map[string]string{
		"scaled":   "gke-c-scaled-1a2b3c4d-x7k2",
		"opted-in": "gke-c-opted-in-5e6f7a8b-q9w8",
		"declared": "gke-c-declared-9c0d1e2f-m3n4",
		"plain":    "gke-c-plain-3a4b5c6d-r5t6",
	}
	for pool, node := range pools {
		nodes(t, pool, node)
		publish(t, node, published{windowStart: soon, canReschedule: true, idleFor: time.Hour, config: "node-idle-time=600s,min-nodes=0,window=604800s"})
	}
	status := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-autoscaler-status", Namespace: ns}, Data: map[string]string{"status": `time: 2026-11-23 07:00:00 +0000 UTC
autoscalerStatus: Running
nodeGroups:
- name: https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/gke-c-scaled-1a2b3c4d-grp
  health: {status: Healthy, minSize: 0, maxSize: 8}
- name: https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/gke-c-opted-in-5e6f7a8b-grp
  health: {status: Healthy, minSize: 0, maxSize: 8}
`}}
	if _, err := world.Client.CoreV1().ConfigMaps(ns).Create(ctx, status, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	configMap(t, ns, `
cluster: {maxVoluntaryMaintenance: "100%"}
pools:
  opted-in: {opportunisticWhenAutoscaled: true}
  declared: {autoscaled: true}
`)
	r := startAggregatorOpts(t, aggregator.Options{Namespace: ns, ConfigMap: "maintenance-handler", AutoscalerStatus: ns + "/cluster-autoscaler-status"})
	a, m := r.agg, r.metrics

	world.WaitEvent(t, pools["scaled"], protocol.EventSkipped, "the cluster autoscaler manages the pool scaled (its node group https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/gke-c-scaled-1a2b3c4d-grp")
	world.WaitEvent(t, pools["declared"], protocol.EventSkipped, "declared autoscaled in the policy ConfigMap")
	world.WaitEvent(t, pools["opted-in"], protocol.EventTriggered, "Picked for opportunistic maintenance")
	world.WaitEvent(t, pools["plain"], protocol.EventTriggered, "Picked for opportunistic maintenance")
	waitPasses(t, a, 3)
	for pool, node := range pools {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := pool == "opted-in" || pool == "plain"; triggered(n) != want {
			t.Errorf("%s (pool %s) triggered: %t, want %t", node, pool, triggered(n), want)
		}
		wantScaled := 0.0
		if pool != "plain" {
			wantScaled = 1
		}
		if got, ok := poolGauge(t, m, "pool_autoscaled", pool); got != wantScaled || !ok {
			t.Errorf("pool_autoscaled{%s} = %v (exported: %t), want %v", pool, got, ok, wantScaled)
		}
	}
	if got := testutil.ToFloat64(m.Decisions.WithLabelValues("skipped", string(fleet.ReasonAutoscaled))); got != 2 {
		t.Errorf("decisions{skipped,cluster_autoscaler} = %v, want 2", got)
	}
}
