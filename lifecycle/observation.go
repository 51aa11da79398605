package lifecycle

// What a step reads besides the state: the time, the metadata server's signals, and four groups of what the agent observed.

import (
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Signals is what the metadata server last said, key by key.
type Signals struct {
	Event      maintenance.Event
	EventKnown bool
	// EventNotServed: the VM does not serve maintenance-event (404, as on
	// TPU VMs); Event is then NONE and known, and the notice turning
	// ONGOING is the only sign that a host maintenance begins.
	EventNotServed bool

	// EventSince is the last moment the watcher knows maintenance-event
	// held another value (metadata.Answer.Since); zero when it does not
	// know: the value was the first it saw.
	EventSince time.Time

	Preempted      bool
	PreemptedKnown bool
	// PreemptedSince is EventSince for preempted.
	PreemptedSince time.Time

	Notice        maintenance.Notice
	NoticePresent bool
	NoticeKnown   bool
	// NoticeNotYet: the server answered upcoming-maintenance with 503 "no
	// notifications have been received yet, try again later". It says no
	// notice is pending for mirroring, but it is no proof that a notice
	// that turned ONGOING is over: it never ends a drain.
	NoticeNotYet bool
}

// Observation is everything Step looks at besides the state: the time,
// the metadata server's signals, and four groups, each embedded so that
// its fields read as the observation's own (obs.BootID, obs.Trigger):
// what the Node shows of the machine (MachineView), the pods and the
// drain's progress (PodsView), the perform-maintenance label and its call
// (TriggerView), and the node's multi-host slice (SliceView).
type Observation struct {
	Now     time.Time
	Signals Signals
	MachineView
	PodsView
	TriggerView
	SliceView
	FaultView
	KnownEndView
}

// MachineView is what the Node shows of the machine now.
type MachineView struct {
	// BootID is the node's status.nodeInfo.bootID.
	BootID string
	// KubeletVersion is the node's status.nodeInfo.kubeletVersion.
	KubeletVersion string
	// Unschedulable is the node's spec.unschedulable.
	Unschedulable bool
	// GKEHandling says how the Node shows GKE's own maintenance handler
	// handling it (GKEHandling); "" when it does not.
	GKEHandling string
	// GKEHostMaintenance: GKE's own handler drains host maintenance on
	// this node itself (GKEHandlesHostMaintenance): a host maintenance is
	// left to it from its start.
	GKEHostMaintenance bool
	// GKEWritesEvents: GKE's own handler writes the node's host
	// maintenance Events itself (GKEWritesEvents), so the agent records
	// none that repeat them (protocol.GKEEventReasons).
	GKEWritesEvents bool
	// LiveMigrates: the VM's host maintenance policy is MIGRATE
	// (instance/scheduling/on-host-maintenance): host maintenance moves
	// it without a stop, so a perform-maintenance trigger, which would
	// drain it for nothing, is refused (protocol.ManualLiveMigrates).
	LiveMigrates bool
	// TPU: the Node is a TPU VM (protocol.IsTPU): its maintenance window's
	// opening is its host maintenance signal, whatever maintenance-event
	// answers.
	TPU bool
	// GKEReportsFaults: GKE runs its own report-and-replace flow on the
	// node (GKEReportsFaults), and GKERepairStatus is its progress (the
	// report-and-replace-status label; "" for none).
	GKEReportsFaults bool
	GKERepairStatus  string
	// GKEFaultBehavior: GKE's fault-behavior label is on the Node.
	GKEFaultBehavior bool
	// PreemptionNotice is the VM's preemption notice, where it is a Spot
	// VM that has one (scheduling.preemptionNoticeDuration): preempted
	// turns TRUE this long before the soft-off; zero when it has none or
	// it is not known (preemptionBudget).
	PreemptionNotice time.Duration
	// ReportableView says whether a report of the VM's host would be
	// taken.
	ReportableView
}

// PodsView is what the node runs, and how its drain went.
type PodsView struct {
	// PodsKnown: Idle, Busy and PodGroups come from a filled pod cache.
	PodsKnown bool
	Idle      bool
	Busy      string
	// PodGroups are the pod groups the node's running pods are in
	// (PodGroupsOf).
	PodGroups []protocol.PodGroupClaim
	// DrainEnded is the last drain that ran to its end (zero for none),
	// and DrainLeft names the pods it left on the node (see
	// drain.Result.Left). The maintenance under way is drained only when
	// that is the drain it orders now (Decision.drainDone): a drain for
	// another deadline, or a voluntary drain of a maintenance that turned
	// forced, is not.
	DrainEnded DrainOrder
	DrainLeft  []string
}

// TriggerView is the perform-maintenance label, what came with it, and
// the performMaintenance call it leads to.
type TriggerView struct {
	// Trigger is the perform-maintenance label's value; TriggerSet whether
	// the label is there at all.
	Trigger    string
	TriggerSet bool
	// Opportunistic: the aggregator set the trigger (maintenance-state
	// says opportunistic-triggered), at TriggeredAt (zero when it cannot
	// be read), for the notice whose scheduled-maintenance-time is
	// TriggerFor.
	Opportunistic bool
	TriggeredAt   time.Time
	TriggerFor    string
	// ManualBlocked is why the maintenance policy refuses a manual trigger
	// now (a Manual* outcome; "" when it does not), and ManualBlockedDetail
	// says it in words.
	ManualBlocked, ManualBlockedDetail string
	// RequestID is a fresh UUID, the requestId of a manual maintenance
	// that starts now.
	RequestID string
	// Perform is the result of the performMaintenance call for the state's
	// RequestID, once it has returned.
	Perform *PerformResult
}

// SliceView is the node's multi-host slice.
type SliceView struct {
	// Slice names the node's multi-host slice ("" for none).
	Slice string
	// SliceAsk is the ask that this host drain with its slice, another
	// host of which stops: what the agent works out from its slice's
	// hosts, or the aggregator's on the Node; SliceAskSet whether there
	// is one.
	SliceAsk    protocol.SliceAsk
	SliceAskSet bool
	// SliceAskExpired: the ask is no longer followed, its cause having
	// started SliceDrainLimit ago (settle sets it).
	SliceAskExpired bool
	// SliceVoluntary: a host of the slice has a manual or opportunistic
	// maintenance under way, and SliceCaller says whether this host makes
	// the slice's one performMaintenance call (SliceCaller names it);
	// SliceWaiting names the other hosts that still drain, and
	// SliceIncomplete those whose voluntary drain ended with pods left
	// (SliceDrained).
	SliceVoluntary, SliceCaller   bool
	SliceWaiting, SliceIncomplete []string
	// SliceRecheck is when a NotReady host among SliceWaiting will count
	// as drained (SliceDrained; zero for none).
	SliceRecheck time.Time
	// SliceUnknown says why the node's slice, or its size, cannot be told
	// yet ("" when it can: protocol.SliceUnknown, or the slice's Nodes not
	// yet listed): a voluntary maintenance holds its call meanwhile.
	SliceUnknown string
}

// PerformResult is how a performMaintenance call ended.
type PerformResult struct {
	RequestID string
	// Operation names Compute Engine's operation when the call succeeded.
	Operation string
	// Err is why it failed, and Outcome its class (protocol.ManualFailed,
	// protocol.ManualPermissionDenied, protocol.ManualRefused).
	Err     error
	Outcome string
	// OperationErr is set when the accepted call's operation ended with an
	// error.
	OperationErr error
	// OperationDone: the operation (State.Operation) is DONE, at
	// OperationEnded (its endTime; the time it was seen DONE where
	// Compute Engine gave none), with OperationErr when it failed.
	OperationDone  bool
	OperationEnded time.Time
}
