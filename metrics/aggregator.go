package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Aggregator holds the aggregator's metrics. Pool series carry the node
// pool's name, never a node's.
type Aggregator struct {
	Leader              prometheus.Gauge
	Decisions           *prometheus.CounterVec
	PoolInterruptions   *prometheus.CounterVec
	PoolPending         *prometheus.GaugeVec
	PoolIdle            *prometheus.GaugeVec
	PoolInMaintenance   *prometheus.GaugeVec
	PoolNextMaintenance *prometheus.GaugeVec
	PoolConfigValid     *prometheus.GaugeVec
	PassDurationSeconds prometheus.Histogram
	Triggers            *prometheus.CounterVec
	VanishedNodes       *prometheus.CounterVec

	mu    sync.Mutex
	pools map[string]bool // the pools whose series are exported
}

// NewAggregator creates the aggregator's metrics and registers them with reg.
func NewAggregator(reg prometheus.Registerer) *Aggregator {
	const sub = "aggregator"
	pool := []string{"node_pool_name"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: name, Help: help}, pool)
	}
	m := &Aggregator{
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "leader",
			Help: "1 while this replica holds the lease and acts, 0 otherwise."}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "decisions_total",
			Help: "Opportunistic maintenance decisions about nodes with a pending notice, counted when a node's decision changes, by outcome (triggered, skipped) and reason."},
			[]string{"outcome", "reason"}),
		PoolInterruptions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "pool_interruptions_total",
			Help: "Maintenances and preemptions that began on a node of the pool, seen by the leader, by interruption_type and interruption_reason."},
			[]string{"node_pool_name", "interruption_type", "interruption_reason"}),
		PoolPending:         gauge("pool_nodes_pending_maintenance", "Nodes of the pool with a pending maintenance notice, not yet in maintenance."),
		PoolIdle:            gauge("pool_nodes_idle", "Nodes of the pool whose accelerators are idle."),
		PoolInMaintenance:   gauge("pool_nodes_in_maintenance", "Nodes of the pool in maintenance or asked to start it."),
		PoolNextMaintenance: gauge("pool_next_maintenance_timestamp_seconds", "Unix time of the earliest pending maintenance window start in the pool."),
		PoolConfigValid:     gauge("pool_config_valid", "1 when the pool's opportunistic configuration is valid, 0 when it is invalid (no opportunistic action)."),
		PassDurationSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: sub, Name: "pass_duration_seconds",
			Help: "Time of one decision pass over every node.", Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}}),
		Triggers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "triggers_total",
			Help: "Writes of an opportunistic trigger to a Node, by result (ok, conflict, error)."}, []string{"result"}),
	}
	m.VanishedNodes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "vanished_nodes_total",
		Help: "Nodes deleted while NotReady and outside maintenance, and not created again within the recreate window: interruptions no agent could report (TerminationEvent/HostError), counted by the leader that saw them."},
		[]string{"node_name", "node_pool_name", "interruption_type", "interruption_reason"})
	reg.MustRegister(m.VanishedNodes, m.Leader, m.Decisions, m.PoolInterruptions, m.PoolPending, m.PoolIdle, m.PoolInMaintenance,
		m.PoolNextMaintenance, m.PoolConfigValid, m.PassDurationSeconds, m.Triggers)
	return m
}

// KeepPools removes the pool series of every pool not in pools (nil: all
// of them) and remembers pools as the ones exported. The leader calls it
// with the pools of each pass before setting their gauges, so a pool that
// is gone leaves no series; a replica that stops leading calls it with nil,
// so only the leader exports pool series.
func (m *Aggregator) KeepPools(pools []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := make(map[string]bool, len(pools))
	for _, p := range pools {
		keep[p] = true
	}
	for p := range m.pools {
		if keep[p] {
			continue
		}
		for _, g := range []*prometheus.GaugeVec{m.PoolPending, m.PoolIdle, m.PoolInMaintenance, m.PoolNextMaintenance, m.PoolConfigValid} {
			g.DeleteLabelValues(p)
		}
	}
	m.pools = keep
}

// PassDuration observes one pass.
func (m *Aggregator) PassDuration(d time.Duration) { m.PassDurationSeconds.Observe(d.Seconds()) }
