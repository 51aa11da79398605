package agent

// The Node protocol. Keys GKE users already know keep their exact strings;
// everything else the project writes on a Node lives under Prefix, here and
// nowhere else.
const (
	// LabelScheduledMaintenanceTime is Unix seconds of the window start,
	// while a notice is pending.
	LabelScheduledMaintenanceTime = "cloud.google.com/scheduled-maintenance-time"
	// LabelActiveMaintenance is ONGOING while workloads are being stopped
	// and terminating when the node is ready to stop.
	LabelActiveMaintenance = "cloud.google.com/active-node-maintenance"
	// TaintImpendingTermination (NoSchedule) keeps new pods off the node
	// while maintenance is under way.
	TaintImpendingTermination = "cloud.google.com/impending-node-termination"
	// LabelPerformMaintenance = "true" asks for the pending maintenance now.
	LabelPerformMaintenance = "cloud.google.com/perform-maintenance"
	// LabelOpportunisticDisable = "true" keeps the aggregator away.
	LabelOpportunisticDisable = "cloud.google.com/opportunistic-disable"
	// AnnotationUpcomingMaintenance holds the notice as served (snake_case JSON).
	AnnotationUpcomingMaintenance = "node.gke.io/upcoming-maintenance"
	// AnnotationOpportunisticConfig is read by the aggregator.
	AnnotationOpportunisticConfig = "node.gke.io/opportunistic-config"
	// AnnotationMaintenanceState is JSON written when maintenance starts.
	AnnotationMaintenanceState = "node.gke.io/maintenance-state"

	ValueOngoing     = "ONGOING"
	ValueTerminating = "terminating"
)

// Prefix is the project-owned prefix of every other key on a Node.
const Prefix = "maintenance-handler.io/"

// Project-owned annotations: the agent's state, so that a restarted agent
// (or a new leader of the aggregator) continues from the Node alone.
const (
	// AnnotationPhase is the agent's phase (see Phase).
	AnnotationPhase = Prefix + "phase"
	// AnnotationReason is why maintenance started (see Reason).
	AnnotationReason = Prefix + "reason"
	// AnnotationDeadline is when the VM is expected to stop (RFC 3339).
	AnnotationDeadline = Prefix + "deadline"
	// AnnotationStarted is when maintenance started on this node (RFC 3339).
	AnnotationStarted = Prefix + "started"
	// AnnotationBootID is the node's boot ID when maintenance started; a
	// different boot ID later means the VM went down and came back.
	AnnotationBootID = Prefix + "boot-id"
	// AnnotationCordonedBefore is "true" when spec.unschedulable was already
	// set when the agent started maintenance: it is then left set after.
	AnnotationCordonedBefore = Prefix + "cordoned-before"
	// AnnotationRequestID is the performMaintenance requestId of a manual
	// maintenance: a retried call with it is the same request.
	AnnotationRequestID = Prefix + "request-id"
	// AnnotationRequested is when the agent first asked Compute Engine to
	// start the maintenance (RFC 3339), written before the call: the
	// record that the call was made for this maintenance.
	AnnotationRequested = Prefix + "maintenance-requested"
	// AnnotationIdleSince is when the node last became idle (RFC 3339):
	// no pod but DaemonSet and mirror pods requests an accelerator and no
	// pod is safe-to-evict "false". Absent while the node is busy.
	AnnotationIdleSince = Prefix + "idle-since"
	// AnnotationBusy says why the node is not idle (BusyAccelerators,
	// BusySafeToEvict); absent while it is idle.
	AnnotationBusy = Prefix + "busy"
	// AnnotationInterruptions counts the node's interruptions, as JSON
	// {"MaintenanceEvent/HW/SW Maintenance": 2, ...}: the total survives
	// agent restarts and reboots, and the aggregator reads it.
	AnnotationInterruptions = Prefix + "interruptions"
	// AnnotationLastBootID and AnnotationKubeletVersion are what the agent
	// last saw the node run: a different boot ID while nothing was
	// announced is an unannounced reboot.
	AnnotationLastBootID     = Prefix + "last-boot-id"
	AnnotationKubeletVersion = Prefix + "kubelet-version"
)
