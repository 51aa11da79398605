package metrics

import (
	"sync"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Aggregator holds the aggregator's metrics. Pool series carry the node
// pool's name, never a node's.
type Aggregator struct {
	Leader              *Gauge
	Decisions           *CounterVec
	PoolInterruptions   *CounterVec
	PassDurationSeconds *Histogram
	Triggers            *CounterVec
	VanishedNodes       *CounterVec
	SliceInterruptions  *CounterVec
	// Pools exports the pool gauges of the leader's last pass.
	Pools *PoolCollector
	// APIRequests counts the aggregator's requests to the API server, by
	// method and response code (client-go's count of each request's
	// result; a watch counts once, when it starts).
	APIRequests *CounterVec
	// Unreadable exports, for the leader's last pass, how many keys each
	// node with values it cannot read has (only those nodes have series).
	Unreadable *NodeGauge
}

// NodeGauge is a gauge per node, for the nodes of the last pass it was
// given only (none once given nil). Its series name nodes: it is for the
// few nodes that need a person's attention, never for every node.
type NodeGauge struct {
	opts   Opts
	mu     sync.Mutex
	values map[string]int
}

// Set replaces the nodes exported; nil exports none.
func (g *NodeGauge) Set(values map[string]int) {
	g.mu.Lock()
	g.values = values
	g.mu.Unlock()
}

func (g *NodeGauge) families() []*family {
	return []*family{{name: g.opts.fullName(), help: g.opts.Help, typ: "gauge", labels: []string{"node_name"}, series: func() []series {
		g.mu.Lock()
		defer g.mu.Unlock()
		out := make([]series, 0, len(g.values))
		for name, v := range g.values {
			out = append(out, series{values: []string{name}, value: float64(v)})
		}
		return out
	}}}
}

// PoolStats is one pool's state in a pass, as the pool gauges show it.
type PoolStats struct {
	Pool                         string
	Pending, Idle, InMaintenance int
	NextMaintenance              time.Time // zero: none pending
	Configured, ConfigValid      bool
	Autoscaled                   bool
}

// PoolCollector exports the pool gauges of the last pass it was given:
// only the pools of that pass have series, and none at all once it is
// given nil (a replica that does not lead exports no pool series, so sums
// by pool are never stale or doubled after a failover).
type PoolCollector struct {
	pending, idle, inMaintenance, next, valid, autoscaled Opts

	mu    sync.Mutex
	pools []PoolStats
}

// Set replaces the pools exported; nil exports none.
func (c *PoolCollector) Set(pools []PoolStats) {
	c.mu.Lock()
	c.pools = pools
	c.mu.Unlock()
}

func (c *PoolCollector) families() []*family {
	gauge := func(o Opts, read func(PoolStats) (float64, bool)) *family {
		return &family{name: o.fullName(), help: o.Help, typ: "gauge", labels: []string{"node_pool_name"}, series: func() []series {
			c.mu.Lock()
			pools := c.pools
			c.mu.Unlock()
			var out []series
			for _, p := range pools {
				if v, ok := read(p); ok {
					out = append(out, series{values: []string{p.Pool}, value: v})
				}
			}
			return out
		}}
	}
	count := func(n func(PoolStats) int) func(PoolStats) (float64, bool) {
		return func(p PoolStats) (float64, bool) { return float64(n(p)), true }
	}
	return []*family{
		gauge(c.pending, count(func(p PoolStats) int { return p.Pending })),
		gauge(c.idle, count(func(p PoolStats) int { return p.Idle })),
		gauge(c.inMaintenance, count(func(p PoolStats) int { return p.InMaintenance })),
		gauge(c.next, func(p PoolStats) (float64, bool) {
			return float64(p.NextMaintenance.Unix()), !p.NextMaintenance.IsZero()
		}),
		gauge(c.autoscaled, func(p PoolStats) (float64, bool) { return bit(p.Autoscaled), true }),
		gauge(c.valid, func(p PoolStats) (float64, bool) { return bit(p.ConfigValid), p.Configured }),
	}
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// NewAggregator creates the aggregator's metrics and registers them with reg.
func NewAggregator(reg Registerer) *Aggregator {
	const sub = "aggregator"
	gauge := func(name, help string) Opts { return Opts{Subsystem: sub, Name: name, Help: help} }
	m := &Aggregator{
		Leader: NewGauge(Opts{Subsystem: sub, Name: "leader",
			Help: "1 while this replica holds the lease and acts, 0 otherwise."}),
		Decisions: NewCounterVec(Opts{Subsystem: sub, Name: "decisions_total",
			Help: "Opportunistic maintenance decisions about nodes with a pending notice, counted when a node's decision changes, by outcome (triggered, skipped) and reason."},
			[]string{"outcome", "reason"}),
		PoolInterruptions: NewCounterVec(Opts{Subsystem: sub, Name: "pool_interruptions_total",
			Help: "Maintenances and preemptions that began on a node of the pool, seen by the leader, by interruption_type and interruption_reason."},
			[]string{"node_pool_name", "interruption_type", "interruption_reason"}),
		Pools: &PoolCollector{
			pending:       gauge("pool_nodes_pending_maintenance", "Nodes of the pool with a pending maintenance notice, not yet in maintenance."),
			idle:          gauge("pool_nodes_idle", "Nodes of the pool whose accelerators are idle."),
			inMaintenance: gauge("pool_nodes_in_maintenance", "Nodes of the pool in maintenance or asked to start it."),
			next:          gauge("pool_next_maintenance_timestamp_seconds", "Unix time of the earliest pending maintenance window start in the pool."),
			valid:         gauge("pool_config_valid", "1 when the pool's opportunistic configuration is valid, 0 when it is invalid (no opportunistic action)."),
			autoscaled:    gauge("pool_autoscaled", "1 when the cluster autoscaler manages the pool (its status lists the pool's node group, or the policy says so): no opportunistic maintenance there unless the policy opts in."),
		},
		PassDurationSeconds: NewHistogram(Opts{Subsystem: sub, Name: "pass_duration_seconds",
			Help: "Time of one decision pass over every node: reading the node cache and deciding, not the API calls around them."}, []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
		Triggers: NewCounterVec(Opts{Subsystem: sub, Name: "triggers_total",
			Help: "Writes of an opportunistic trigger to a Node, by result (ok, conflict, error; fenced: not written, another leader claimed since the pass read the claims)."}, []string{"result"}),
	}
	m.VanishedNodes = NewCounterVec(Opts{Subsystem: sub, Name: "vanished_nodes_total",
		Help: "Nodes deleted while NotReady and outside maintenance, and not created again within the recreate window: interruptions no agent could report (" + protocol.UnannouncedReboot.Key() + "), counted by the leader that saw them."},
		[]string{"node_name", "node_pool_name", "interruption_type", "interruption_reason"})
	m.SliceInterruptions = NewCounterVec(Opts{Subsystem: sub, Name: "slice_interruptions_total",
		Help: "Multi-host slices taken down as one because one host stopped (its maintenance or preemption), by slice and by the interruption of the host that caused it: counted once per slice, beside the hosts' own interruptions."},
		[]string{"slice", "interruption_type", "interruption_reason"})
	m.Unreadable = &NodeGauge{opts: Opts{Subsystem: sub, Name: "node_unreadable_keys",
		Help: "Keys with values the aggregator cannot read on a node (its agent is broken, compromised or of an unknown version), by node; only such nodes have a series."}}
	m.APIRequests = NewCounterVec(Opts{Subsystem: sub, Name: "api_requests_total",
		Help: "Requests to the Kubernetes API server, by method and code (a watch counts once, when it starts)."}, []string{"method", "code"})
	reg.MustRegister(m.APIRequests, m.Unreadable, m.SliceInterruptions, m.VanishedNodes, m.Leader, m.Decisions, m.PoolInterruptions, m.Pools, m.PassDurationSeconds, m.Triggers)
	return m
}

// PassDuration observes one pass.
func (m *Aggregator) PassDuration(d time.Duration) { m.PassDurationSeconds.Observe(d.Seconds()) }

// PoolInterruption counts an interruption that began on a node of pool.
func (m *Aggregator) PoolInterruption(pool string, i protocol.Interruption) {
	m.PoolInterruptions.WithLabelValues(append([]string{pool}, i.Labels()...)...).Inc()
}

// Vanished counts a node lost with nothing announced.
func (m *Aggregator) Vanished(node, pool string, i protocol.Interruption) {
	m.VanishedNodes.WithLabelValues(append([]string{node, pool}, i.Labels()...)...).Inc()
}
