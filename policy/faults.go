package policy

// Faults: which node conditions say a node is faulty, and how its repair
// is bounded (policy.yaml's faults, for the cluster or one pool).

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Faults is how a scope finds faulty nodes and bounds their repair.
type Faults struct {
	// Conditions are the node conditions that say a node is faulty; none
	// by default (only a person's request then).
	Conditions []FaultCondition
	// DrainTimeout bounds a faulty node's drain, from its start.
	DrainTimeout time.Duration
	// MaxInRepair caps the pool's nodes in repair at once (approved and
	// not back yet).
	MaxInRepair Budget
	// Cooldown is how long after a node's repair ended (however it ended)
	// a condition may start another; a person's request is not held by it.
	Cooldown time.Duration
	// RateCount repairs at most, per pool, in any RateWindow (zero: no
	// rate): Compute Engine may limit reports per reservation.
	RateCount  int
	RateWindow time.Duration
	// Prediction, when set, acts on GKE's node health prediction: an idle
	// node predicted to degrade is repaired as this behavior (off by
	// default).
	Prediction string
	// RepairWith says how a drained node asks for its repair: "" (auto:
	// GKE's report-and-replace flow where GKE runs it, else Compute
	// Engine), "compute" or "gke" (protocol.RepairWith).
	RepairWith string
}

// FaultCondition is one node condition that says a node is faulty.
type FaultCondition struct {
	// Type and Status are the condition's ("True" by default).
	Type, Status string
	// For is how long it must have held (its last transition time) before
	// the node counts as faulty: a detector's blip is not a fault.
	For time.Duration
	// Behavior is the fault behavior it is reported as.
	Behavior string
}

// DefaultFaults is what a scope with no faults section gets: no
// conditions, a 30-minute drain, one node in repair per pool, a 6-hour
// cool-down.
var DefaultFaults = Faults{DrainTimeout: 30 * time.Minute, MaxInRepair: Budget{Count: 1}, Cooldown: 6 * time.Hour}

// Faults is what applies to pool: its own section, else the cluster's,
// else DefaultFaults.
func (c Config) Faults(pool string) Faults {
	if pc, ok := c.Pools[pool]; ok && pc.Faults != nil {
		return *pc.Faults
	}
	if c.ClusterFaults != nil {
		return *c.ClusterFaults
	}
	return DefaultFaults
}

type faultsFile struct {
	Conditions   []faultConditionFile `json:"conditions,omitempty"`
	DrainTimeout string               `json:"drainTimeout,omitempty"`
	MaxInRepair  countOrPercent       `json:"maxInRepair,omitempty"`
	Cooldown     string               `json:"cooldown,omitempty"`
	RepairWith   string               `json:"repairWith,omitempty"`
	// HealthPrediction is the behavior an idle node GKE predicts to
	// degrade is repaired as ("" or "off": not acted on).
	HealthPrediction string `json:"healthPrediction,omitempty"`
	// RepairRate is "COUNT/WINDOW", such as 4/168h.
	RepairRate string `json:"repairRate,omitempty"`
}

type faultConditionFile struct {
	Type     string `json:"type"`
	Status   string `json:"status,omitempty"`
	For      string `json:"for,omitempty"`
	Behavior string `json:"behavior"`
}

// parseFaults reads a faults section at where; every field left out is
// DefaultFaults'.
func parseFaults(where string, f *faultsFile) (*Faults, error) {
	if f == nil {
		return nil, nil
	}
	out := DefaultFaults
	var errs []error
	duration := func(field, v string, into *time.Duration, zeroOK bool) {
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d == 0 && !zeroOK {
			errs = append(errs, fmt.Errorf("%s.%s %q: want a positive duration such as 30m", where, field, v))
			return
		}
		*into = d
	}
	duration("drainTimeout", f.DrainTimeout, &out.DrainTimeout, false)
	duration("cooldown", f.Cooldown, &out.Cooldown, true)
	if f.RepairRate != "" {
		var err error
		if out.RateCount, out.RateWindow, err = parseRate(where+".repairRate", f.RepairRate); err != nil {
			errs = append(errs, err)
		}
	}
	switch p := f.HealthPrediction; {
	case p == "" || p == "off":
	case protocol.ValidBehavior(p):
		out.Prediction = p
	default:
		errs = append(errs, fmt.Errorf("%s.healthPrediction %q: want off or one of %v", where, p, protocol.FaultBehaviors))
	}
	switch f.RepairWith {
	case "auto", "":
	case protocol.RepairWithCompute, protocol.RepairWithGKE:
		out.RepairWith = f.RepairWith
	default:
		errs = append(errs, fmt.Errorf("%s.repairWith %q: want auto, compute or gke", where, f.RepairWith))
	}
	if f.MaxInRepair != "" {
		b, err := ParseBudget(where+".maxInRepair", string(f.MaxInRepair))
		if err != nil {
			errs = append(errs, err)
		}
		out.MaxInRepair = b
	}
	for i, c := range f.Conditions {
		fc, err := parseFaultCondition(fmt.Sprintf("%s.conditions[%d]", where, i), c)
		errs = append(errs, err...)
		out.Conditions = append(out.Conditions, fc)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &out, nil
}

// parseRate reads COUNT/WINDOW, such as 4/168h, at field.
func parseRate(field, v string) (int, time.Duration, error) {
	count, window, ok := strings.Cut(v, "/")
	n, err1 := strconv.Atoi(count)
	d, err2 := time.ParseDuration(window)
	if !ok || err1 != nil || err2 != nil || n < 1 || d <= 0 {
		return 0, 0, fmt.Errorf("%s %q: want COUNT/WINDOW, such as 4/168h", field, v)
	}
	return n, d, nil
}

// parseFaultCondition reads one condition at field, with every problem
// found in it.
func parseFaultCondition(field string, c faultConditionFile) (FaultCondition, []error) {
	var errs []error
	fc := FaultCondition{Type: c.Type, Status: c.Status, Behavior: c.Behavior}
	if fc.Status == "" {
		fc.Status = "True"
	}
	if fc.Type == "" {
		errs = append(errs, fmt.Errorf("%s.type: name the node condition", field))
	}
	if fc.Status != "True" && fc.Status != "False" && fc.Status != "Unknown" {
		errs = append(errs, fmt.Errorf("%s.status %q: want True, False or Unknown", field, c.Status))
	}
	if !protocol.ValidBehavior(fc.Behavior) {
		errs = append(errs, fmt.Errorf("%s.behavior %q: want one of %v", field, c.Behavior, protocol.FaultBehaviors))
	}
	if c.For != "" {
		d, err := time.ParseDuration(c.For)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("%s.for %q: want a duration such as 2m", field, c.For))
		}
		fc.For = d
	}
	return fc, errs
}
