package protocol

// The trigger's encoding: the perform-maintenance label and the maintenance-state annotation that comes with it; and the repairs the aggregator counts.

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// MaintenanceState is the JSON of AnnotationMaintenanceState, written
// with an opportunistic trigger.
type MaintenanceState struct {
	OpportunisticTriggered bool `json:"opportunistic-triggered"`
	// TriggeredAt is when the aggregator decided (RFC 3339).
	TriggeredAt string `json:"triggered-at,omitempty"`
	TriggeredBy string `json:"triggered-by,omitempty"`
	// ScheduledTime is the scheduled-maintenance-time (Unix seconds of the
	// window start) of the notice the trigger was written for.
	ScheduledTime string `json:"scheduled-maintenance-time,omitempty"`
}

// ReadTrigger reads the perform-maintenance label, and the maintenance
// state written with it (zero when absent or unreadable).
func ReadTrigger(n *corev1.Node) (value string, set bool, ms MaintenanceState) {
	value, set = n.Labels[LabelPerformMaintenance]
	if raw := n.Annotations[AnnotationMaintenanceState]; raw != "" {
		if json.Unmarshal([]byte(raw), &ms) != nil {
			ms = MaintenanceState{}
		}
	}
	return value, set, ms
}

// WriteTrigger asks for n's pending maintenance now, as the aggregator:
// the perform-maintenance label and the maintenance state that says who.
func WriteTrigger(n *corev1.Node, ms MaintenanceState) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	raw, _ := json.Marshal(ms)
	n.Labels[LabelPerformMaintenance] = TriggerValue
	n.Annotations[AnnotationMaintenanceState] = string(raw)
}

// ConsumeTrigger removes the request once the agent has answered it.
func ConsumeTrigger(n *corev1.Node) {
	delete(n.Labels, LabelPerformMaintenance)
	delete(n.Annotations, AnnotationMaintenanceState)
}

// Repairs is the JSON of AnnotationRepairs.
type Repairs struct {
	// RecreatedFrom is the UID of the Node object this one replaced, once
	// the repair is counted.
	RecreatedFrom types.UID `json:"recreated-from,omitempty"`
	// Interruptions are those of the objects this one replaced (all of
	// them, in a chain of repairs) and the repairs themselves.
	Interruptions Counts `json:"interruptions,omitempty"`
	// LastRepair is how the last fault repair of the VM ended, as the
	// objects this one replaced recorded it (nil for none): the pool's
	// cool-down and repairRate count it, as if on this object (Latest).
	LastRepair *LastFaultRepair `json:"last-fault-repair,omitempty"`
	// Approved is, by pool, when the aggregator last approved a repair of
	// the VM in that pool: its own record, which the pool's repairRate
	// counts against that pool (never the pool the Node names now), and
	// which a Node created again carries on. At most MaxApprovedPools.
	Approved map[string]time.Time `json:"approved,omitempty"`
}

// MaxApprovedPools bounds Repairs.Approved: a VM repaired in more pools
// than this keeps its latest approvals.
const MaxApprovedPools = 8

// Approve records that the aggregator approved a repair of the VM in pool
// at at, dropping the oldest pools past MaxApprovedPools.
func (r *Repairs) Approve(pool string, at time.Time) {
	if r.Approved == nil {
		r.Approved = map[string]time.Time{}
	}
	if at.After(r.Approved[pool]) {
		r.Approved[pool] = at.UTC()
	}
	for len(r.Approved) > MaxApprovedPools {
		oldest := pool
		for p, t := range r.Approved {
			if t.Before(r.Approved[oldest]) {
				oldest = p
			}
		}
		delete(r.Approved, oldest)
	}
}

// Latest is how the VM's last fault repair ended: the later of own (what
// its agent recorded on this Node object) and what the objects it
// replaced recorded.
func (r Repairs) Latest(own LastFaultRepair) LastFaultRepair {
	if r.LastRepair != nil && r.LastRepair.Ended.After(own.Ended) {
		return *r.LastRepair
	}
	return own
}

// ReadRepairs reads n's repairs (zero when absent or unreadable).
func ReadRepairs(n *corev1.Node) Repairs {
	var r Repairs
	if raw := n.Annotations[AnnotationRepairs]; raw != "" && json.Unmarshal([]byte(raw), &r) != nil {
		return Repairs{}
	}
	r.Interruptions = r.Interruptions.readable()
	if l := r.LastRepair; l != nil && (!slices.Contains(RepairOutcomes, l.Outcome) || l.Ended.IsZero()) {
		r.LastRepair = nil
	}
	for pool, at := range r.Approved {
		if at.IsZero() {
			delete(r.Approved, pool)
		}
	}
	return r
}

// WriteRepairs writes r onto n.
func WriteRepairs(n *corev1.Node, r Repairs) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	raw, _ := json.Marshal(r)
	n.Annotations[AnnotationRepairs] = string(raw)
}

// TriggeredTime is TriggeredAt as a time: zero and no error when absent,
// an error naming the value when it cannot be read (the trigger then
// counts as too old: lifecycle).
func (ms MaintenanceState) TriggeredTime() (time.Time, error) {
	if ms.TriggeredAt == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, ms.TriggeredAt)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s's triggered-at %q: %w", AnnotationMaintenanceState, ms.TriggeredAt, err)
	}
	return t, nil
}

// ParseScheduledTime reads a scheduled-maintenance-time value (Unix
// seconds of the window's start, as LabelScheduledMaintenanceTime holds
// it): zero and no error when empty, an error naming the value when it
// is not a positive count of seconds.
func ParseScheduledTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t := readUnix(s)
	if t.IsZero() {
		return time.Time{}, fmt.Errorf("scheduled-maintenance-time %q: want Unix seconds", s)
	}
	return t, nil
}
