package metrics

import (
	"slices"
	"sync"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Aggregator holds the aggregator's metrics. Pool series carry the node
// pool's name, never a node's.
type Aggregator struct {
	Leader              prometheus.Gauge
	Decisions           *prometheus.CounterVec
	PoolInterruptions   *prometheus.CounterVec
	PassDurationSeconds prometheus.Histogram
	Triggers            *prometheus.CounterVec
	VanishedNodes       *prometheus.CounterVec
	// RefusedClaims counts interruptions a node's agent claimed past the
	// hourly bound, not counted.
	RefusedClaims      *prometheus.CounterVec
	SliceInterruptions *prometheus.CounterVec
	// UnprovenMaintenances counts the maintenances of nodes whose group
	// membership is not proven, which moved no other member.
	UnprovenMaintenances prometheus.Counter
	// UnconfirmedCauses counts the forced maintenances of group members
	// that moved no other member, by reason and why (unconfirmed, bound).
	UnconfirmedCauses *prometheus.CounterVec
	// Pools exports the pool gauges of the leader's last pass.
	Pools *PoolCollector
	// MemoryUsed and MemoryLimit are the replica's memory and its
	// container's limit (0: unknown).
	MemoryUsed, MemoryLimit prometheus.Gauge
	// Unreadable exports, for the leader's last pass, how many keys each
	// node with values it cannot read has (only those nodes have series).
	Unreadable *NodeGauge
	// FaultDecisions counts decisions about faulty nodes, by pool and
	// reason; InRepair is each pool's nodes in repair, as of the leader's
	// last pass.
	FaultDecisions *prometheus.CounterVec
	InRepair       *prometheus.GaugeVec
	// ReservationHosts is each reservation group's hosts whose maintenance
	// is pending or under way, and ReservationHealthy whether the group is
	// healthy, as Compute Engine said at the leader's last reading (only
	// where the aggregator reads reservations).
	ReservationHosts   *prometheus.GaugeVec
	ReservationHealthy *prometheus.GaugeVec
	// UnusedCapacity counts the calls that start a block's unused
	// capacity's maintenance, by outcome.
	UnusedCapacity *prometheus.CounterVec
	// Notifications counts the webhook's messages, by step and outcome.
	Notifications *prometheus.CounterVec
	// ComputeCalls counts the Compute Engine calls the leader made for
	// the agents (the relay), by method and outcome.
	ComputeCalls *prometheus.CounterVec
	// RelayLimited counts the asks the relay held back by the node's rate,
	// by kind (call, read).
	RelayLimited *prometheus.CounterVec

	knownPools sync.Map // the pools whose interruption series exist (KnowPools)
}

// NodeGauge is a gauge per node, for the nodes of the last pass it was
// given only (none once given nil). Its series name nodes: it is for the
// few nodes that need a person's attention, never for every node.
type NodeGauge struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	values map[string]int
}

// Set replaces the nodes exported; nil exports none.
func (g *NodeGauge) Set(values map[string]int) {
	g.mu.Lock()
	g.values = values
	g.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (g *NodeGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *NodeGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, v := range g.values {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(v), name)
	}
}

// PoolStats is one pool's state in a pass, as the pool gauges show it.
type PoolStats struct {
	Pool                         string
	Pending, Idle, InMaintenance int
	NextMaintenance              time.Time // zero: none pending
	Configured, ConfigValid      bool
	Autoscaled                   bool
}

// poolGauge is one of the pool gauges: its description, and its value
// for a pool (none when ok is false).
type poolGauge struct {
	desc *prometheus.Desc
	read func(PoolStats) (v float64, ok bool)
}

// PoolCollector exports the pool gauges of the last pass it was given:
// only the pools of that pass have series, and none at all once it is
// given nil (a replica that does not lead exports no pool series, so sums
// by pool are never stale or doubled after a failover).
type PoolCollector struct {
	gauges []poolGauge

	mu    sync.Mutex
	pools []PoolStats
}

// Set replaces the pools exported; nil exports none.
func (c *PoolCollector) Set(pools []PoolStats) {
	c.mu.Lock()
	c.pools = pools
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
}

// Collect implements prometheus.Collector.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	pools := c.pools
	c.mu.Unlock()
	for _, g := range c.gauges {
		for _, p := range pools {
			if v, ok := g.read(p); ok {
				ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, p.Pool)
			}
		}
	}
}

// newPoolCollector describes the pool gauges.
func newPoolCollector(sub string) *PoolCollector {
	gauge := func(name, help string, read func(PoolStats) (float64, bool)) poolGauge {
		return poolGauge{desc: prometheus.NewDesc(prometheus.BuildFQName(namespace, sub, name), help, []string{"node_pool_name"}, nil), read: read}
	}
	count := func(n func(PoolStats) int) func(PoolStats) (float64, bool) {
		return func(p PoolStats) (float64, bool) { return float64(n(p)), true }
	}
	return &PoolCollector{gauges: []poolGauge{
		gauge("pool_nodes_pending_maintenance", "Nodes of the pool with a pending maintenance notice, not yet in maintenance.",
			count(func(p PoolStats) int { return p.Pending })),
		gauge("pool_nodes_idle", "Nodes of the pool whose accelerators are idle.",
			count(func(p PoolStats) int { return p.Idle })),
		gauge("pool_nodes_in_maintenance", "Nodes of the pool in maintenance or asked to start it.",
			count(func(p PoolStats) int { return p.InMaintenance })),
		gauge("pool_next_maintenance_timestamp_seconds", "Unix time of the earliest pending maintenance window start in the pool.",
			func(p PoolStats) (float64, bool) {
				return float64(p.NextMaintenance.Unix()), !p.NextMaintenance.IsZero()
			}),
		gauge("pool_autoscaled", "1 when the cluster autoscaler manages the pool (its status lists the pool's node group, or the policy says so): no opportunistic maintenance there unless the policy opts in.",
			func(p PoolStats) (float64, bool) { return bit(p.Autoscaled), true }),
		gauge("pool_config_valid", "1 when the pool's opportunistic configuration is valid, 0 when it is invalid (no opportunistic action).",
			func(p PoolStats) (float64, bool) { return bit(p.ConfigValid), p.Configured }),
	}}
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// NewAggregator creates the aggregator's metrics and registers them with reg.
func NewAggregator(reg prometheus.Registerer) *Aggregator {
	const sub = "aggregator"
	m := &Aggregator{
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "leader",
			Help: "1 while this replica holds the lease and acts, 0 otherwise."}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "decisions_total",
			Help: "Opportunistic maintenance decisions about nodes with a pending notice, counted when a node's decision changes, by outcome (triggered, skipped) and reason."},
			[]string{"outcome", "reason"}),
		PoolInterruptions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "pool_interruptions_total",
			Help: "Maintenances and preemptions that began on a node of the pool, seen by the leader, by interruption_type and interruption_reason."},
			[]string{"node_pool_name", "interruption_type", "interruption_reason"}),
		Pools: newPoolCollector(sub),
		PassDurationSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: sub, Name: "pass_duration_seconds",
			Help: "Time of one decision pass over every node: reading the node cache and deciding, not the API calls around them.", Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}}),
		Triggers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "triggers_total",
			Help: "Writes of an opportunistic trigger to a Node, by result (ok, conflict, error; fenced: not written, another leader claimed since the pass read the claims)."}, []string{"result"}),
	}
	m.VanishedNodes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "vanished_nodes_total",
		Help: "Nodes deleted while NotReady and outside maintenance, and not created again within the recreate window: interruptions no agent could report (" + protocol.UnannouncedReboot.Key() + "), counted by the leader that saw them."},
		[]string{"node_name", "node_pool_name", "interruption_type", "interruption_reason"})
	m.SliceInterruptions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "slice_interruptions_total",
		Help: "Multi-host slices taken down as one because one host stopped (its maintenance or preemption), by slice and by the interruption of the host that caused it: counted once per slice, beside the hosts' own interruptions."},
		[]string{"slice", "interruption_type", "interruption_reason"})
	m.UnconfirmedCauses = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "unconfirmed_group_causes_total",
		Help: "Forced maintenances (preemption, host maintenance, known end, repair) of a member of a multi-host slice or gang, said by its agent, that moved no other member, each counted once, by reason and why: unconfirmed (what the leader read of its VM from Compute Engine, or its approvals, do not bear it out), bound (the VM's start already moved its group once). Warning GroupCauseUnconfirmed on the node says why."}, []string{"reason", "why"})
	m.UnprovenMaintenances = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "unproven_group_maintenances_total",
		Help: "Maintenances of a node whose membership of the multi-host slice or reservation group its labels name is not proven by what the aggregator read of its VM, each counted once: they moved no other member (Warning GroupMembershipUnproven on the node says why)."})
	m.Unreadable = &NodeGauge{desc: prometheus.NewDesc(prometheus.BuildFQName(namespace, sub, "node_unreadable_keys"),
		"Keys with values the aggregator cannot read on a node (its agent is broken, compromised or of an unknown version), by node; only such nodes have a series.",
		[]string{"node_name"}, nil)}
	m.RefusedClaims = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "refused_interruption_claims_total",
		Help: "Interruptions a node's agent claimed beyond what one node may add to its pool's counters in an hour, not counted (a broken or compromised agent), by node and pool."},
		[]string{"node_name", "node_pool_name"})
	m.MemoryUsed = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "memory_used_bytes",
		Help: "Memory this replica's Go runtime holds from the operating system (what its container is charged for, less a few pages)."})
	m.MemoryLimit = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "memory_limit_bytes",
		Help: "This replica's container memory limit (--memory-limit, from the Downward API); 0: unknown. At 90% of it the replica records a Warning Event MemoryNearLimit."})
	m.FaultDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "fault_decisions_total",
		Help: "Decisions about faulty nodes, counted when a node's decision changes, by pool and reason: approved (its repair starts), max_in_repair, rate_limited, maintenance_under_way, cooling_down (it waits), invalid_request (the request label names no fault behavior), approval_lapsed (its agent asked for no report within the drain timeout and --repair-ask-grace: the approval was withdrawn)."},
		[]string{"node_pool_name", "reason"})
	m.InRepair = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "nodes_in_repair",
		Help: "Nodes of the pool whose repair after a fault is approved or under way, as of the leader's last pass."}, []string{"node_pool_name"})
	m.ReservationHosts = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "reservation_group_hosts",
		Help: "Hosts of a reservation's block or sub-block (scope: block, subblock) whose maintenance is pending or ongoing (state; group: the block, or BLOCK/SUB-BLOCK, since a sub-block's ID is unique only within its block), as Compute Engine counts them (maintenancePendingCount, maintenanceOngoingCount), at the leader's last reading of --reservations."},
		[]string{"reservation", "scope", "group", "state"})
	m.ReservationHealthy = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "reservation_group_healthy",
		Help: "1 when Compute Engine says a reservation's block or sub-block is HEALTHY, 0 when DEGRADED, at the leader's last reading of --reservations."},
		[]string{"reservation", "scope", "group"})
	m.UnusedCapacity = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "unused_capacity_maintenance_total",
		Help: "Calls that started the maintenance of a reservation block's unused capacity first (reservationBlocks.performMaintenance, UNUSED_CAPACITY; --maintain-unused-capacity), by outcome: accepted, permission_denied, refused (not allowed for the reservation), failed; one refused or denied is not made again until the window changes."},
		[]string{"reservation", "block", "outcome"})
	m.Notifications = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "notifications_total",
		Help: "Steps of a node's or a group's maintenance the leader told the webhook (--notify-url-file), one count a step (a digest counts each step it holds), by step (scheduled, draining, in-maintenance, back, failed) and outcome: sent, failed (after the retries, or refused), dropped (too many waiting, or left queued or held for a digest by the last term), rate_limited (its node was told 12 messages in the last hour, or its group 12 by the steps of the same host)."},
		[]string{"step", "outcome"})
	m.ComputeCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "compute_calls_total",
		Help: "Compute Engine calls the leader made on a node's VM at its agent's request (--compute-caller), by method (performMaintenance, reportHostAsFaulty, groupMaintenance, instances.get) and outcome: accepted, permission_denied, refused, failed, not-vouched (the ask is not what the aggregator knows of the node: not made)."},
		[]string{"method", "outcome"})
	m.RelayLimited = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "relay_limited_total",
		Help: "Asks for a Compute Engine call (call) or a VM read (read) the leader held back because their node used up its rate (a token bucket per node and kind, 60 an hour, a burst of 10): each is made once the node's bucket allows it."},
		[]string{"kind"})
	reg.MustRegister(m.RelayLimited, m.ComputeCalls, m.Notifications, m.UnusedCapacity, m.ReservationHosts, m.ReservationHealthy, m.FaultDecisions, m.InRepair, m.MemoryUsed, m.MemoryLimit, m.RefusedClaims, m.Unreadable, m.SliceInterruptions, m.UnprovenMaintenances, m.UnconfirmedCauses, m.VanishedNodes, m.Leader, m.Decisions, m.PoolInterruptions, m.Pools, m.PassDurationSeconds, m.Triggers)
	return m
}

// Memory sets the replica's memory and its limit.
func (m *Aggregator) Memory(used, limit int64) {
	m.MemoryUsed.Set(float64(used))
	m.MemoryLimit.Set(float64(limit))
}

// PassDuration observes one pass.
func (m *Aggregator) PassDuration(d time.Duration) { m.PassDurationSeconds.Observe(d.Seconds()) }

// PoolInterruption counts an interruption that began on a node of pool.
func (m *Aggregator) PoolInterruption(pool string, i protocol.Interruption) {
	m.PoolInterruptions.WithLabelValues(append([]string{pool}, i.Labels()...)...).Inc()
}

// KnowPools starts each pool's interruption series at zero, once per pool
// and process: the recording rules count a pool's interruptions as the
// increase of its total, so a series must exist before its first one.
func (m *Aggregator) KnowPools(pools []PoolStats) {
	for _, p := range pools {
		if _, known := m.knownPools.LoadOrStore(p.Pool, true); known {
			continue
		}
		for _, i := range append(slices.Clone(protocol.Interruptions), protocol.ManualMaintenance, protocol.OpportunisticMaintenance) {
			m.PoolInterruptions.WithLabelValues(append([]string{p.Pool}, i.Labels()...)...)
		}
	}
}

// Vanished counts a node lost with nothing announced.
func (m *Aggregator) Vanished(node, pool string, i protocol.Interruption) {
	m.VanishedNodes.WithLabelValues(append([]string{node, pool}, i.Labels()...)...).Inc()
}

// EvictionCheck is what an aggregator replica's eviction check exports.
type EvictionCheck struct {
	// Checks counts the reviews answered, by verdict.
	Checks *prometheus.CounterVec
	// DurationSeconds is the time of one review, the pod's read included.
	DurationSeconds prometheus.Histogram
	// CallersRefused counts the requests turned away before any review or
	// pod read, by reason: the caller is not the API server, or its source
	// spent its budget of refused reviews.
	CallersRefused *prometheus.CounterVec
}

// NewEvictionCheck creates the eviction check's metrics and registers them
// with reg.
func NewEvictionCheck(reg prometheus.Registerer) *EvictionCheck {
	const sub = "aggregator"
	m := &EvictionCheck{
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "eviction_checks_total",
			Help: "Agents' evictions this replica reviewed, by verdict: allowed (the pod is on the agent's own Node), refused (it is not, or is gone: a broken or compromised agent, or a pod deleted meanwhile), error (the pod could not be read: refused, and retried by the agent)."},
			[]string{"verdict"}),
		DurationSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: sub, Name: "eviction_check_duration_seconds",
			Help: "Time of one eviction review in this replica, the pod's read included (the API server's call adds its round trip).", Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 4}}),
		CallersRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "eviction_check_callers_refused_total",
			Help: "Requests to the eviction check turned away before any review or pod read, by reason: where --eviction-check-callers is set, no-token, not-valid (the API server does not know the token), not-allowed (another user's), throttled (too many unknown tokens), no-review (the token could not be reviewed); and over-budget (its source, one node's pods or one address, had too many reviews refused of late)."},
			[]string{"reason"}),
	}
	for _, v := range []string{"allowed", "refused", "error"} {
		m.Checks.WithLabelValues(v)
	}
	reg.MustRegister(m.Checks, m.DurationSeconds, m.CallersRefused)
	return m
}

// CallerRefused counts one request turned away for reason.
func (m *EvictionCheck) CallerRefused(reason string) { m.CallersRefused.WithLabelValues(reason).Inc() }

// Observe counts one review.
func (m *EvictionCheck) Observe(verdict string, d time.Duration) {
	m.Checks.WithLabelValues(verdict).Inc()
	m.DurationSeconds.Observe(d.Seconds())
}
