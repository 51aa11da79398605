package metrics

import (
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "maintenance_handler"

// Agent holds the agent's metrics.
type Agent struct {
	Interruptions        *prometheus.CounterVec
	Migrations           prometheus.Counter
	Evictions            *prometheus.CounterVec
	Escalations          prometheus.Counter
	DrainDurationSeconds prometheus.Histogram
	MetadataRequests     *prometheus.CounterVec
	UnrecognizedValues   *prometheus.CounterVec
	TaintLatencySeconds  prometheus.Histogram
	Phase                *prometheus.GaugeVec
	ManualTriggers       *prometheus.CounterVec
	// DrainDeadline is the Unix time the current drain must end by (0 when
	// not draining); ScheduledMaintenance the pending notice's window
	// start (0 when none); Busy 1 while pods on the node use accelerators.
	DrainDeadline        prometheus.Gauge
	ScheduledMaintenance prometheus.Gauge
	Busy                 prometheus.Gauge
	// MetadataKeyHealthy is 0 for a watched metadata key that has had no
	// good answer for --unhealthy-after, 1 otherwise.
	MetadataKeyHealthy *prometheus.GaugeVec
	// VoluntaryFailures counts the node's voluntary maintenances that
	// failed in a row.
	VoluntaryFailures prometheus.Gauge
	// PermissionDenials counts Compute Engine calls refused for a missing
	// IAM permission, by permission.
	PermissionDenials *prometheus.CounterVec
	// FaultRepairs counts the node's fault repairs by behavior and
	// outcome; RepairDurationSeconds the time from a repair's approval to
	// the VM's return.
	FaultRepairs          *prometheus.CounterVec
	RepairDurationSeconds prometheus.Histogram
}

// NewAgent creates the agent's metrics and registers them with reg.
func NewAgent(reg prometheus.Registerer) *Agent {
	const sub = "agent"
	m := &Agent{
		Interruptions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "interruptions_total",
			Help: "Interruptions of this node, by interruption_type (" + joinTypes() + ") and interruption_reason.",
		}, []string{"interruption_type", "interruption_reason"}),
		Migrations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "live_migrations_total",
			Help: "MIGRATE_ON_HOST_MAINTENANCE announcements (no drain).",
		}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "evictions_total",
			Help: "Eviction attempts by outcome: evicted, blocked (429 from a PodDisruptionBudget), gone, error, deleted (escalated to delete at deadline - grace - 1 s, so that the pod keeps its whole grace).",
		}, []string{"outcome"}),
		Escalations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "eviction_escalations_total",
			Help: "Pods deleted after PodDisruptionBudgets refused their eviction until deadline - grace - 1 s.",
		}),
		DrainDurationSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: sub, Name: "drain_duration_seconds",
			Help: "Time from the start of maintenance to the node being drained (terminating).", Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600}}),
		MetadataRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "metadata_requests_total",
			Help: "Metadata server requests by key and result (ok, not_defined, no_notice, server_error, transport_error, unparseable).",
		}, []string{"key", "result"}),
		UnrecognizedValues: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "unrecognized_values_total",
			Help: "Metadata values the agent did not recognise and did not act on, by key.",
		}, []string{"key"}),
		TaintLatencySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: sub, Name: "taint_latency_seconds",
			Help: "Time from a metadata change that starts maintenance to the taint being on the Node.", Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}}),
		Phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "phase",
			Help: "1 for the node's current maintenance phase (Idle, Draining, Terminating), 0 for the others.",
		}, []string{"phase"}),
		DrainDeadline: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "drain_deadline_timestamp_seconds",
			Help: "Unix time by which the current drain must be done (the VM stops); 0 when not draining."}),
		ScheduledMaintenance: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "scheduled_maintenance_timestamp_seconds",
			Help: "Unix time of the pending maintenance notice's window start; 0 when none is pending."}),
		Busy: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "accelerators_busy",
			Help: "1 while pods on the node (other than DaemonSet and mirror pods) use accelerators or are safe-to-evict false, 0 while it is idle."}),
		VoluntaryFailures: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "voluntary_failures",
			Help: "Voluntary (manual or opportunistic) maintenances of this node that failed in a row (failed, permission_denied, refused, not_started, abandoned); 0 once one goes through. The aggregator leaves the node alone for a cool-down that doubles with each."}),
		MetadataKeyHealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "metadata_key_healthy",
			Help: "1 while the metadata key answers, 0 once it has had no good answer for --unhealthy-after (until its next good answer)."}, []string{"key"}),
		ManualTriggers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "manual_triggers_total",
			Help: "The " + protocol.LabelPerformMaintenance + " label, by outcome: started, accepted (Compute Engine accepted the call; the maintenance is counted as an interruption only when it begins or the VM stops), failed, permission_denied, refused (the call failed; the node went back in service), not_started (accepted, but its operation failed or the maintenance did not begin within --manual-start-timeout; the node went back in service), invalid_value, no_notice, not_reschedulable, already_ongoing, outside_window, excluded, policy_unknown, and for an opportunistic trigger not_idle, stale_trigger, notice_changed (the label was rejected and removed); abandoned (the voluntary drain could not finish by its deadline; the node went back in service).",
		}, []string{"outcome"}),
		PermissionDenials: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "compute_permission_denied_total",
			Help: "Compute Engine calls refused (403) because the node's service account lacks an IAM permission, by the permission: compute.instances.performMaintenance (the maintenance was not started) or compute.zoneOperations.get (its operation could not be followed).",
		}, []string{"permission"}),
		FaultRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "fault_repairs_total",
			Help: "Repairs of this node's host after a fault, by the fault's behavior (" + strings.Join(protocol.FaultBehaviors, ", ") + "), where it was seen (" + strings.Join(protocol.FaultSources, ", ") + ") and outcome: started (the drain began), accepted (Compute Engine took the report, or the booked repair pulled forward), repaired (the VM came back), failed, permission_denied, refused (the call failed; the node stays tainted faulty), cancelled (the approval was withdrawn before the call), not_reportable (the repair would be a report Compute Engine refuses from this VM: nothing drained or asked), overtaken (the VM stopped for another maintenance first: the host was not repaired).",
		}, []string{"behavior", "source", "outcome"}),
		RepairDurationSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: sub, Name: "fault_repair_duration_seconds",
			Help: "Time from the approval of a fault's repair to the VM's return from it.", Buckets: []float64{60, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600, 3 * 86400, 7 * 86400, 14 * 86400}}),
	}
	reg.MustRegister(m.Interruptions, m.Migrations, m.Evictions, m.Escalations, m.DrainDurationSeconds,
		m.MetadataRequests, m.UnrecognizedValues, m.TaintLatencySeconds, m.Phase, m.ManualTriggers,
		m.DrainDeadline, m.ScheduledMaintenance, m.Busy, m.MetadataKeyHealthy, m.VoluntaryFailures, m.PermissionDenials, m.FaultRepairs, m.RepairDurationSeconds)
	// Every series exists from the start at 0, so that the first one is
	// seen as an increase.
	for _, i := range protocol.Interruptions {
		m.Interruptions.WithLabelValues(i.Labels()...)
	}
	m.SetPhase(protocol.PhaseIdle)
	for _, o := range protocol.ManualOutcomes {
		m.ManualTriggers.WithLabelValues(o)
	}
	return m
}

// MetadataRequest implements metadata.Recorder.
func (m *Agent) MetadataRequest(key, result string) {
	m.MetadataRequests.WithLabelValues(key, result).Inc()
}

// Eviction implements drain.Recorder.
func (m *Agent) Eviction(outcome string) { m.Evictions.WithLabelValues(outcome).Inc() }

// Escalation implements drain.Recorder.
func (m *Agent) Escalation() { m.Escalations.Inc() }

// SetPhase sets the phase gauge.
func (m *Agent) SetPhase(phase protocol.Phase) {
	for _, p := range protocol.Phases {
		v := 0.0
		if p == phase {
			v = 1
		}
		m.Phase.WithLabelValues(string(p)).Set(v)
	}
}

// SetNode publishes what the node's state says: the drain deadline, the
// scheduled maintenance, and whether accelerators are busy.
func (m *Agent) SetNode(drainDeadline, scheduled time.Time, busy bool) {
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.Unix())
	}
	m.DrainDeadline.Set(unix(drainDeadline))
	m.ScheduledMaintenance.Set(unix(scheduled))
	b := 0.0
	if busy {
		b = 1
	}
	m.Busy.Set(b)
}

// AddInterruptions counts n more interruptions of a kind.
func (m *Agent) AddInterruptions(i protocol.Interruption, n int) {
	m.Interruptions.WithLabelValues(i.Labels()...).Add(float64(n))
}

// Migration counts a live-migration announcement.
func (m *Agent) Migration() { m.Migrations.Inc() }

// SetMetadataKeyHealthy sets a watched key's health.
func (m *Agent) SetMetadataKeyHealthy(key string, healthy bool) {
	v := 0.0
	if healthy {
		v = 1
	}
	m.MetadataKeyHealthy.WithLabelValues(key).Set(v)
}

// Unrecognized counts a metadata value the agent did not act on.
func (m *Agent) Unrecognized(key string) { m.UnrecognizedValues.WithLabelValues(key).Inc() }

// TaintLatency observes the time from a metadata change to the taint.
func (m *Agent) TaintLatency(d time.Duration) { m.TaintLatencySeconds.Observe(d.Seconds()) }

// DrainDuration observes how long a drain took.
func (m *Agent) DrainDuration(d time.Duration) { m.DrainDurationSeconds.Observe(d.Seconds()) }

// ManualTrigger counts one outcome of the perform-maintenance label.
func (m *Agent) ManualTrigger(outcome string) { m.ManualTriggers.WithLabelValues(outcome).Inc() }

// FaultRepair counts one outcome of a fault's repair.
func (m *Agent) FaultRepair(behavior, source, outcome string) {
	m.FaultRepairs.WithLabelValues(behavior, source, outcome).Inc()
}

// RepairDuration observes the time from a repair's approval to the VM's
// return.
func (m *Agent) RepairDuration(d time.Duration) { m.RepairDurationSeconds.Observe(d.Seconds()) }

// PermissionDenied counts a Compute Engine call refused for lack of
// permission.
func (m *Agent) PermissionDenied(permission string) {
	m.PermissionDenials.WithLabelValues(permission).Inc()
}

func joinTypes() string {
	var names []string
	for _, t := range protocol.InterruptionTypes() {
		names = append(names, string(t))
	}
	return strings.Join(names, ", ")
}

// SetFailures sets the voluntary failures in a row.
func (m *Agent) SetFailures(n int) { m.VoluntaryFailures.Set(float64(n)) }

// NoticeEndpoint is what the agent's notice endpoint exports.
type NoticeEndpoint struct {
	// Serving is 1 while the endpoint serves, 0 while it cannot listen.
	Serving prometheus.Gauge
	// Refused counts connections refused, by reason: over_share (their
	// address held its share), full (the endpoint's cap was held) or
	// foreign (an address the endpoint does not serve).
	Refused *prometheus.CounterVec
}

// NewNoticeEndpoint creates the notice endpoint's metrics and registers
// them with reg: only where the endpoint is configured, so that a node
// without it does not look like one whose endpoint failed.
func NewNoticeEndpoint(reg prometheus.Registerer) *NoticeEndpoint {
	const sub = "agent"
	m := &NoticeEndpoint{
		Serving: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "notice_endpoint_serving",
			Help: "1 while the notice endpoint (--notice-listen-address) serves the node's pods, 0 while it cannot listen (another program holds the port; tried again with backoff)."}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "notice_endpoint_refused_total",
			Help: "Connections to the notice endpoint refused, by reason: over_share (429: their client address already held its share at once), full (503: its cap was held by addresses other than the node's own) or foreign (403: an address that is neither the node's nor in its pod ranges)."}, []string{"reason"}),
	}
	m.Refused.WithLabelValues("over_share")
	m.Refused.WithLabelValues("foreign")
	m.Refused.WithLabelValues("full")
	reg.MustRegister(m.Serving, m.Refused)
	return m
}
