package agent

import (
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// reasonRule is what sets a maintenance of one reason apart; every other
// rule of the state machine is the same for all.
type reasonRule struct {
	// over: the maintenance ended without the VM stopping (a new boot ID
	// ends every one).
	over func(State, Observation) bool
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

// reasonRules: host maintenance and preemption are announced by the
// metadata server and end when it withdraws them; a manual (or
// opportunistic) one is started by the perform-maintenance label and
// counted once Compute Engine begins it or the VM stops for it; a slice's drain follows the
// aggregator's ask and is never counted (the host that stops counts
// itself).
var reasonRules = map[protocol.Reason]reasonRule{
	protocol.ReasonHostMaintenance: {over: signalsWithdrawn, counted: alwaysCounted, yields: neverYields, voluntary: forced},
	protocol.ReasonPreemption:      {over: signalsWithdrawn, counted: alwaysCounted, yields: neverYields, voluntary: forced},
	protocol.ReasonManual: {over: manualWithdrawn, counted: State.ManualBegun, yields: manualYields, voluntary: voluntary,
		asksCompute: true},
	// A slice drains as its cause does: voluntarily for a manual or
	// opportunistic maintenance.
	protocol.ReasonSlice: {over: sliceAskWithdrawn, counted: neverCounted, yields: alwaysYields, voluntary: causeVoluntary},
}

// ruleOf is reason's rule. A reason this agent does not know (it never
// wrote one) is taken as a host maintenance: it ends when the signals are
// withdrawn or the VM stops, and its drain is forced.
func ruleOf(r protocol.Reason) reasonRule {
	if rule, ok := reasonRules[r]; ok {
		return rule
	}
	return reasonRules[protocol.ReasonHostMaintenance]
}

// causeVoluntary: the slice's ask is for a manual or opportunistic
// maintenance of another host.
func causeVoluntary(obs Observation) bool { return obs.SliceAsk.Reason == protocol.ReasonManual }

func alwaysCounted(State) bool                 { return true }
func neverCounted(State) bool                  { return false }
func alwaysYields(State, protocol.Reason) bool { return true }
func neverYields(State, protocol.Reason) bool  { return false }
func forced(Observation) bool                  { return false }
func voluntary(Observation) bool               { return true }

// signalsWithdrawn: every signal is known and quiet, and the notice is
// gone or pending again (503 "not yet" proves nothing).
func signalsWithdrawn(_ State, obs Observation) bool {
	sig := obs.Signals
	return signalsQuiet(sig) && (!sig.NoticePresent && !sig.NoticeNotYet || sig.Notice.Status == metadata.StatusPending)
}

// manualWithdrawn: once Compute Engine accepted the call, only a notice
// gone without the VM stopping means the maintenance was withdrawn;
// before, a quiet VM with a pending notice is what a manual maintenance
// looks like.
func manualWithdrawn(st State, obs Observation) bool {
	sig := obs.Signals
	return st.Phase == protocol.PhaseTerminating && signalsQuiet(sig) && !sig.NoticePresent && !sig.NoticeNotYet
}

// sliceAskWithdrawn: the aggregator withdrew the ask (every host of the
// slice that stopped is back).
func sliceAskWithdrawn(_ State, obs Observation) bool { return !obs.SliceAskSet }

// manualYields: a preemption takes a manual maintenance over in any
// phase; a host maintenance only while Compute Engine has not been asked.
func manualYields(st State, to protocol.Reason) bool {
	return to == protocol.ReasonPreemption || st.Phase == protocol.PhaseDraining && st.Requested.IsZero()
}

// signalsQuiet: no maintenance-event, no preemption, and the notice answered.
func signalsQuiet(sig Signals) bool {
	return sig.EventKnown && sig.Event == metadata.EventNone && sig.PreemptedKnown && !sig.Preempted && sig.NoticeKnown
}
