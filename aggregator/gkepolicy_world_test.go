package aggregator_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestPolicySpeaksGKEsLanguage: a policy written as GKE's. An exclusion of
// scope no_minor_upgrades lets node maintenance go on, one of scope
// no_minor_or_node_upgrades does not; a window whose RRULE uses BYSETPOS is
// understood; a pool whose exclusions break GKE's limits is told so, with
// the field, and only that pool stops.
func TestPolicySpeaksGKEsLanguage(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	now := time.Now().UTC()
	soon := now.Add(24 * time.Hour)
	for pool, node := range map[string]string{"minor-only": "gke-minor", "node-frozen": "gke-frozen", "setpos": "gke-setpos", "over-limit": "gke-over"} {
		nodes(t, pool, node)
		publish(t, node, published{windowStart: soon, canReschedule: true, idleFor: time.Hour})
	}
	// The window opened an hour ago, on the nth such weekday of the month.
	start := now.Add(-time.Hour)
	weekday := []string{"SU", "MO", "TU", "WE", "TH", "FR", "SA"}[start.Weekday()]
	nth := (start.Day()-1)/7 + 1
	exclusion := func(name string, from time.Time, d time.Duration, scope string) string {
		return fmt.Sprintf(`{name: %s, startTime: "%s", endTime: "%s", scope: %s}`, name, from.Format(time.RFC3339), from.Add(d).Format(time.RFC3339), scope)
	}
	day := 24 * time.Hour
	const setting = "node-idle-time=600s,min-nodes=0,window=604800s"
	configMap(t, ns, `
cluster: {maxVoluntaryMaintenance: "100%"}
pools:
  minor-only:
    opportunistic: `+setting+`
    exclusions: [`+exclusion("minor-freeze", now.Add(-time.Hour), day, "no_minor_upgrades")+`]
  node-frozen:
    opportunistic: `+setting+`
    exclusions: [`+exclusion("node-freeze", now.Add(-time.Hour), day, "NO_MINOR_OR_NODE_UPGRADES")+`]
  setpos:
    opportunistic: `+setting+`
    maintenanceWindow: {startTime: "`+start.Format(time.RFC3339)+`", duration: 4h, recurrence: "FREQ=MONTHLY;BYDAY=`+weekday+`;BYSETPOS=`+fmt.Sprint(nth)+`"}
  over-limit:
    opportunistic: `+setting+`
    exclusions:
    - `+exclusion("a", now.Add(10*day), day, "no_upgrades")+`
    - `+exclusion("b", now.Add(40*day), day, "no_upgrades")+`
    - `+exclusion("c", now.Add(70*day), day, "no_upgrades")+`
    - `+exclusion("d", now.Add(100*day), day, "no_upgrades")+`
`)
	r := startAggregator(t, ns, "maintenance-handler")
	world.WaitEvent(t, "gke-minor", protocol.EventTriggered, "Picked for opportunistic maintenance")
	world.WaitEvent(t, "gke-setpos", protocol.EventTriggered, "Picked for opportunistic maintenance")
	world.WaitEvent(t, "gke-frozen", protocol.EventSkipped, `inside the maintenance exclusion "node-freeze"`)
	world.WaitEvent(t, "gke-over", protocol.EventSkipped, "pools.over-limit")
	world.WaitEvent(t, "gke-over", protocol.EventSkipped, "4 exclusions of scope no_upgrades; GKE allows at most 3")
	waitPasses(t, r.agg, 3)
	for node, want := range map[string]bool{"gke-minor": true, "gke-setpos": true, "gke-frozen": false, "gke-over": false} {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if triggered(n) != want {
			t.Errorf("%s triggered: %t, want %t", node, triggered(n), want)
		}
	}
	if got, ok := poolGauge(t, r.metrics, "pool_config_valid", "over-limit"); got != 0 || !ok {
		t.Errorf("pool_config_valid{over-limit} = %v (exported: %t), want 0", got, ok)
	}
	if got, _ := poolGauge(t, r.metrics, "pool_config_valid", "minor-only"); got != 1 {
		t.Errorf("pool_config_valid{minor-only} = %v, want 1", got)
	}
}
