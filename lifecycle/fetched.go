package lifecycle

// An observation, decoded in one place from what the agent's runtime read.

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Fetched is what the agent's runtime read for one step, beside the state
// on its Node: ObservationOf decodes every value a step reads from it.
type Fetched struct {
	Now     time.Time
	Signals Signals
	// Node is the agent's Node as the step reads it.
	Node *corev1.Node
	// RequestID is a fresh UUID: the requestId of a manual maintenance
	// that starts now.
	RequestID string
	// ManualGate, when set, says why the maintenance policy refuses a
	// manual trigger on the Node now (a Manual* outcome and a detail; ""
	// when it does not); asked only while the Node carries a trigger.
	ManualGate func(node *corev1.Node, now time.Time) (reason, detail string)
	// Pods are the node's pods, from a filled pod cache; Accelerators and
	// Claimed make a pod accelerator work (Idleness).
	Pods         []*corev1.Pod
	Accelerators []corev1.ResourceName
	Claimed      func(*corev1.Pod) bool
	// DrainEnded is the last drain that ran to its end, and DrainLeft the
	// pods it left.
	DrainEnded DrainOrder
	DrainLeft  []string
	// PreemptionNotice, KnownEnd (with its need, drain.Need, filled by the
	// runtime) and Reportable are what the VM's clock and instances.get
	// said.
	PreemptionNotice time.Duration
	KnownEnd         KnownEndView
	Reportable       ReportableView
	// LiveMigrates: the metadata server says the VM live-migrates on host
	// maintenance.
	LiveMigrates bool
	// Performed is the last Compute Engine call's result (nil for none):
	// read only when it is for the state's request, or the node's call
	// (State.Call).
	Performed *PerformResult
	// Slice is the node's multi-host slice as the runtime follows it
	// (SliceViewOf).
	Slice SliceView
}

// ObservationOf is what a step of st reads: f decoded. A value of the Node
// that cannot be read is taken as the step's rules say (an unreadable
// trigger time counts as too old) and named in the error.
func ObservationOf(st State, f Fetched) (Observation, error) {
	n := f.Node
	obs := Observation{
		Now:     f.Now,
		Signals: f.Signals,
		MachineView: MachineView{BootID: n.Status.NodeInfo.BootID, KubeletVersion: n.Status.NodeInfo.KubeletVersion, Unschedulable: n.Spec.Unschedulable,
			TPU: protocol.IsTPU(n), GKEReportsFaults: GKEReportsFaults(n), GKERepairStatus: n.Labels[protocol.LabelReportAndReplaceStatus],
			GKEFaultBehavior: n.Labels[protocol.LabelFaultBehavior] != "", GKEHandling: GKEHandling(n, st), GKEHostMaintenance: GKEHandlesHostMaintenance(n.Status.NodeInfo.KubeletVersion),
			GKEWritesEvents: GKEWritesEvents(n.Status.NodeInfo.KubeletVersion), LiveMigrates: f.LiveMigrates,
			PreemptionNotice: f.PreemptionNotice, ReportableView: f.Reportable},
		TriggerView:  TriggerView{RequestID: f.RequestID},
		SliceView:    f.Slice,
		KnownEndView: f.KnownEnd,
		PodsView:     PodsView{PodsKnown: true, DrainEnded: f.DrainEnded, DrainLeft: f.DrainLeft},
	}
	var ms protocol.MaintenanceState
	obs.Trigger, obs.TriggerSet, ms = protocol.ReadTrigger(n)
	obs.Opportunistic, obs.TriggerFor = ms.OpportunisticTriggered, ms.ScheduledTime
	var err error
	if obs.TriggeredAt, err = ms.TriggeredTime(); err != nil {
		err = fmt.Errorf("an opportunistic trigger's time is unreadable, and counts as too old: %w", err)
	}
	obs.Repair, obs.RepairSet = protocol.ReadRepairApproval(n)
	if obs.TriggerSet && f.ManualGate != nil {
		obs.ManualBlocked, obs.ManualBlockedDetail = f.ManualGate(n, f.Now)
	}
	obs.Idle, obs.Busy = Idleness(f.Pods, protocol.HasAccelerators(n, f.Accelerators), f.Accelerators, f.Claimed)
	obs.PodGroups = PodGroupsOf(f.Pods)
	if r := f.Performed; r != nil && (r.RequestID == st.RequestID || r.RequestID == st.Call.RequestID) {
		obs.Perform = r
	}
	return obs, err
}
