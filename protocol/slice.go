package protocol

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// A multi-host TPU slice is one machine, maintained as one unit: what its
// hosts read of each other, and the aggregator's ask (SliceAsk). The rules
// are lifecycle's (slicehosts.go).

// MaxTopologyChips is the most chips a topology may have: more than any
// TPU slice (the largest have some nine thousand).
const MaxTopologyChips = 1 << 16

// TopologyChips is the number of chips a TPU topology such as 2x2x4 has
// (0 when it is empty, not a topology, or larger than MaxTopologyChips).
func TopologyChips(topology string) int {
	if topology == "" {
		return 0
	}
	chips := 1
	for _, d := range strings.Split(topology, "x") {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > MaxTopologyChips || chips*n > MaxTopologyChips {
			return 0
		}
		chips *= n
	}
	return chips
}

// SliceAsk is the JSON of AnnotationSliceMaintenance: the aggregator asks
// a host to drain with its slice.
type SliceAsk struct {
	Slice string `json:"slice"`
	// Cause is the host whose maintenance (Reason, started at Started)
	// takes the slice down.
	Cause   string    `json:"cause"`
	Reason  Reason    `json:"reason"`
	Started time.Time `json:"started"`
	// Deadline is the earliest deadline of the slice's hosts in
	// maintenance: every host's workload must be stopped by it.
	Deadline time.Time `json:"deadline"`
}

// ReadSliceAsk reads n's slice ask; ok is false when there is none or it
// cannot be read (an unreadable ask is no ask).
func ReadSliceAsk(n *corev1.Node) (SliceAsk, bool) {
	raw := n.Annotations[AnnotationSliceMaintenance]
	if raw == "" {
		return SliceAsk{}, false
	}
	var ask SliceAsk
	if json.Unmarshal([]byte(raw), &ask) != nil || ask.Cause == "" || ask.Deadline.IsZero() {
		return SliceAsk{}, false
	}
	return ask, true
}

// WriteSliceAsk sets n's slice ask and the slice taint (NoSchedule: no
// new pod lands on a host of a slice that is going down, even where the
// host's agent is not running); a nil ask removes both.
func WriteSliceAsk(n *corev1.Node, ask *SliceAsk) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	taints := n.Spec.Taints[:0:0]
	for _, t := range n.Spec.Taints {
		if t.Key != TaintSliceDown {
			taints = append(taints, t)
		}
	}
	if ask == nil {
		delete(n.Annotations, AnnotationSliceMaintenance)
	} else {
		raw, _ := json.Marshal(ask)
		n.Annotations[AnnotationSliceMaintenance] = string(raw)
		taints = append(taints, corev1.Taint{Key: TaintSliceDown, Effect: corev1.TaintEffectNoSchedule})
	}
	if len(taints) == 0 {
		taints = nil
	}
	n.Spec.Taints = taints
}

// SliceHost is one host of a slice, as its slice's ask and its one
// performMaintenance call are decided: the maintenance its agent has
// under way (Phase, Reason, Started, Deadline of its AgentState), how its
// drain ended, and whether its Node is Ready (since when it is not).
type SliceHost struct {
	Name              string
	Phase             Phase
	Reason            Reason
	Started, Deadline time.Time
	Drain             DrainEnd
	Ready             bool
	// NotReadySince is when its Node's Ready condition last turned from
	// True (its lastTransitionTime), while it is not True; zero when Ready
	// or not known.
	NotReadySince time.Time
	// Unproven: its membership of the group rests on what its own node
	// wrote (Grouping.Unproven): its maintenance moves no other host.
	Unproven bool
	// Asked: someone who is not the node asked for its manual maintenance
	// under way (AskedFor), until AskedUntil (zero: while it lasts); one
	// not asked for is the node's word alone, and moves no other host.
	Asked      bool
	AskedUntil time.Time
	// Confirmed: the aggregator bore its forced maintenance out from what
	// the node cannot write (lifecycle.ConfirmsCause); else it moves no one.
	Confirmed bool
}

// SliceHostOf is n as a host of its slice: the keys of its agent's state
// that the slice is decided from, read as ReadAgentState reads them (and
// only those: every host reads every other host of its slice on every
// change of one), and its Ready condition.
func SliceHostOf(n *corev1.Node) SliceHost {
	a := n.Annotations
	h := SliceHost{Name: n.Name, Phase: Phase(a[AnnotationPhase]), Reason: Reason(a[AnnotationReason]),
		Started: readTime(a[AnnotationStarted]), Deadline: readTime(a[AnnotationDeadline]), Drain: readDrainEnd(a[AnnotationDrain])}
	if h.Phase != PhaseDraining && h.Phase != PhaseTerminating {
		h.Phase, h.Drain = PhaseIdle, ""
	} else {
		h.AskedUntil, h.Asked = AskedFor(n, a[AnnotationRequestID])
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			h.Ready = c.Status == corev1.ConditionTrue
			if !h.Ready {
				h.NotReadySince = c.LastTransitionTime.Time
			}
		}
	}
	return h
}

// MaxTPUChipsPerHost is the most TPU chips one host of any TPU generation
// has (v5e and v6e: 8; v4 and v5p: 4): a topology of more chips spans
// several hosts, whatever a host's own count.
const MaxTPUChipsPerHost = 8

// tpuChips is how many TPU chips n has: its allocatable, else its capacity
// (kept across a kubelet restart that zeroes the allocatable until the
// device plugin registers again); 0 when neither says.
func tpuChips(n *corev1.Node) int64 {
	if q, ok := n.Status.Allocatable[ResourceTPU]; ok && q.Value() > 0 {
		return q.Value()
	}
	if q, ok := n.Status.Capacity[ResourceTPU]; ok && q.Value() > 0 {
		return q.Value()
	}
	return 0
}

// SliceOf names the multi-host slice n belongs to ("" for none, or not
// known yet: SliceUnknown): the value of its sliceLabel label, when that
// is given (a self-managed cluster says which nodes form a slice with a
// label of its own), else, as on GKE, n's pool (the poolLabel label) when
// n's TPU topology has more chips than n has, or than any one host has
// while n's own chips are not known yet.
func SliceOf(n *corev1.Node, poolLabel, sliceLabel string) string {
	if sliceLabel != "" {
		return n.Labels[sliceLabel]
	}
	chips, perNode := int64(TopologyChips(n.Labels[LabelTPUTopology])), tpuChips(n)
	if chips > 0 && (perNode > 0 && chips > perNode || perNode == 0 && chips > MaxTPUChipsPerHost) {
		return n.Labels[poolLabel]
	}
	return ""
}

// SliceUnknown says why n's multi-host slice cannot be told yet ("" when
// it can): n's TPU topology may span several hosts, and n's own chips are
// not known (the TPU device plugin has not registered them: a new or
// recreated node, before the plugin starts), so neither is whether n is a
// host of a slice, nor how many hosts its slice has. A slice label
// (sliceLabel) says membership outright.
func SliceUnknown(n *corev1.Node, sliceLabel string) string {
	topology := n.Labels[LabelTPUTopology]
	if sliceLabel != "" || TopologyChips(topology) <= 1 || tpuChips(n) > 0 {
		return ""
	}
	unknown := "whether it is a host of a multi-host slice"
	if TopologyChips(topology) > MaxTPUChipsPerHost {
		unknown = "how many hosts its multi-host slice has"
	}
	return fmt.Sprintf("its TPU topology %s may span several hosts, and its own TPU chips are not known yet (no %s in its capacity or allocatable: the TPU device plugin has not registered them), so neither is %s", topology, ResourceTPU, unknown)
}

// SliceHosts is how many hosts n's multi-host slice has, by its TPU
// topology: the topology's chips over n's (0 when it cannot tell).
func SliceHosts(n *corev1.Node) int {
	chips, perNode := int64(TopologyChips(n.Labels[LabelTPUTopology])), tpuChips(n)
	if chips == 0 || perNode <= 0 || chips%perNode != 0 {
		return 0
	}
	return int(chips / perNode)
}

// IsTPU reports whether n is a TPU VM: it has TPU chips (its capacity, for
// chips not yet registered by the device plugin too), or GKE's TPU labels.
func IsTPU(n *corev1.Node) bool {
	if q, ok := n.Status.Capacity[ResourceTPU]; ok && !q.IsZero() {
		return true
	}
	if q, ok := n.Status.Allocatable[ResourceTPU]; ok && !q.IsZero() {
		return true
	}
	return n.Labels[LabelTPUTopology] != "" || n.Labels[LabelTPUAccelerator] != ""
}

// GKE's topology labels on the nodes of a reservation with a topology
// (A3 Ultra, A4, A4X and TPU capacity): the block and the sub-block (an
// NVLink domain) the VM runs in.
const (
	LabelTopologyBlock    = "cloud.google.com/gce-topology-block"
	LabelTopologySubblock = "cloud.google.com/gce-topology-subblock"
)

// The reservation groupings (Grouping.Reservation): what of a reservation
// under GROUPED maintenance is maintained as one unit.
const (
	ReservationGroupNone     = ""
	ReservationGroupSubblock = "subblock"
	ReservationGroupBlock    = "block"
)

// Grouping says what makes a node's maintenance group: the nodes that
// are maintained as one unit. Three kinds, with different rules (GroupKind):
// a multi-host TPU slice (SliceOf, by PoolLabel or SliceLabel), which stops
// as one; a gang (LabelGang, the aggregator's), whose job stops as one;
// and, where Reservation says so, a reservation's sub-block or block under
// GROUPED maintenance (GKE's topology labels name it), which shares a
// schedule but whose hosts stop one by one. A node in several follows the
// first of these.
type Grouping struct {
	PoolLabel, SliceLabel string
	// Reservation is ReservationGroupSubblock, ReservationGroupBlock or
	// anything else for none (the flag's "none"): whether nodes with GKE's
	// topology labels that are no slice's hosts form groups, and of what.
	// Compute Engine does not tell a Node whether its reservation's
	// maintenance is GROUPED: the operator says it.
	Reservation string
}

// GroupKind is what kind of group a node's group is, and so which rules
// it follows.
type GroupKind string

const (
	// GroupSlice: a multi-host TPU slice. One host down takes the slice
	// down, and starting maintenance on one instance puts every instance
	// into maintenance: any host's own maintenance (host maintenance,
	// preemption, a fault's repair, a known end) drains every host by the
	// earliest deadline.
	GroupSlice GroupKind = "slice"
	// GroupReservation: a reservation's sub-block or block under GROUPED
	// maintenance. GROUPED synchronises the schedule of planned
	// maintenance across the group ("Manage host events across
	// reservations": maintaining one VM of a block by hand moves the
	// group's state PENDING -> ONGOING -> PENDING until every VM is done),
	// not the stops: a host error or a faulty-host report is that host's
	// own, and the repair it books "applies only to instances on the host
	// that you reported" (Google's "Report faulty host"). So only a
	// voluntary maintenance of the group (a person's or the aggregator's)
	// drains every member and then asks once, at the group's scope; a
	// member's own forced event drains that member alone.
	GroupReservation GroupKind = "reservation"
	// GroupGang: the nodes of a gang (LabelGang), the pods of one pod
	// group. Its job stops on every node when one node stops, as a
	// slice's does, though each VM stops on its own: the rules are a
	// slice's (any node's own maintenance drains every node by the
	// earliest deadline; a voluntary one asks once every node is
	// drained), and the call is each VM's own.
	GroupGang GroupKind = "gang"
)

// Group is a node's maintenance group.
type Group struct {
	Kind GroupKind
	// Name names the group among all groups: a slice's label value; a
	// block's ID; a sub-block's block ID and sub-block ID
	// ("block-7/sub-3": sub-block IDs are unique only within their block).
	Name string
	// Label and Value select the group's Nodes by one label (a superset
	// for a sub-block: its ID may recur in other blocks; Name tells).
	Label, Value string
}

// GroupOf is n's group (the zero Group for none).
func (g Grouping) GroupOf(n *corev1.Node) Group {
	if s := SliceOf(n, g.PoolLabel, g.SliceLabel); s != "" {
		label := g.PoolLabel
		if g.SliceLabel != "" {
			label = g.SliceLabel
		}
		return Group{Kind: GroupSlice, Name: s, Label: label, Value: s}
	}
	if v := n.Labels[LabelGang]; v != "" {
		// Before a reservation group: a gang's node maintained alone
		// stops its job on every node.
		return Group{Kind: GroupGang, Name: v, Label: LabelGang, Value: v}
	}
	block, sub := n.Labels[LabelTopologyBlock], n.Labels[LabelTopologySubblock]
	switch {
	case g.Reservation == ReservationGroupBlock && block != "":
		return Group{Kind: GroupReservation, Name: block, Label: LabelTopologyBlock, Value: block}
	case g.Reservation == ReservationGroupSubblock && block != "" && sub != "":
		return Group{Kind: GroupReservation, Name: block + "/" + sub, Label: LabelTopologySubblock, Value: sub}
	}
	return Group{}
}

// ReservationLabel is the topology label that names a reservation group
// ("" for none).
func (g Grouping) ReservationLabel() string {
	switch g.Reservation {
	case ReservationGroupSubblock:
		return LabelTopologySubblock
	case ReservationGroupBlock:
		return LabelTopologyBlock
	}
	return ""
}

// Name is n's group's name ("" for none).
func (g Grouping) Name(n *corev1.Node) string { return g.GroupOf(n).Name }

// Unknown says why n's group cannot be told yet ("" when it can): see
// SliceUnknown.
func (g Grouping) Unknown(n *corev1.Node) string { return SliceUnknown(n, g.SliceLabel) }

// ParseReservationGroups reads a --reservation-groups flag: none,
// subblock or block.
func ParseReservationGroups(s string) (string, error) {
	switch s {
	case "none", "":
		return ReservationGroupNone, nil
	case ReservationGroupSubblock, ReservationGroupBlock:
		return s, nil
	}
	return "", fmt.Errorf("--reservation-groups %q: want none, %s or %s", s, ReservationGroupSubblock, ReservationGroupBlock)
}

// AnnotationReservationGroup is the aggregator's reading of the
// reservation group a node is in (ReservationGroupState's JSON), where it
// reads the reservation (opt-in): Compute Engine's own counts of the
// group's maintenance and its health.
const AnnotationReservationGroup = "maintenance-handler.io/reservation-group"

// ReservationGroupState is what Compute Engine said of a reservation
// group when the aggregator last read it.
type ReservationGroupState struct {
	// Scope is ReservationGroupSubblock or ReservationGroupBlock, and
	// Reservation, Block and SubBlock name the group.
	Scope       string `json:"scope"`
	Reservation string `json:"reservation"`
	Block       string `json:"block"`
	SubBlock    string `json:"subBlock,omitempty"`
	// Pending and Ongoing count the group's hosts whose maintenance is
	// pending, or under way; Window is the group maintenance's window
	// start, when Compute Engine gives one.
	Pending int       `json:"pending"`
	Ongoing int       `json:"ongoing"`
	Window  time.Time `json:"window,omitzero"`
	// Health is HEALTHY or DEGRADED ("" when not given).
	Health string `json:"health,omitempty"`
	// BlockPending and BlockOngoing are the same counts for the block of
	// a sub-block.
	BlockPending int `json:"blockPending,omitempty"`
	BlockOngoing int `json:"blockOngoing,omitempty"`
}

// Encode is s's JSON.
func (s ReservationGroupState) Encode() string {
	s.Window = s.Window.UTC()
	b, _ := json.Marshal(s)
	return string(b)
}

// ReadReservationGroup reads n's AnnotationReservationGroup; false when
// absent or unreadable.
func ReadReservationGroup(n *corev1.Node) (ReservationGroupState, bool) {
	raw := n.Annotations[AnnotationReservationGroup]
	var s ReservationGroupState
	if raw == "" || json.Unmarshal([]byte(raw), &s) != nil || s.Reservation == "" || s.Pending < 0 || s.Ongoing < 0 {
		return ReservationGroupState{}, false
	}
	return s, true
}
