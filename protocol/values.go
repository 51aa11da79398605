package protocol

import corev1 "k8s.io/api/core/v1"

// Values of LabelActiveMaintenance.
const (
	ValueOngoing     = "ONGOING"
	ValueTerminating = "terminating"
)

// TriggerValue is the only accepted value of LabelPerformMaintenance.
const TriggerValue = "true"

// Why a node is not idle (the value of AnnotationBusy): a pod uses its
// accelerators; a pod asks not to be evicted; on a node without
// accelerators, a workload pod runs.
const (
	BusyAccelerators = "accelerators"
	BusySafeToEvict  = "safe-to-evict"
	BusyWorkload     = "workload"
)

// Phase is where a node is in its maintenance lifecycle.
type Phase string

const (
	PhaseIdle        Phase = "Idle"
	PhaseDraining    Phase = "Draining"
	PhaseTerminating Phase = "Terminating"
)

// Phases lists the phases, for metrics that show every series.
var Phases = []Phase{PhaseIdle, PhaseDraining, PhaseTerminating}

// Reason is why maintenance started.
type Reason string

const (
	ReasonHostMaintenance Reason = "host-maintenance"
	ReasonPreemption      Reason = "preemption"
	// ReasonManual: the perform-maintenance label asked for the pending
	// maintenance now.
	ReasonManual Reason = "manual"
	// ReasonSlice: another host of the node's multi-host slice stops, and
	// the slice is drained as one (the aggregator's SliceAsk). Not an
	// interruption of this host's VM.
	ReasonSlice Reason = "slice"
	// ReasonFault: the aggregator approved the repair of a faulty node
	// (AnnotationFaultRepair): the node drains, then Compute Engine is
	// asked to repair its host.
	ReasonFault Reason = "fault"
)

// Interruption is the interruption a maintenance of this reason counts
// as: the one cause → interruption mapping. A manual maintenance is host
// maintenance taken early (counted once Compute Engine accepts it).
func (r Reason) Interruption() (Interruption, bool) {
	switch r {
	case ReasonHostMaintenance, ReasonManual:
		return HostMaintenance, true
	case ReasonPreemption:
		return Preemption, true
	case ReasonFault:
		return FaultRepair, true
	case ReasonKnownEnd:
		return KnownEnd, true
	}
	return Interruption{}, false
}

// The reasons of the DisruptionTarget condition the agent's drain sets on
// a pod before it deletes it (drain.Disruption), by the maintenance's
// Reason: a Job's podFailurePolicy rule on DisruptionTarget matches them
// as it matches Kubernetes' own (EvictionByEvictionAPI,
// DeletionByTaintManager, TerminationByKubelet, ...).
const (
	DisruptionHostMaintenance = "TerminationByHostMaintenance"
	DisruptionPreemption      = "TerminationByPreemption"
	DisruptionManual          = "TerminationByManualMaintenance"
	DisruptionSlice           = "TerminationBySliceMaintenance"
	DisruptionFault           = "TerminationByFaultRepair"
)

// DisruptionReasons lists them: the admission policy lets the agent set
// DisruptionTarget with these reasons and no other.
var DisruptionReasons = []string{DisruptionHostMaintenance, DisruptionPreemption, DisruptionManual, DisruptionSlice, DisruptionFault, DisruptionKnownEnd}

// DisruptionReason is the DisruptionTarget reason of a pod deleted for a
// maintenance of reason r (a reason this version does not know is a host
// maintenance, as the agent takes it).
func (r Reason) DisruptionReason() string {
	switch r {
	case ReasonPreemption:
		return DisruptionPreemption
	case ReasonManual:
		return DisruptionManual
	case ReasonSlice:
		return DisruptionSlice
	case ReasonFault:
		return DisruptionFault
	case ReasonKnownEnd:
		return DisruptionKnownEnd
	}
	return DisruptionHostMaintenance
}

// Outcomes of a manual trigger: the agent's answer to
// LabelPerformMaintenance (the outcome label of manual_triggers_total).
const (
	ManualStarted          = "started"
	ManualAccepted         = "accepted"
	ManualFailed           = "failed"
	ManualPermissionDenied = "permission_denied"
	ManualRefused          = "refused"
	ManualInvalidValue     = "invalid_value"
	ManualNoNotice         = "no_notice"
	ManualNotReschedulable = "not_reschedulable"
	ManualAlreadyOngoing   = "already_ongoing"
	// The maintenance policy gates manual triggers and refuses this one.
	ManualOutsideWindow = "outside_window"
	ManualExcluded      = "excluded"
	ManualPolicyUnknown = "policy_unknown"
	// ManualNotStarted: Compute Engine accepted the call, but its
	// operation failed or the maintenance did not begin in time; the node
	// went back in service.
	ManualNotStarted = "not_started"
	// An opportunistic trigger the agent re-checked and refused: the node
	// is no longer idle, the trigger is older than the agent accepts, or
	// the notice is no longer the one it was written for.
	ManualNotIdle       = "not_idle"
	ManualStaleTrigger  = "stale_trigger"
	ManualNoticeChanged = "notice_changed"
	// ManualAbandoned: the voluntary drain could not finish by its
	// deadline (PodDisruptionBudgets held, or pods were stuck); the
	// maintenance was not started and the node went back in service.
	ManualAbandoned = "abandoned"
	// ManualObserved: the node is observed only (observe-only mode); the
	// maintenance was decided and said, nothing was drained, and Compute
	// Engine was not asked.
	ManualObserved = "observe_only"
	// ManualLiveMigrates: the VM live-migrates on host maintenance
	// (instance/scheduling/on-host-maintenance is MIGRATE): its
	// maintenance stops nothing, so it is not drained for.
	ManualLiveMigrates = "live_migrates"
)

// ManualOutcomes lists every outcome.
var ManualOutcomes = []string{ManualStarted, ManualAccepted, ManualFailed, ManualPermissionDenied, ManualRefused,
	ManualInvalidValue, ManualNoNotice, ManualNotReschedulable, ManualAlreadyOngoing, ManualOutsideWindow, ManualExcluded,
	ManualPolicyUnknown, ManualNotStarted, ManualNotIdle, ManualStaleTrigger, ManualNoticeChanged, ManualAbandoned, ManualObserved,
	ManualLiveMigrates}

// Accelerator resources: a pod requesting one does accelerator work.
const (
	ResourceGPU = "nvidia.com/gpu"
	ResourceTPU = "google.com/tpu"
)

// HasAccelerators reports whether the node has any of resources in its
// capacity or allocatable, or GKE's label of a GPU or TPU node (which a
// node carries before its device plugin registers the devices).
func HasAccelerators(n *corev1.Node, resources []corev1.ResourceName) bool {
	for _, r := range resources {
		for _, list := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
			if q, ok := list[r]; ok && !q.IsZero() {
				return true
			}
		}
	}
	return n.Labels[LabelGPUAccelerator] != "" || n.Labels[LabelTPUAccelerator] != ""
}
