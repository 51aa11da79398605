package protocol

// Keys GKE users already know: their exact strings.
const (
	// LabelScheduledMaintenanceTime is Unix seconds of the window start,
	// while a notice is pending.
	LabelScheduledMaintenanceTime = "cloud.google.com/scheduled-maintenance-time"
	// LabelActiveMaintenance is ValueOngoing while workloads are being
	// stopped and ValueTerminating when the node is ready to stop.
	LabelActiveMaintenance = "cloud.google.com/active-node-maintenance"
	// TaintImpendingTermination (NoSchedule, no value) keeps new pods off
	// the node while maintenance is under way.
	TaintImpendingTermination = "cloud.google.com/impending-node-termination"
	// LabelPerformMaintenance = TriggerValue asks for the pending
	// maintenance now.
	LabelPerformMaintenance = "cloud.google.com/perform-maintenance"
	// LabelOpportunisticDisable = "true" keeps the aggregator away.
	LabelOpportunisticDisable = "cloud.google.com/opportunistic-disable"
	// AnnotationUpcomingMaintenance holds the notice as served (snake_case
	// JSON).
	AnnotationUpcomingMaintenance = "node.gke.io/upcoming-maintenance"
	// AnnotationOpportunisticConfig is a pool's opportunistic maintenance
	// setting, in gcloud's syntax (package policy parses it).
	AnnotationOpportunisticConfig = "node.gke.io/opportunistic-config"
	// AnnotationMaintenanceState is MaintenanceState's JSON, written with
	// an opportunistic trigger.
	AnnotationMaintenanceState = "node.gke.io/maintenance-state"
	// LabelNodePool names a node's pool on GKE: the default pool label.
	LabelNodePool = "cloud.google.com/gke-nodepool"
	// LabelTPUTopology is a TPU node's slice topology, such as 2x2x4.
	LabelTPUTopology = "cloud.google.com/gke-tpu-topology"
	// LabelTPUAccelerator is a TPU node's TPU type, such as
	// tpu-v5p-slice.
	LabelTPUAccelerator = "cloud.google.com/gke-tpu-accelerator"
	// LabelGPUAccelerator is a GPU node's GPU type, such as
	// nvidia-h100-80gb.
	LabelGPUAccelerator = "cloud.google.com/gke-accelerator"
	// TaintToBeDeleted is the cluster autoscaler's taint on a node it
	// removes.
	TaintToBeDeleted = "ToBeDeletedByClusterAutoscaler"
	// PodAnnotationSafeToEvict = "false" on a pod keeps its node from being
	// picked for opportunistic maintenance (forced maintenance still
	// drains it): the cluster autoscaler's annotation.
	PodAnnotationSafeToEvict = "cluster-autoscaler.kubernetes.io/safe-to-evict"
)

// The workload notice: what a pod is told of its node's maintenance.
const (
	// PodAnnotationNotice is a WorkloadNotice's text, on every pod of
	// a node with a pending or starting maintenance; absent otherwise.
	PodAnnotationNotice = "maintenance-handler.io/notice"
	// PodConditionMaintenance is a pod condition type: True with reason
	// Pending or Starting and the notice as its message, while the
	// annotation is there.
	PodConditionMaintenance = "maintenance-handler.io/Maintenance"
	// PodAnnotationCheckpointLead (a duration, such as 5m), set on a pod by
	// its owner: when maintenance begins, the pod is told and evicted only
	// after this lead, within the drain's deadline.
	PodAnnotationCheckpointLead = "checkpoint.maintenance-handler.io/lead"
)

// LabelTerminatesOnHostMaintenance = "true" is the operator's label (given
// at registration, with --node-labels) on the nodes of VMs that stop for
// every host maintenance without accelerators: the agent runs on them.
const LabelTerminatesOnHostMaintenance = "maintenance-handler.io/terminates-on-host-maintenance"

// Prefix is the project-owned prefix of every other key on a Node.
const Prefix = "maintenance-handler.io/"

// The agent's keys: its state, so that a restarted agent (or a new leader
// of the aggregator) continues from the Node alone. Each exists only while
// it says something (see AgentState).
const (
	// AnnotationPhase is the agent's Phase while maintenance is under way.
	AnnotationPhase = "maintenance-handler.io/phase"
	// AnnotationReason is why maintenance started (a Reason).
	AnnotationReason = "maintenance-handler.io/reason"
	// AnnotationDeadline is when the VM is expected to stop (RFC 3339).
	AnnotationDeadline = "maintenance-handler.io/deadline"
	// AnnotationStarted is when maintenance started on this node (RFC 3339).
	AnnotationStarted = "maintenance-handler.io/started"
	// AnnotationBootID is the node's boot ID when maintenance started; a
	// different boot ID later means the VM went down and came back.
	AnnotationBootID = "maintenance-handler.io/boot-id"
	// AnnotationCordonedBefore is "true" when spec.unschedulable was
	// already set when maintenance started: it is then left set after.
	AnnotationCordonedBefore = "maintenance-handler.io/cordoned-before"
	// AnnotationRequestID is the performMaintenance requestId of a manual
	// maintenance: a retried call with it is the same request.
	AnnotationRequestID = "maintenance-handler.io/request-id"
	// AnnotationRequested is when the agent first asked Compute Engine to
	// start the maintenance (RFC 3339), written before the call.
	AnnotationRequested = "maintenance-handler.io/maintenance-requested"
	// AnnotationOperation is the Compute Engine call the agent made last
	// (Call's JSON: its request ID, method, when it was asked, and once
	// answered its operation, written before the agent follows it), kept
	// whatever the phase until the call is over: an agent restarted while
	// the operation runs follows the same one, and no maintenance calls
	// again meanwhile.
	AnnotationOperation = "maintenance-handler.io/operation"
	// AnnotationLastEvent is the last maintenance-event value acted on.
	AnnotationLastEvent = "maintenance-handler.io/last-event"
	// AnnotationBegun ("true") is set while a manual or opportunistic
	// maintenance waits for the VM's stop once Compute Engine has been seen
	// to begin it (and it was counted), and on a host of a multi-host slice
	// whose own maintenance began as the slice's voluntary one (counted by
	// the host that asked); absent otherwise.
	AnnotationBegun = "maintenance-handler.io/begun"
	// AnnotationNoticeDone is the window start (Unix seconds) of the
	// ONGOING notice whose maintenance already stopped the VM: while the
	// same notice is still served after the reboot (as on TPU VMs), it
	// starts no drain and is not counted again.
	AnnotationNoticeDone = "maintenance-handler.io/stopped-window"
	// AnnotationIdleSince is when the node last became idle (RFC 3339);
	// absent while the node is busy.
	AnnotationIdleSince = "maintenance-handler.io/idle-since"
	// AnnotationBusy says why the node is not idle (BusyAccelerators,
	// BusySafeToEvict, BusyWorkload); absent while it is idle.
	AnnotationBusy = "maintenance-handler.io/busy"
	// AnnotationInterruptions counts the interruptions the agent saw, as
	// JSON {"MaintenanceEvent/HW/SW Maintenance": 2, ...} (Interruption.Key).
	AnnotationInterruptions = "maintenance-handler.io/interruptions"
	// AnnotationLastBootID and AnnotationKubeletVersion are what the agent
	// last saw the node run: a different boot ID while nothing was
	// announced is an unannounced reboot.
	AnnotationLastBootID     = "maintenance-handler.io/last-boot-id"
	AnnotationKubeletVersion = "maintenance-handler.io/kubelet-version"
	// AnnotationVoluntaryFailures records the node's voluntary (manual or
	// opportunistic) maintenances that failed in a row, as Failures' JSON:
	// the aggregator does not pick the node again before its retry-after.
	AnnotationVoluntaryFailures = "maintenance-handler.io/voluntary-failures"
	// AnnotationNoticeMirrored ("true") is set while the scheduled-
	// maintenance-time label and the upcoming-maintenance annotation on
	// the Node are the agent's mirror of its VM's notice. GKE's own
	// handler writes the same keys; the agent removes them only while
	// this says they are its own.
	AnnotationNoticeMirrored = "maintenance-handler.io/mirrored-notice"
	// AnnotationLeftToGKE ("true") is set while the maintenance under way
	// is left to GKE's own maintenance handler, which was seen handling
	// the node (GKEHandling): the agent does not drain, cordon or call
	// Compute Engine for it, and leaves the active-maintenance label and
	// the taint to GKE's handler.
	AnnotationLeftToGKE = "maintenance-handler.io/left-to-gke"
	// AnnotationDrain says how the drain of the maintenance under way
	// ended (a DrainEnd: "done", or "incomplete" for a voluntary drain
	// whose budgets held to its deadline); absent while it runs. The hosts
	// of a multi-host slice read it: the slice's one performMaintenance
	// call waits for every host's drain.
	AnnotationDrain = "maintenance-handler.io/drain"
)

// TaintMaintenanceWindowStarted is the taint GKE's own maintenance
// handler sets when a maintenance window starts (read only: a sign that
// GKE's handler handles the node).
const TaintMaintenanceWindowStarted = "cloud.google.com/maintenance-window-started"

// The aggregator's own keys besides the trigger.
const (
	// AnnotationRepairs is Repairs' JSON: the interruptions a Node object
	// carries from the objects it replaced, and the repairs that replaced
	// them, counted by the aggregator.
	AnnotationRepairs = "maintenance-handler.io/repairs"
	// AnnotationSliceMaintenance is SliceAsk's JSON: the aggregator asks
	// every host of a multi-host slice to drain with the host whose
	// maintenance takes the slice down; the host's agent answers.
	AnnotationSliceMaintenance = "maintenance-handler.io/slice-maintenance"
	// TaintSliceDown (NoSchedule, no value) is set with the ask: no new
	// pod lands on a host of a slice going down, even where the host's
	// agent does not run. A status taint to cluster-autoscaler, as
	// TaintFaulty is.
	TaintSliceDown = "status-taint.cluster-autoscaler.kubernetes.io/maintenance-handler-slice-down"
)

// AutoscalerStatusTaintPrefix is the prefix under which cluster-autoscaler
// (1.29 onward) takes a taint for a node's status: it leaves it out of the
// template from which it builds the nodes a scale-up would add, and still
// counts the node as ready (StatusTaintPrefix in its
// cluster-autoscaler/utils/taints/taints.go, and its 1.29.0 release
// notes). Any other taint on a Ready node is copied into its group's
// template, and a pool with one faulty node would no longer grow for pods
// that do not tolerate it. The product's taints on Ready nodes carry this
// prefix; its maintenance taint, TaintImpendingTermination, is one the
// autoscaler lists itself among the node-condition taints it leaves out.
const AutoscalerStatusTaintPrefix = "status-taint.cluster-autoscaler.kubernetes.io/"

// Component is who writes or reads a key.
type Component string

const (
	Agent      Component = "agent"
	Aggregator Component = "aggregator"
	// Person: an operator, with kubectl or a tool of theirs.
	Person Component = "person"
	// GKE: GKE, or whatever makes the nodes (labels at creation).
	GKE Component = "gke"
	// Autoscaler: the cluster autoscaler.
	Autoscaler Component = "cluster-autoscaler"
	// Workload: the pods' owners, and the programs in them.
	Workload Component = "workload"
	// Detector: a fault detector the operator names (node-problem-detector
	// and the like), writing a node condition a fault policy names.
	Detector Component = "detector"
)

// Kind is what sort of key it is.
type Kind string

const (
	Label         Kind = "label"
	Annotation    Kind = "annotation"
	Taint         Kind = "taint"
	PodAnnotation Kind = "pod annotation"
	PodCondition  Kind = "pod condition"
	// LeaseAnnotation: on an observed node's Lease (AnnotationShadow).
	LeaseAnnotation Kind = "lease annotation"
	// Condition: a Node condition type (status.conditions).
	Condition Kind = "condition"
)

// Key is one key of the protocol.
type Key struct {
	Name string
	Kind Kind
	// Writer is the one component that sets it.
	Writer Component
	// Requesters may set it too: it is then a request, not state (a
	// person's perform-maintenance label). Consumer removes it once it
	// has answered it; "" for none.
	Requesters []Component
	Consumer   Component
	Readers    []Component
	// Registration: the node's kubelet may set it when it registers its
	// own Node (GKE's labels of the node's pool and machine, and the
	// operator's labels, given with --node-labels); never after.
	Registration bool
	// SharedWithGKE: GKE's own maintenance handler, which runs on the node
	// with an identity the product cannot name, writes it too (the agent
	// leaves it to that handler where it runs). It is the node's word about
	// itself: any identity of that Node may change it, none of another's.
	SharedWithGKE bool
}

// Keys is every key, with its one writer and its readers.
var Keys = []Key{
	{Name: LabelScheduledMaintenanceTime, Kind: Label, Writer: Agent, Readers: []Component{Person}, SharedWithGKE: true},
	{Name: LabelActiveMaintenance, Kind: Label, Writer: Agent, Readers: []Component{Aggregator, Person}, SharedWithGKE: true},
	{Name: TaintImpendingTermination, Kind: Taint, Writer: Agent, Readers: []Component{Aggregator}, SharedWithGKE: true},
	{Name: AnnotationUpcomingMaintenance, Kind: Annotation, Writer: Agent, Readers: []Component{Aggregator, Person}, SharedWithGKE: true},
	{Name: LabelPerformMaintenance, Kind: Label, Writer: Aggregator, Requesters: []Component{Person}, Consumer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationMaintenanceState, Kind: Annotation, Writer: Aggregator, Consumer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationRepairs, Kind: Annotation, Writer: Aggregator, Readers: []Component{Agent, Aggregator}},
	{Name: AnnotationSliceMaintenance, Kind: Annotation, Writer: Aggregator, Readers: []Component{Agent, Aggregator}},
	{Name: TaintSliceDown, Kind: Taint, Writer: Aggregator, Readers: []Component{Aggregator}},
	{Name: LabelOpportunisticDisable, Kind: Label, Writer: Person, Readers: []Component{Aggregator}},
	{Name: AnnotationOpportunisticConfig, Kind: Annotation, Writer: Person, Readers: []Component{Aggregator}},
	{Name: LabelNodePool, Kind: Label, Writer: GKE, Readers: []Component{Agent, Aggregator}, Registration: true},
	{Name: LabelTPUTopology, Kind: Label, Writer: GKE, Readers: []Component{Aggregator, Agent}, Registration: true},
	{Name: LabelTPUAccelerator, Kind: Label, Writer: GKE, Readers: []Component{Agent}, Registration: true},
	{Name: LabelGPUAccelerator, Kind: Label, Writer: GKE, Readers: []Component{Agent}, Registration: true},
	{Name: TaintToBeDeleted, Kind: Taint, Writer: Autoscaler, Readers: []Component{Aggregator}},
	{Name: PodAnnotationSafeToEvict, Kind: PodAnnotation, Writer: Person, Readers: []Component{Agent}},
	{Name: AnnotationShadow, Kind: LeaseAnnotation, Writer: Agent, Readers: []Component{Aggregator, Person}},
	{Name: PodAnnotationNotice, Kind: PodAnnotation, Writer: Agent, Readers: []Component{Workload}},
	{Name: PodConditionMaintenance, Kind: PodCondition, Writer: Agent, Readers: []Component{Workload}},
	{Name: PodAnnotationCheckpointLead, Kind: PodAnnotation, Writer: Workload, Readers: []Component{Agent}},
	{Name: AnnotationPhase, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationReason, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Aggregator}},
	{Name: AnnotationDeadline, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Person}},
	{Name: AnnotationStarted, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Aggregator}},
	{Name: AnnotationBootID, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationCordonedBefore, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationRequestID, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationRequested, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationOperation, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Person}},
	{Name: AnnotationLastEvent, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationBegun, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Person}},
	{Name: AnnotationNoticeDone, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationIdleSince, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Aggregator}},
	{Name: AnnotationBusy, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Aggregator}},
	{Name: AnnotationInterruptions, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Aggregator}},
	{Name: AnnotationLastBootID, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationKubeletVersion, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationVoluntaryFailures, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Aggregator, Person}},
	{Name: AnnotationNoticeMirrored, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationLeftToGKE, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Person}},
	{Name: AnnotationDrain, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Aggregator, Person}},
	{Name: TaintMaintenanceWindowStarted, Kind: Taint, Writer: GKE, Readers: []Component{Agent}, SharedWithGKE: true},
	{Name: LabelHealthPrediction, Kind: Label, Writer: GKE, Readers: []Component{Aggregator}},
	{Name: LabelFaultBehavior, Kind: Label, Writer: Agent, Readers: []Component{GKE}},
	{Name: LabelReportAndReplaceStatus, Kind: Label, Writer: GKE, Readers: []Component{Agent, Person}},
	{Name: LabelReportAndReplaceOperation, Kind: Label, Writer: GKE, Readers: []Component{Agent, Person}},
	{Name: LabelReportFaulty, Kind: Label, Writer: Aggregator, Requesters: []Component{Person}, Consumer: Agent, Readers: []Component{Aggregator}},
	{Name: AnnotationReportFaultyDescription, Kind: Annotation, Writer: Aggregator, Requesters: []Component{Person}, Consumer: Agent, Readers: []Component{Aggregator}},
	{Name: TaintFaulty, Kind: Taint, Writer: Aggregator, Readers: []Component{Aggregator, Person}},
	{Name: AnnotationFaultRepair, Kind: Annotation, Writer: Aggregator, Consumer: Agent, Readers: []Component{Agent, Aggregator, Person}},
	{Name: AnnotationRepairCall, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Person}},
	{Name: AnnotationGKEStatusBefore, Kind: Annotation, Writer: Agent, Readers: []Component{Agent}},
	{Name: AnnotationLastFaultRepair, Kind: Annotation, Writer: Agent, Readers: []Component{Agent, Aggregator, Person}},
	{Name: LabelKnownEnd, Kind: Label, Writer: Agent, Readers: []Component{Agent, Aggregator, Person}},
	{Name: LabelTopologyBlock, Kind: Label, Writer: GKE, Readers: []Component{Agent, Aggregator}, Registration: true},
	{Name: LabelTopologySubblock, Kind: Label, Writer: GKE, Readers: []Component{Agent, Aggregator}, Registration: true},
	{Name: AnnotationReservationGroup, Kind: Annotation, Writer: Aggregator, Readers: []Component{Person}},
	{Name: AnnotationComputeCall, Kind: Annotation, Writer: Agent, Readers: []Component{Aggregator}},
	{Name: AnnotationComputeAnswer, Kind: Annotation, Writer: Aggregator, Consumer: Agent, Readers: []Component{Agent, Person}},
	{Name: AnnotationVMRead, Kind: Annotation, Writer: Agent, Readers: []Component{Aggregator}},
	{Name: AnnotationVMFacts, Kind: Annotation, Writer: Aggregator, Readers: []Component{Agent}},
	{Name: AnnotationPodGroups, Kind: Annotation, Writer: Agent, Readers: []Component{Aggregator}},
	{Name: LabelGang, Kind: Label, Writer: Aggregator, Readers: []Component{Agent, Aggregator, Person}},
	{Name: LabelTerminatesOnHostMaintenance, Kind: Label, Writer: Person, Readers: []Component{Agent}, Registration: true},
	{Name: string(ConditionMaintenancePlanned), Kind: Condition, Writer: Agent, Readers: []Component{Person}},
	{Name: string(ConditionMaintenanceInProgress), Kind: Condition, Writer: Agent, Readers: []Component{Person}},
	{Name: string(ConditionDrainInProgress), Kind: Condition, Writer: Agent, Readers: []Component{Person}},
	{Name: string(ConditionDrained), Kind: Condition, Writer: Agent, Readers: []Component{Person}},
	{Name: string(ConditionDeviceUnhealthy), Kind: Condition, Writer: Agent, Readers: []Component{Aggregator}},
}
