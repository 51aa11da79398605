package lifecycle

// The node's Compute Engine call (State.Call): at most one is outstanding
// at a time, and the record of it is the node's, not a maintenance's. A
// maintenance that takes another over, is withdrawn or ends, and the VM's
// maintenance coming back, leave it as it is: only what is learnt of the
// call itself (its answer, its operation's end, the VM's stop, its bound)
// changes it. Every call site asks mayCall, the one place that says
// whether a call may be made now.

import (
	"cmp"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// callBound is when c is no longer taken to run: two report timeouts
// after it was asked for (an hour by default; Google documents 10-12
// minutes for a report's operation). An operation that cannot be read, or
// a call whose answer a restarted agent never saw, would otherwise hold
// every later call.
func callBound(cfg Config, c protocol.Call) time.Time {
	return c.Requested.Add(2 * cfg.ReportTimeout)
}

// outstanding: Compute Engine may still carry c out at now (it was made,
// not refused, its operation not seen to end, the VM not stopped since,
// its bound not passed).
func outstanding(cfg Config, c protocol.Call, now time.Time) bool {
	return !c.IsZero() && !c.Done && now.Before(callBound(cfg, c))
}

// trackCall is the first sub-step: what was learnt of the node's call
// changes its record, and nothing else does. A call refused, or made
// before the VM stopped (another boot ID), or past its bound, is over; an
// answer names its operation; the operation seen to end marks it done
// (kept, for the maintenance that follows it). A maintenance under way
// that asked before the record existed (an agent of an earlier version)
// has its call recorded from its request when its answer comes.
func (d *Decision) trackCall(cfg Config, obs Observation) {
	st, r := d.State, obs.Perform
	c := st.Call
	if c.IsZero() && st.Active() && st.RequestID != "" && !st.Requested.IsZero() && st.RepairCall != protocol.RepairGKE && r != nil && r.RequestID == st.RequestID {
		c = protocol.Call{RequestID: st.RequestID, Method: callMethod(st), Requested: st.Requested}
	}
	if c.IsZero() {
		return
	}
	if r != nil && r.RequestID != c.RequestID {
		r = nil
	}
	booted := obs.BootID != "" && st.LastBootID != "" && obs.BootID != st.LastBootID
	switch {
	case booted || !obs.Now.Before(callBound(cfg, c)) || r != nil && r.Err != nil:
		c = protocol.Call{}
	case r != nil:
		c.Operation = cmp.Or(c.Operation, r.Operation)
		c.Done, c.Failed = c.Done || r.OperationDone, c.Failed || r.OperationErr != nil
	}
	d.State.Call = c
}

// callMethod is the method st's call asks with (protocol.Call.Method).
func callMethod(st State) protocol.RepairCall {
	if st.RepairCall == protocol.RepairReport {
		return protocol.RepairReport
	}
	return protocol.RepairPerformMaintenance
}

// callBlocked is the one place that says whether the maintenance under
// way may not make its call (for its request ID) now: another call of the
// node's is outstanding (a retry of its own request is the same request
// to Compute Engine). Blocked, the loop wakes at the other call's bound,
// and the caller waits for that call, or follows it.
func (d *Decision) callBlocked(cfg Config, now time.Time) bool {
	c := d.State.Call
	if !outstanding(cfg, c, now) || c.RequestID == d.State.RequestID {
		return false
	}
	d.wakeAt(callBound(cfg, c))
	return true
}

// mayCall: where callBlocked allows it, the call is recorded (before it
// is made) and Decision.Perform asks for it.
func (d *Decision) mayCall(cfg Config, now time.Time) bool {
	if d.callBlocked(cfg, now) {
		return false
	}
	if st := d.State; st.Call.IsZero() || st.Call.RequestID != st.RequestID {
		d.State.Call = protocol.Call{RequestID: st.RequestID, Method: callMethod(st), Requested: now}
	}
	d.Perform = true
	return true
}

// callResult is what is known of the call the maintenance under way made
// or follows (its own request's answer, or the node's call's): obs.Perform
// where it is for either, else nil.
func callResult(st State, obs Observation) *PerformResult {
	r := obs.Perform
	if r == nil || r.RequestID != st.RequestID && (st.Call.RequestID == "" || r.RequestID != st.Call.RequestID) {
		return nil
	}
	return r
}
