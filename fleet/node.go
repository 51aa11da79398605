package fleet

// The Node view: what the fleet's decision reads of a Node object, decoded
// once per change of the Node.

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Node is what a decision looks at, read from a Node object. The fields a
// pool's decision reads of each of its nodes come first, together: a pass
// that decides hundreds of pools again reads few cache lines of each node.
type Node struct {
	Name string
	UID  types.UID
	Pool string
	// Ready: the NodeReady condition is True.
	Ready bool
	// InMaintenance: a maintenance is under way or asked for (the
	// active-node-maintenance label, the perform-maintenance label, or the
	// impending-termination taint).
	InMaintenance bool
	// Voluntary: a manual or opportunistic maintenance is under way or
	// asked for (it counts against the caps), as far as what the node
	// cannot write shows it: the perform-maintenance label (a person's or
	// the aggregator's), an approved repair, or, for a manual maintenance
	// that goes on without the label, the aggregator's own accepted call
	// for it or its slice ask: a node's own word that it is in a manual
	// maintenance takes no place. A slice host's maintenance begun as its
	// slice's voluntary one (State.Begun) counts only as vouched (its
	// slice ask, or an accepted call): its own state, and its Node
	// NotReady, are what the node itself writes.
	Voluntary bool
	// VouchedUntil, when Voluntary rests on the aggregator's accepted call
	// alone, is when that call's place ends (ExpireVouched).
	VouchedUntil  time.Time
	NoticePresent bool
	OptOut        bool
	// GKEHandled: GKE's own maintenance handler runs on the node (its
	// kubelet is GKE's, 1.31 or later) and acts on the opportunistic-config
	// annotation itself; the aggregator leaves that annotation to it.
	GKEHandled bool
	Busy       string
	// Config is the node's opportunistic-config annotation.
	Config string
	// Slice names the group the node belongs to ("" for none): a
	// multi-host TPU slice (its pool, when the topology spans more chips
	// than one node has), or a reservation group; GroupKind says which
	// (protocol.Grouping.GroupOf).
	Slice     string
	GroupKind protocol.GroupKind
	// PodGroups are the pod groups its agent says it runs pods of, and
	// Gang the gang label the aggregator put on it ("" for none): see
	// GangLabels.
	PodGroups []protocol.PodGroupClaim
	Gang      string
	// AutoscalerGroup is the cluster autoscaler's node group the node is
	// in ("" for none known): set by the pass from the autoscaler's status.
	AutoscalerGroup string
	IdleSince       time.Time
	// KnownEnd is the VM's known end, as its agent mirrored it (zero:
	// none).
	KnownEnd time.Time
	// Unreadable are the keys whose values could not be read
	// (protocol.Unreadable): they count as absent, and the node is not
	// picked while they last.
	Unreadable []string
	// Notice is the pending notice the agent mirrored, if any
	// (NoticePresent).
	Notice maintenance.Notice
	// Failures are the node's voluntary maintenances that failed in a row.
	Failures protocol.Failures

	// Underway: a maintenance is under way or asked for, by the keys alone
	// (protocol.InMaintenance), whatever a fault says.
	Underway bool
	// Claimed: a claimed write (an opportunistic trigger, or a repair's
	// approval) may still land on the node: set by the pass from the
	// claims; counted as in repair against the faults' cap.
	Claimed bool
	// Triggered: the aggregator started its maintenance (an opportunistic
	// trigger), at TriggeredAt (zero when unreadable); Asked: the
	// perform-maintenance label is on the node.
	Triggered, Asked bool
	TriggeredAt      time.Time
	// ManualAsked: someone who is not the node asked for its manual
	// maintenance under way (protocol.AskedFor), until ManualAskedUntil
	// (zero: while it lasts); only then does it move its group.
	ManualAsked      bool
	ManualAskedUntil time.Time
	// SliceHosts is how many hosts its slice has, by its topology (0 when
	// it cannot tell: protocol.SliceHosts).
	SliceHosts int
	// SliceUnproven: the node is in its group by what its own node wrote
	// alone (labels, capacity), with no fact of Compute Engine's behind it
	// (protocol.Grouping.Unproven): it follows its group's asks, but its
	// own maintenance moves no other member, and it counts alone against
	// the caps, since any node could label itself into a group.
	SliceUnproven bool
	// The agent's maintenance under way, if any.
	Phase             protocol.Phase
	Reason            protocol.Reason
	Started, Deadline time.Time
	// Ask is the slice ask on the node (nil for none), and SliceTaint
	// whether the slice-down taint is on it.
	Ask        *protocol.SliceAsk
	SliceTaint bool
	// Conditions are the node's conditions other than Kubernetes' own and
	// the project's: what fault detectors write.
	Conditions []Condition
	// ReportFaulty is a person's request for the node's repair (the
	// label's value, a fault behavior or not; ReportFaultySet whether the
	// label is there), and ReportDescription their words for it.
	ReportFaulty      string
	ReportFaultySet   bool
	ReportDescription string
	// PredictedToDegrade: GKE's node health prediction says the node is
	// likely to degrade soon (protocol.LabelHealthPrediction "false").
	PredictedToDegrade bool
	// Repair is the approval of the node's repair (nil for none), and
	// FaultTaint whether the faulty taint is on it; LastRepair is how its
	// last repair ended, as its agent says (or the aggregator's record on a
	// Node created again, when later): it decides about the node itself
	// only (its cool-down, its conditions gone stale), never a place of
	// its pool's.
	Repair     *protocol.RepairApproval
	FaultTaint bool
	LastRepair protocol.LastFaultRepair
	// RepairAsked: the node's agent asked the relay for the report the
	// approval buys, and the relay has not answered yet (it answers within
	// its own bound, and the answer withdraws the approval). GKEFlow:
	// GKE's repair flow took the approved repair on (GKE's operation
	// label, which no node writes, differs from the one the approval
	// found). ReportUntil: the relay accepted the report of the repair
	// under way on the node, in its present boot, until then (zero: it
	// did not). RepairLapsed: the repair's place has ended (ExpireRepair).
	RepairAsked  bool
	GKEFlow      bool
	ReportUntil  time.Time
	RepairLapsed bool
	// ApprovalRefused is when the aggregator last approved the node's
	// repair and the API server refused the approval's write for good (a
	// Node its own kubelet filled to the limit): it counts as an approval
	// for the node's place in the queue and its cool-down, never against
	// its pool's repairRate (no repair can come of it).
	ApprovalRefused time.Time
	// VoluntaryBesidesRepair and VouchedBesidesRepair are Voluntary and
	// VouchedUntil as they
	// were before the repair counted as voluntary (back once it lapses).
	VoluntaryBesidesRepair bool
	VouchedBesidesRepair   time.Time
	// Approved is the aggregator's own record of the repairs it approved
	// of the VM, by pool (protocol.Repairs.Approved): what its pools'
	// repairRate counts.
	Approved map[string]time.Time
}

// NodeOf reads n; g's pool label names its pool, and g its group (a
// multi-host slice, or a reservation group: protocol.Grouping).
func NodeOf(n *corev1.Node, g protocol.Grouping) Node {
	poolLabel := g.PoolLabel
	v := Node{
		Name:   n.Name,
		UID:    n.UID,
		Pool:   n.Labels[poolLabel],
		Config: strings.TrimSpace(n.Annotations[protocol.AnnotationOpportunisticConfig]),
		OptOut: n.Labels[protocol.LabelOpportunisticDisable] == "true",
	}
	st, unreadable := protocol.ReadAgentStateAndUnreadable(n)
	v.Busy, v.IdleSince, v.Failures, v.KnownEnd = st.Busy, st.IdleSince, st.Failures, st.KnownEnd
	v.PodGroups, v.Gang = st.PodGroups, n.Labels[protocol.LabelGang]
	_, asked := n.Labels[protocol.LabelPerformMaintenance]
	v.Asked = asked
	if r, ok := protocol.ReadRepairApproval(n); ok {
		v.Repair = &r
		v.RepairAsked, v.GKEFlow = repairAsked(n, r), gkeFlowTook(n, r)
	}
	v.FaultTaint, v.LastRepair = protocol.HasTaintKey(n, protocol.TaintFaulty), st.LastRepair
	if v.FaultTaint && st.Active() && st.Reason == protocol.ReasonFault {
		v.ReportUntil = reportPlaceUntil(n, st.RequestID)
	}
	if _, ok := n.Annotations[protocol.AnnotationRepairs]; ok {
		// The VM's repair history survives its Node object's recreation.
		r := protocol.ReadRepairs(n)
		v.LastRepair, v.Approved = r.Latest(st.LastRepair), r.Approved
	}
	v.ReportFaulty, v.ReportFaultySet = n.Labels[protocol.LabelReportFaulty]
	v.ReportDescription = n.Annotations[protocol.AnnotationReportFaultyDescription]
	v.PredictedToDegrade = n.Labels[protocol.LabelHealthPrediction] == "false"
	v.Conditions = detectorConditions(n)
	// Begun, like a manual reason, is the agent's word: it counts only as
	// far as the aggregator vouched for it (its accepted call, its slice
	// ask), never because the node is down, which its kubelet says.
	inVoluntary := st.Active() && (st.Reason == protocol.ReasonManual || st.Begun)
	until, byCall := vouched(n, st)
	v.Voluntary = asked || inVoluntary && byCall
	if v.Voluntary && !asked {
		v.VouchedUntil = until
	}
	if st.Active() && st.Reason == protocol.ReasonManual {
		v.ManualAskedUntil, v.ManualAsked = protocol.AskedFor(n, st.RequestID)
	}
	v.GKEHandled = lifecycle.GKEHandles(n.Status.NodeInfo.KubeletVersion)
	v.Ready = NodeReady(n)
	// A faulty node, or one whose repair is approved, is no capacity to
	// count on, and is not picked for opportunistic maintenance.
	v.Underway = protocol.InMaintenance(n)
	v.InMaintenance = v.Underway || v.FaultTaint || v.Repair != nil
	_, _, ms := protocol.ReadTrigger(n)
	v.Triggered = ms.OpportunisticTriggered
	v.TriggeredAt, _ = time.Parse(time.RFC3339, ms.TriggeredAt)
	if st.Notice.Status != "" {
		v.Notice, v.NoticePresent = st.Notice, true
	}
	group := g.GroupOf(n)
	v.Slice, v.GroupKind = group.Name, group.Kind
	if v.Slice != "" {
		v.SliceHosts = protocol.SliceHosts(n)
		v.SliceUnproven = g.Unproven(n) != ""
	}
	v.Phase, v.Reason, v.Started, v.Deadline = st.Phase, st.Reason, st.Started, st.Deadline
	// A node in repair counts against the caps on voluntary maintenance.
	if v.InRepair() {
		v.VoluntaryBesidesRepair, v.VouchedBesidesRepair = v.Voluntary, v.VouchedUntil
		v.Voluntary, v.VouchedUntil = true, time.Time{}
	}
	if ask, ok := protocol.ReadSliceAsk(n); ok {
		v.Ask = &ask
	}
	v.SliceTaint = protocol.HasTaintKey(n, protocol.TaintSliceDown)
	v.Unreadable = unreadable
	return v
}

// vouched: the aggregator itself answered the maintenance under way with
// an accepted call (its compute answer for the request), made in the
// node's present boot, until when that answer holds its place; or asked
// the node's slice to go down with a host of it (its slice ask; until is
// zero then): what the node's agent cannot write. A call made before the
// VM booted again began a maintenance that is over.
func vouched(n *corev1.Node, st protocol.AgentState) (until time.Time, ok bool) {
	if until, ok := protocol.AcceptedCall(n, st.RequestID); ok {
		return until, true
	}
	_, asked := n.Annotations[protocol.AnnotationSliceMaintenance]
	return time.Time{}, asked
}

// ExpireVouched: a node whose voluntary maintenance holds its place under
// the caps by the aggregator's accepted call alone holds it no longer once
// the call's place ends (VouchedUntil): a maintenance Compute Engine began
// is over by then, whatever the node's agent still says.
func (v *Node) ExpireVouched(now time.Time) {
	if !v.VouchedUntil.IsZero() && !now.Before(v.VouchedUntil) {
		v.Voluntary, v.VouchedUntil = false, time.Time{}
	}
}

// Condition is a node condition a fault detector wrote.
type Condition struct {
	Type, Status string
	// Since is its last transition time.
	Since time.Time
	// Written is when its detector last wrote it: its last heartbeat, or
	// its last transition where that is later (a detector that sets no
	// heartbeat).
	Written time.Time
}

// kubernetesConditions are the condition types Kubernetes itself writes.
var kubernetesConditions = map[corev1.NodeConditionType]bool{corev1.NodeReady: true, corev1.NodeMemoryPressure: true,
	corev1.NodeDiskPressure: true, corev1.NodePIDPressure: true, corev1.NodeNetworkUnavailable: true}

// detectorConditions are n's conditions but Kubernetes' own and the
// project's.
func detectorConditions(n *corev1.Node) []Condition {
	var out []Condition
	for _, c := range n.Status.Conditions {
		if !DetectorCondition(c.Type) {
			continue
		}
		out = append(out, ConditionOf(c))
	}
	return out
}

// ConditionOf is what a fault's decision reads of c.
func ConditionOf(c corev1.NodeCondition) Condition {
	written := c.LastHeartbeatTime.Time
	if c.LastTransitionTime.After(written) {
		written = c.LastTransitionTime.Time
	}
	return Condition{Type: string(c.Type), Status: string(c.Status), Since: c.LastTransitionTime.Time, Written: written}
}

// DetectorCondition: a condition of type t may be a fault detector's (it
// is neither Kubernetes' own nor the project's).
func DetectorCondition(t corev1.NodeConditionType) bool {
	return !kubernetesConditions[t] && !slices.Contains(protocol.NodeConditionTypes, t)
}

// InRepair: the node's repair is approved, or under way on a node the
// aggregator found faulty (its taint) and whose report the relay accepted
// (the approval is withdrawn with the answer, and the repair goes on), and
// its place has not lapsed (ExpireRepair). A repair a node claims on its
// own takes no place under its pool's maxInRepair: it costs only the
// node's own service.
func (v *Node) InRepair() bool {
	return !v.RepairLapsed && (v.Repair != nil || v.FaultTaint && !v.ReportUntil.IsZero())
}

// NodeReady: n's NodeReady condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
