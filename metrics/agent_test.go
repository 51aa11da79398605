package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func TestAgentMetrics(t *testing.T) {
	reg := NewRegistry()
	m := NewAgent(reg)
	m.AddInterruptions(protocol.HostMaintenance, 1)
	m.Eviction("evicted")
	m.Eviction("deleted")
	m.Escalation()
	m.MetadataRequest("instance/preempted", "ok")
	m.SetPhase("Draining")
	if got := testutil.ToFloat64(m.Escalations); got != 1 {
		t.Errorf("escalations = %v, want 1 (one deleted outcome)", got)
	}
	want := `# HELP maintenance_handler_agent_phase 1 for the node's current maintenance phase (Idle, Draining, Terminating), 0 for the others.
# TYPE maintenance_handler_agent_phase gauge
maintenance_handler_agent_phase{phase="Draining"} 1
maintenance_handler_agent_phase{phase="Idle"} 0
maintenance_handler_agent_phase{phase="Terminating"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "maintenance_handler_agent_phase"); err != nil {
		t.Error(err)
	}
}

// TestPoolSeriesFollowTheLastPass: a pool's gauges exist while the last
// pass named the pool, the config gauge only for configured pools, and
// none at all once the replica stops leading.
func TestPoolSeriesFollowTheLastPass(t *testing.T) {
	reg := NewRegistry()
	m := NewAggregator(reg)
	m.Pools.Set([]PoolStats{{Pool: "a3", Pending: 2, Configured: true, ConfigValid: true}, {Pool: "v5e", Idle: 1}})
	want := `# HELP maintenance_handler_aggregator_pool_config_valid 1 when the pool's opportunistic configuration is valid, 0 when it is invalid (no opportunistic action).
# TYPE maintenance_handler_aggregator_pool_config_valid gauge
maintenance_handler_aggregator_pool_config_valid{node_pool_name="a3"} 1
# HELP maintenance_handler_aggregator_pool_nodes_pending_maintenance Nodes of the pool with a pending maintenance notice, not yet in maintenance.
# TYPE maintenance_handler_aggregator_pool_nodes_pending_maintenance gauge
maintenance_handler_aggregator_pool_nodes_pending_maintenance{node_pool_name="a3"} 2
maintenance_handler_aggregator_pool_nodes_pending_maintenance{node_pool_name="v5e"} 0
`
	names := []string{"maintenance_handler_aggregator_pool_config_valid", "maintenance_handler_aggregator_pool_nodes_pending_maintenance",
		"maintenance_handler_aggregator_pool_next_maintenance_timestamp_seconds"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	m.Pools.Set(nil)
	if n, err := testutil.GatherAndCount(reg, names...); err != nil || n != 0 {
		t.Errorf("after the lead was lost: %d series (%v), want none", n, err)
	}
}
