package protocol

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// A multi-host TPU slice is one machine: its job runs on every host, and
// when one host stops the whole job fails. So a slice is maintained as one
// unit: when one host begins a maintenance (or is preempted), every other
// host drains with it, by the earliest deadline (SliceAsks: each host's
// agent works it out from its slice's Nodes, and the aggregator writes it
// for hosts whose agent is down), and the slice returns to service when
// every host is back. A voluntary maintenance of a slice asks Compute
// Engine once, from one host (SliceCaller), once every other host is
// drained (SliceDrained).

// SliceOf names the multi-host slice n belongs to ("" for none): the value
// of its sliceLabel label, when that is given (a self-managed cluster says
// which nodes form a slice with a label of its own), else, as on GKE, n's
// pool (the poolLabel label) when n's TPU topology has more chips than n
// has.
func SliceOf(n *corev1.Node, poolLabel, sliceLabel string) string {
	if sliceLabel != "" {
		return n.Labels[sliceLabel]
	}
	chips := TopologyChips(n.Labels[LabelTPUTopology])
	perNode := n.Status.Allocatable[ResourceTPU]
	if chips > 0 && perNode.Value() > 0 && int64(chips) > perNode.Value() {
		return n.Labels[poolLabel]
	}
	return ""
}

// SliceDrainLimit bounds how long a host drains for its slice: an ask
// whose cause started longer ago is no longer followed, and the host goes
// back in service even though a host of its slice is still down (its VM
// not back, or its Node deleted and not recreated). A day: a slice whose
// host is away that long is repaired or recreated by other means, and its
// other hosts should not stay cordoned for ever.
const SliceDrainLimit = 24 * time.Hour

// SliceHosts is how many hosts n's multi-host slice has, by its TPU
// topology: the topology's chips over n's (0 when it cannot tell).
func SliceHosts(n *corev1.Node) int {
	chips := TopologyChips(n.Labels[LabelTPUTopology])
	perNode := n.Status.Allocatable[ResourceTPU]
	if chips == 0 || perNode.Value() <= 0 || int64(chips)%perNode.Value() != 0 {
		return 0
	}
	return chips / int(perNode.Value())
}

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
// drain ended, and whether its Node is Ready.
type SliceHost struct {
	Name              string
	Phase             Phase
	Reason            Reason
	Started, Deadline time.Time
	Drain             DrainEnd
	Ready             bool
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
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			h.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return h
}

// active: the host has a maintenance under way.
func (h SliceHost) active() bool { return h.Phase == PhaseDraining || h.Phase == PhaseTerminating }

// SliceCaller names the host of a slice that asks Compute Engine for the
// slice's voluntary maintenance ("" for none): of the hosts with a manual
// (or opportunistic) maintenance under way, the first to start it (the
// first by name on a tie). Starting maintenance on one instance of a
// multi-host TPU slice starts it on every instance, so a slice makes one
// call, whichever hosts a person asked; the others drain and wait.
func SliceCaller(hosts []SliceHost) string {
	var caller *SliceHost
	for i, h := range hosts {
		if h.active() && h.Reason == ReasonManual &&
			(caller == nil || h.Started.Before(caller.Started) || h.Started.Equal(caller.Started) && h.Name < caller.Name) {
			caller = &hosts[i]
		}
	}
	if caller == nil {
		return ""
	}
	return caller.Name
}

// SliceDrained says, for the slice's voluntary maintenance, which hosts
// other than caller still drain (waiting) and whose voluntary drain
// ended with pods still on them (incomplete). A host drained
// (Terminating, or its drain done) is ready; so is a host whose Node is
// not Ready: nothing runs there to drain.
func SliceDrained(hosts []SliceHost, caller string) (waiting, incomplete []string) {
	for _, h := range hosts {
		switch {
		case h.Name == caller || !h.Ready:
		case h.active() && h.Drain == DrainIncomplete:
			incomplete = append(incomplete, h.Name)
		case h.Phase == PhaseTerminating || h.active() && h.Drain == DrainDone:
		default:
			waiting = append(waiting, h.Name)
		}
	}
	sort.Strings(waiting)
	sort.Strings(incomplete)
	return waiting, incomplete
}

// SliceAsks is what every host of one slice must carry, by host name (nil:
// no ask): when a host is in a maintenance of its own (host maintenance,
// preemption, or a manual or opportunistic one; not a drain with its
// slice), every other host drains with it, by the earliest deadline of
// those hosts; the host with that deadline (the first by name on a tie)
// is the cause. The aggregator writes these asks on every host; each
// host's agent works its own out from the same Nodes, so that a slice
// needs no aggregator to go down as one.
func SliceAsks(slice string, hosts []SliceHost) map[string]*SliceAsk {
	var cause *SliceHost
	for i, h := range hosts {
		own := (h.Phase == PhaseDraining || h.Phase == PhaseTerminating) && h.Reason != ReasonSlice && !h.Deadline.IsZero()
		if own && (cause == nil || h.Deadline.Before(cause.Deadline) || h.Deadline.Equal(cause.Deadline) && h.Name < cause.Name) {
			cause = &hosts[i]
		}
	}
	out := make(map[string]*SliceAsk, len(hosts))
	for _, h := range hosts {
		out[h.Name] = nil
		if cause != nil && h.Name != cause.Name {
			out[h.Name] = &SliceAsk{Slice: slice, Cause: cause.Name, Reason: cause.Reason, Started: cause.Started.UTC(), Deadline: cause.Deadline.UTC()}
		}
	}
	return out
}
