package protocol

// Known ends: a VM whose end Compute Engine knows in advance (a time
// limit: scheduling.maxRunDuration or scheduling.terminationTime, as
// flex-start VMs have) is stopped or deleted at
// resourceStatus.scheduling.terminationTimestamp. The agent treats that
// end as a scheduled stop, under keys of the project's own.

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// LabelKnownEnd is Unix seconds of the VM's known end (as
// LabelScheduledMaintenanceTime is of a maintenance window), while one is
// known: a selector can keep pods that need longer off the node. Never
// GKE's key: GKE does not write one, and a scheduled-maintenance-time
// that is not a maintenance would mislead its own handler.
const LabelKnownEnd = "maintenance-handler.io/known-end-time"

// ReasonKnownEnd: the VM reaches its known end (AgentState.KnownEnd);
// the node drains so that every grace ends before it.
const ReasonKnownEnd Reason = "known-end"

// DisruptionKnownEnd is the DisruptionTarget reason of a pod deleted for
// a known end.
const DisruptionKnownEnd = "TerminationByKnownEnd"

// AutomaticTerminationReason: the VM reached its time limit. Compute
// Engine calls the feature automatic termination (the VM is terminated,
// stopped or deleted as its instanceTerminationAction says, when it
// reaches maxRunDuration or terminationTime); GKE's interruption
// taxonomy has no reason of its own for it, and a VM that Compute Engine
// terminates is a termination event there (docs/gce.md).
const AutomaticTerminationReason InterruptionReason = "AutomaticTermination"

// KnownEnd is the interruption a known end counts as.
var KnownEnd = Interruption{TerminationEvent, AutomaticTerminationReason}

// Known-end Events (agent).
const (
	// EventKnownEndScheduled: the VM's end is known, or moved, or is no longer
	// known.
	EventKnownEndScheduled = "KnownEndScheduled"
	// EventKnownEndDrain: the drain before the known end started.
	EventKnownEndDrain = "KnownEndDrain"
)

// ReadKnownEnd reads LabelKnownEnd; zero when absent or unreadable.
func ReadKnownEnd(n *corev1.Node) time.Time {
	return readUnix(n.Labels[LabelKnownEnd])
}

func readUnix(s string) time.Time {
	secs, err := strconv.ParseInt(s, 10, 64)
	if err != nil || secs <= 0 {
		return time.Time{}
	}
	return time.Unix(secs, 0)
}

func writeUnix(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.Unix(), 10)
}
