package lifecycle

// What sets a maintenance of one reason apart from another: each reason's
// rule sits beside its cases (host.go, preemption.go, manual.go,
// slice.go); ruleOf finds it.

import (
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// reasonRule is what sets a maintenance of one reason apart; every other
// rule of the state machine is the same for all.
type reasonRule struct {
	// over: the maintenance ended without the VM stopping (a new boot ID
	// ends every one).
	over func(Config, State, Observation) bool
	// counted: its interruption is counted already, so the VM's own
	// maintenance or preemption taking it over is not counted again.
	counted func(State) bool
	// yields: it becomes the VM's own maintenance (reason to) when that
	// starts. Whatever the rule, a preemption shortens any deadline.
	yields func(st State, to protocol.Reason) bool
	// voluntary: PodDisruptionBudgets hold to the end of its drain.
	voluntary func(Observation) bool
	// asksCompute: drained, it asks Compute Engine to start the
	// maintenance, and is Terminating only once Compute Engine accepts.
	asksCompute bool
}

// ruleOf is reason's rule. A reason this agent does not know (it never
// wrote one) is taken as a host maintenance: it ends when the signals are
// withdrawn or the VM stops, and its drain is forced.
func ruleOf(r protocol.Reason) reasonRule {
	switch r {
	case protocol.ReasonPreemption:
		return preemptionRule
	case protocol.ReasonManual:
		return manualRule
	case protocol.ReasonSlice:
		return sliceRule
	case protocol.ReasonFault:
		return faultRule
	case protocol.ReasonKnownEnd:
		return knownEndRule
	}
	return hostMaintenanceRule
}

func alwaysCounted(State) bool { return true }

func neverCounted(State) bool { return false }

func alwaysYields(State, protocol.Reason) bool { return true }

func neverYields(State, protocol.Reason) bool { return false }

func forced(Observation) bool { return false }

func voluntary(Observation) bool { return true }
