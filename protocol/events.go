package protocol

import "slices"

// Event sources: the component name on each component's Events.
const (
	// EventSourceAgent is on the agent's Events (its drain's included),
	// each about its own Node.
	EventSourceAgent = "maintenance-handler"
	// EventSourceAggregator is on the aggregator's Events.
	EventSourceAggregator = "maintenance-handler-aggregator"
)

// Event reasons: every reason the project's Events carry, here and nowhere
// else (a test checks that no other file spells one). GKE's own reason is
// kept where one fits (docs/gce.md). EventReasons says who records each,
// and its type.
const (
	// The notice and the maintenance (agent).
	EventMaintenanceScheduled   = "MaintenanceWindowScheduled"
	EventMaintenanceRescheduled = "MaintenanceWindowRescheduled"
	EventMaintenanceCancelled   = "MaintenanceWindowCancelled"
	EventMaintenanceStarted     = "MaintenanceWindowStarted"
	EventTerminateOnHost        = "TerminateOnHostMaintenance"
	EventPreempted              = "NodePreempted"
	EventMigrateOnHost          = "MigrateOnHostMaintenance"
	// EventLiveMigrates: the VM's host maintenance policy is MIGRATE, so
	// the agent drains for no host maintenance (said once as it starts).
	EventLiveMigrates     = "HostMaintenanceLiveMigrates"
	EventEvictionComplete = "PodEvictionComplete"
	// EventEvictionIncomplete: a drain that had to end by its deadline
	// (forced) ended with pods still on the node; the node waits for the
	// stop all the same, and the Event names them.
	EventEvictionIncomplete = "PodEvictionIncomplete"
	EventMaintenanceCleared = "MaintenanceWindowCleared"
	EventMaintenanceAborted = "MaintenanceCancelledBeforeStop"
	EventUnexpectedReboot   = "UnexpectedReboot"
	EventNodeUpgraded       = "NodeUpgraded"
	EventUnrecognizedValue  = "UnrecognizedMetadataValue"
	// EventLeftToGKE: GKE's own maintenance handler is seen handling the
	// node, and the maintenance is left to it (agent).
	EventLeftToGKE = "MaintenanceLeftToGKEHandler"

	// The metadata watch's health (agent).
	EventMetadataUnhealthy = "MetadataUnhealthy"
	EventMetadataRecovered = "MetadataRecovered"

	// The notice endpoint served to the node's pods (agent).
	EventNoticeEndpointUnavailable = "NoticeEndpointUnavailable"
	EventNoticeEndpointServing     = "NoticeEndpointServing"

	// A manual or opportunistic maintenance: the perform-maintenance label
	// and the performMaintenance call (agent).
	EventManualStarted    = "CustomerTriggeredMaintenance"
	EventManualAccepted   = "PerformMaintenanceSuccess"
	EventManualRejected   = "PerformMaintenanceRejected"
	EventManualFailed     = "PerformMaintenanceFailed"
	EventManualNotStarted = "PerformMaintenanceNotStarted"
	EventManualAbandoned  = "PerformMaintenanceAbandoned"
	// EventManualObserved: the node is observed only, so the maintenance
	// was decided and said, and neither drained nor started.
	EventManualObserved = "PerformMaintenanceObserved"
	// EventObserveOnly: what an observe-only agent or aggregator would
	// have done and did not (the drain's plan, the Compute Engine call, a
	// trigger), and the mode turning on or off.
	EventObserveOnly = "ObserveOnly"
	// ObservedMark begins every other Event message about an observed
	// node (one that begins "Observe-only" already says it).
	ObservedMark = "Observe-only (nothing was changed): "
	// EventPermissionDenied: Compute Engine refused a call for lack of an
	// IAM permission, named in the message (agent).
	EventPermissionDenied = "ComputePermissionDenied"

	// The drain (agent).
	EventEscalated = "EvictionEscalatedToDelete"
	EventBlocked   = "EvictionBlockedByPDB"
	// EventEvictionFailed: a pod's eviction failed for another reason
	// than a budget (the eviction check unavailable, an API server error);
	// retried, and treated as a budget's refusal. Said once per pod.
	EventEvictionFailed = "EvictionFailed"
	// EventGroupDeadline: a group's share of the deadline ran out with
	// pods still on the node; the drain goes on without them.
	EventGroupDeadline = "DrainGroupDeadline"
	// EventEvictionRequested: a pod that names eviction responders was
	// asked for through an EvictionRequest (--eviction-requests); said
	// once per pod. EventEvictionWithdrawn: the drain ended with such
	// pods still there, and their requests were withdrawn.
	EventEvictionRequested = "EvictionRequested"
	EventEvictionWithdrawn = "EvictionRequestWithdrawn"

	// EventCheckpointLeadInvalid: a pod's checkpoint lead is not a
	// positive duration; it is ignored, said once per pod (agent).
	EventCheckpointLeadInvalid = "CheckpointLeadInvalid"

	// Multi-host slices: the agent drains with its slice (Drain), moves
	// its deadline to the slice's (Deadline); the aggregator asks every
	// host (Maintenance); both say when the slice is back (Back).
	EventSliceDrain       = "SliceMaintenanceDrain"
	EventSliceDeadline    = "SliceMaintenanceDeadline"
	EventSliceMaintenance = "SliceMaintenance"
	EventSliceBack        = "SliceMaintenanceOver"
	// Gangs: the aggregator puts a node in a gang (Joined) or takes it
	// out (Left), and says when it does not believe a node's pod group
	// (PodGroupRefused).
	EventGangJoined      = "GangJoined"
	EventGangLeft        = "GangLeft"
	EventPodGroupRefused = "PodGroupRefused"
	// EventSliceUnknown: a drained node holds its manual maintenance's
	// call while its multi-host slice cannot be told (agent).
	EventSliceUnknown = "SliceMembershipUnknown"
	// EventGroupUnproven: a node's own maintenance is under way, and its
	// membership of the group its labels name is not proven
	// (Grouping.Unproven): it moves no other member (aggregator).
	EventGroupUnproven = "GroupMembershipUnproven"
	// EventCauseUnconfirmed: a host's forced maintenance is under way by
	// its agent's word, and what the aggregator read of its VM does not
	// bear it out (or it is not the first of the VM's start): it moves no
	// other member (aggregator).
	EventCauseUnconfirmed = "GroupCauseUnconfirmed"
	// EventGroupScopeUnknown: the caller of a reservation group's
	// voluntary maintenance could not ask at the group's scope, and asked
	// for its own VM's (agent).
	EventGroupScopeUnknown = "GroupScopeUnknown"
	// EventComputeCallNotVouched: a node's agent asked the aggregator for
	// a Compute Engine call that what the aggregator knows of the node
	// does not allow: not made (aggregator).
	EventComputeCallNotVouched = "ComputeCallNotVouched"

	// A fault's repair: the aggregator finds the node faulty and approves
	// its repair or says why it waits; the agent drains, asks Compute
	// Engine, and says how the repair ended.
	EventFaultDetected       = "FaultDetected"
	EventFaultRepairWaits    = "FaultRepairWaits"
	EventFaultRepairApproved = "FaultRepairApproved"
	// EventFaultRepairApprovalLapsed: the agent asked for no report within
	// the approval's drain timeout and grace; the approval is withdrawn
	// (aggregator).
	EventFaultRepairApprovalLapsed = "FaultRepairApprovalLapsed"
	EventFaultRepairStarted        = "FaultRepairStarted"
	EventFaultReported             = "FaultReported"
	EventFaultRepairFailed         = "FaultRepairFailed"
	// EventFaultNotReportable: the node's repair would be a report, and
	// Compute Engine refuses reports from this VM: it is not drained for
	// one (agent).
	EventFaultNotReportable  = "FaultNotReportable"
	EventFaultRepaired       = "FaultRepaired"
	EventFaultRepairCanceled = "FaultRepairCancelled"
	// EventFaultRepairOvertaken: the VM stopped for another maintenance
	// before or instead of its repair (agent).
	EventFaultRepairOvertaken = "FaultRepairOvertaken"
	EventFaultRequestInvalid  = "FaultRequestInvalid"

	// Opportunistic maintenance and accounting (aggregator).
	EventTriggered = "OpportunisticMaintenanceTriggered"
	// EventTriggerWithdrawn: no agent answered an opportunistic trigger in
	// time; the aggregator removed it and freed its place under the caps.
	EventTriggerWithdrawn = "OpportunisticTriggerWithdrawn"
	EventSkipped          = "OpportunisticMaintenanceSkipped"
	EventInvalidConfig    = "InvalidOpportunisticConfig"
	// EventRecreated: a Node deleted and created again, counted as a
	// repair.
	EventRecreated = "NodeRecreated"
	// EventUninstallLeftNode: the product was uninstalled while a
	// maintenance was under way on the node, which keeps its keys.
	EventUninstallLeftNode = "UninstallLeftNodeInMaintenance"
	// EventUnreadableState: the node's agent wrote values the aggregator
	// cannot read (protocol.Unreadable), named in the message.
	EventUnreadableState = "UnreadableNodeState"

	// EventClaimsRefused: the node's agent claimed more interruptions than
	// one node may add to its pool's counters in an hour (aggregator).
	EventClaimsRefused = "InterruptionClaimsRefused"
	// EventMemoryNearLimit: a replica's memory reached 90% of its
	// container's limit (aggregator; about its pod).
	EventMemoryNearLimit = "MemoryNearLimit"
)

// EventReason is one reason with the components that record it and its
// Event type.
type EventReason struct {
	Reason  string
	Sources []string
	Warning bool
}

var (
	agentOnly      = []string{EventSourceAgent}
	aggregatorOnly = []string{EventSourceAggregator}
)

// EventReasons lists every reason, the agent's first, in the order
// docs/reference.md lists them.
var EventReasons = []EventReason{
	{EventMaintenanceScheduled, agentOnly, false},
	{EventMaintenanceRescheduled, agentOnly, false},
	{EventMaintenanceCancelled, agentOnly, false},
	{EventMaintenanceStarted, agentOnly, true},
	{EventTerminateOnHost, agentOnly, true},
	{EventPreempted, agentOnly, true},
	{EventMigrateOnHost, agentOnly, false},
	{EventLiveMigrates, agentOnly, false},
	{EventBlocked, agentOnly, true},
	{EventEvictionFailed, agentOnly, true},
	{EventEscalated, agentOnly, true},
	{EventEvictionComplete, agentOnly, false},
	{EventEvictionIncomplete, agentOnly, true},
	{EventMaintenanceCleared, agentOnly, false},
	{EventMaintenanceAborted, agentOnly, true},
	{EventUnrecognizedValue, agentOnly, true},
	{EventMetadataUnhealthy, agentOnly, true},
	{EventMetadataRecovered, agentOnly, false},
	{EventNoticeEndpointUnavailable, agentOnly, true},
	{EventNoticeEndpointServing, agentOnly, false},
	{EventGroupDeadline, agentOnly, true},
	{EventEvictionRequested, agentOnly, false},
	{EventEvictionWithdrawn, agentOnly, false},
	{EventManualStarted, agentOnly, true},
	{EventManualAccepted, agentOnly, false},
	{EventManualRejected, agentOnly, true},
	{EventManualFailed, agentOnly, true},
	{EventManualAbandoned, agentOnly, true},
	{EventManualNotStarted, agentOnly, true},
	{EventManualObserved, agentOnly, false},
	{EventPermissionDenied, agentOnly, true},
	{EventObserveOnly, []string{EventSourceAgent, EventSourceAggregator}, false},
	{EventUnexpectedReboot, agentOnly, true},
	{EventNodeUpgraded, agentOnly, false},
	{EventLeftToGKE, agentOnly, false},
	{EventCheckpointLeadInvalid, agentOnly, true},
	{EventSliceDrain, agentOnly, true},
	{EventSliceDeadline, agentOnly, true},
	{EventSliceUnknown, agentOnly, true},
	{EventGroupUnproven, aggregatorOnly, true},
	{EventCauseUnconfirmed, aggregatorOnly, true},
	{EventGroupScopeUnknown, agentOnly, true},
	{EventSliceBack, []string{EventSourceAgent, EventSourceAggregator}, false},
	{EventFaultRepairStarted, agentOnly, true},
	{EventFaultReported, agentOnly, true},
	{EventFaultRepairFailed, agentOnly, true},
	{EventFaultNotReportable, agentOnly, true},
	{EventFaultRepaired, agentOnly, false},
	{EventFaultRepairCanceled, agentOnly, true},
	{EventFaultRepairOvertaken, agentOnly, true},
	{EventKnownEndScheduled, agentOnly, false},
	{EventKnownEndDrain, agentOnly, true},
	{EventTriggered, aggregatorOnly, false},
	{EventTriggerWithdrawn, aggregatorOnly, true},
	{EventSkipped, aggregatorOnly, false},
	{EventInvalidConfig, aggregatorOnly, true},
	{EventRecreated, aggregatorOnly, true},
	{EventSliceMaintenance, aggregatorOnly, true},
	{EventGangJoined, aggregatorOnly, false},
	{EventGangLeft, aggregatorOnly, false},
	{EventPodGroupRefused, aggregatorOnly, true},
	{EventUninstallLeftNode, aggregatorOnly, true},
	{EventUnreadableState, aggregatorOnly, true},
	{EventClaimsRefused, aggregatorOnly, true},
	{EventMemoryNearLimit, aggregatorOnly, true},
	{EventFaultDetected, aggregatorOnly, true},
	{EventFaultRepairWaits, aggregatorOnly, true},
	{EventFaultRepairApproved, aggregatorOnly, true},
	{EventFaultRepairApprovalLapsed, aggregatorOnly, true},
	{EventFaultRequestInvalid, aggregatorOnly, true},
	{EventComputeCallNotVouched, aggregatorOnly, true},
}

// GKEEventReasons are the reasons of the host maintenance Events that
// GKE's own handler writes about a node from GKE 1.35 on, with the source
// component GKEEventSource (GKE's "Monitor maintenance events" page and
// its maintenance dashboard): the agent's Events of these reasons would
// repeat GKE's there, so it logs them and records none.
var GKEEventReasons = []string{EventMaintenanceScheduled, EventMaintenanceRescheduled, EventMaintenanceStarted,
	EventMaintenanceCleared, EventMaintenanceCancelled, EventTerminateOnHost, EventManualStarted, EventEvictionComplete}

// GKEEventSource is the source component of GKE's own host maintenance
// Events; the agent's carry EventSourceAgent.
const GKEEventSource = "NodeTerminationHandler"

// IsGKEEventReason: reason is one of GKEEventReasons.
func IsGKEEventReason(reason string) bool { return slices.Contains(GKEEventReasons, reason) }

// TriggerRefusals are the agent's final answers to a perform-maintenance
// label that end with the node in service and Compute Engine not starting
// the maintenance: the label refused, the call failed, the voluntary drain
// given up, the maintenance not begun after the call, or the node observed
// only. The other final
// answer is EventManualAccepted (the node then turns terminating).
var TriggerRefusals = []string{EventManualRejected, EventManualFailed, EventManualAbandoned, EventManualNotStarted, EventManualObserved}

// IsTriggerRefusal: reason is one of TriggerRefusals.
func IsTriggerRefusal(reason string) bool {
	for _, r := range TriggerRefusals {
		if r == reason {
			return true
		}
	}
	return false
}
