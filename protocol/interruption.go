package protocol

import (
	"encoding/json"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// InterruptionType is the interruption_type of the taxonomy (GKE's
// spelling).
type InterruptionType string

const (
	MaintenanceEvent InterruptionType = "MaintenanceEvent"
	PreemptionEvent  InterruptionType = "PreemptionEvent"
	TerminationEvent InterruptionType = "TerminationEvent"
)

// InterruptionReason is the interruption_reason of the taxonomy.
type InterruptionReason string

const (
	// HWSWMaintenance: host maintenance (maintenance-event or the notice).
	HWSWMaintenance InterruptionReason = "HW/SW Maintenance"
	// NodeUpgrade: the node rebooted, unannounced, into another kubelet
	// version.
	NodeUpgrade InterruptionReason = "NodeUpgrade"
	// Eviction: preempted (Spot or preemptible).
	Eviction InterruptionReason = "Eviction"
	// HostError: the node rebooted with no notice and no preemption before
	// it.
	HostError InterruptionReason = "HostError"
	// AutoRepair: the Node object was deleted and created again, as node
	// auto-repair does.
	AutoRepair InterruptionReason = "AutoRepair"
	// FaultRepairReason: the VM stopped for the repair of a host the
	// project found faulty (reported, or a booked repair pulled forward).
	// Google counts the remediation of detected issues as termination
	// events (docs/reference.md).
	FaultRepairReason InterruptionReason = "FaultRepair"
)

// Interruption is one kind of interruption: a type and a reason.
type Interruption struct {
	Type   InterruptionType
	Reason InterruptionReason
}

// The taxonomy's interruptions.
var (
	HostMaintenance   = Interruption{MaintenanceEvent, HWSWMaintenance}
	Upgrade           = Interruption{MaintenanceEvent, NodeUpgrade}
	Preemption        = Interruption{PreemptionEvent, Eviction}
	UnannouncedReboot = Interruption{TerminationEvent, HostError}
	Repair            = Interruption{TerminationEvent, AutoRepair}
	FaultRepair       = Interruption{TerminationEvent, FaultRepairReason}
)

// A manual or opportunistic maintenance is a host maintenance started
// early; the pool metric counts it under a reason of its own (the agent's
// node counts under HostMaintenance).
var (
	ManualMaintenance        = Interruption{MaintenanceEvent, "Manual"}
	OpportunisticMaintenance = Interruption{MaintenanceEvent, "Opportunistic"}
)

// Interruptions lists the taxonomy, for metrics that show every series
// from the start.
var Interruptions = []Interruption{HostMaintenance, Upgrade, Preemption, UnannouncedReboot, Repair, FaultRepair, KnownEnd}

// InterruptionTypes lists the types, in Interruptions' order.
func InterruptionTypes() []InterruptionType {
	var out []InterruptionType
	for _, i := range Interruptions {
		if len(out) == 0 || out[len(out)-1] != i.Type {
			out = append(out, i.Type)
		}
	}
	return out
}

// Key is i's key in Counts: "type/reason".
func (i Interruption) Key() string { return string(i.Type) + "/" + string(i.Reason) }

// ParseInterruptionKey reads a Key; false when it is not the key of one
// of Interruptions (what a Node counts): a key this version does not know
// is never a metric's label.
func ParseInterruptionKey(key string) (Interruption, bool) {
	typ, reason, ok := strings.Cut(key, "/")
	i := Interruption{InterruptionType(typ), InterruptionReason(reason)}
	if !ok || !slices.Contains(Interruptions, i) {
		return Interruption{}, false
	}
	return i, true
}

// MaxCount is the most interruptions of one kind a Node's counts may
// hold: a count above it, below zero or of a key this version does not
// know is not read (a Node's keys are written by its own agent, which a
// compromised node controls).
const MaxCount = 1 << 20

// Counts counts interruptions by Interruption.Key. Counts only grow.
type Counts map[string]int

// Add returns c with n more of i (c itself is not changed).
func (c Counts) Add(i Interruption, n int) Counts {
	out := make(Counts, len(c)+1)
	for k, v := range c {
		out[k] = v
	}
	out[i.Key()] += n
	return out
}

// Plus returns the sum of c and o.
func (c Counts) Plus(o Counts) Counts {
	out := make(Counts, len(c)+len(o))
	for k, v := range c {
		out[k] = v
	}
	for k, v := range o {
		out[k] += v
	}
	return out
}

func (c Counts) encode() string {
	if len(c) == 0 {
		return ""
	}
	b, _ := json.Marshal(map[string]int(c)) // keys sorted: stable
	return string(b)
}

func decodeCounts(raw string) Counts {
	if raw == "" {
		return nil
	}
	var c Counts
	if json.Unmarshal([]byte(raw), &c) != nil {
		return nil
	}
	return c.readable()
}

// readable is c less the counts that are not read (MaxCount); nil when
// none is left.
func (c Counts) readable() Counts {
	for k, v := range c {
		if _, ok := ParseInterruptionKey(k); !ok || v < 0 || v > MaxCount {
			delete(c, k)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c
}

// NodeInterruptions is every interruption counted on n: the agent's and
// those its Node object carries from the objects it replaced (Repairs).
func NodeInterruptions(n *corev1.Node) Counts {
	return decodeCounts(n.Annotations[AnnotationInterruptions]).Plus(ReadRepairs(n).Interruptions)
}

// Labels are i's metric label values: interruption_type,
// interruption_reason.
func (i Interruption) Labels() []string { return []string{string(i.Type), string(i.Reason)} }
