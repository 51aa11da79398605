package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Maintainer asks Compute Engine to start the pending maintenance of the
// agent's own VM now, or to repair its host; compute.VM implements it.
type Maintainer interface {
	PerformMaintenance(ctx context.Context, requestID string) (operation string, err error)
	// ReportHostAsFaulty reports the VM's host as faulty, with the fault's
	// behavior and a description of what was seen.
	ReportHostAsFaulty(ctx context.Context, requestID, behavior, description string) (operation string, err error)
	// PerformGroupMaintenance starts, at once, the maintenance of the
	// reservation group the VM runs in: its sub-block (subBlock), else its
	// block; compute.ErrNoReservationGroup when the VM names none, and
	// compute.ErrGroupNotCallable when the group is not GROUPED or has
	// hosts in use other than the members the cluster drained (members).
	PerformGroupMaintenance(ctx context.Context, requestID string, subBlock bool, members int) (operation string, err error)
	// WaitOperation returns when the operation has ended, with when it
	// ended: nil when it succeeded.
	WaitOperation(ctx context.Context, operation string) (ended time.Time, err error)
}

// performMinimum is the least time a performMaintenance call gets to go
// through (with retries), even when the drain used up the deadline.
const performMinimum = time.Minute

// startPerform runs the call for st's request ID, unless this process has
// already started it: performMaintenance, or for a fault's repair the
// method st names with the approval's fault (repair). The call is retried
// until st's deadline (at least performMinimum from now); its result
// wakes the loop.
func (a *Agent) startPerform(ctx context.Context, st lifecycle.State, repair protocol.RepairApproval) {
	a.mu.Lock()
	if a.performFor == st.RequestID {
		a.mu.Unlock()
		return
	}
	a.performFor = st.RequestID
	a.mu.Unlock()
	timeout := max(st.Deadline.Sub(a.opts.Clock.Now()), performMinimum)
	method, permission, group, subBlock := a.callFor(st)
	members := a.groupMembers()
	a.performGroup.Add(1)
	go func() {
		defer a.performGroup.Done()
		a.log.Info("asking Compute Engine", "method", method, "request_id", st.RequestID, "timeout", timeout)
		res := &lifecycle.PerformResult{RequestID: st.RequestID}
		switch {
		case a.observing():
			res.Err, res.Outcome = fmt.Errorf("%s: %w", method, ErrObserveOnly), protocol.ManualObserved
		case a.opts.Maintainer == nil:
			res.Err, res.Outcome = errors.New("this agent has no Compute Engine client"), protocol.ManualFailed
		default:
			cctx, cancel := context.WithTimeout(ctx, timeout)
			switch {
			case st.RepairCall == protocol.RepairReport:
				res.Operation, res.Err = a.opts.Maintainer.ReportHostAsFaulty(cctx, st.RequestID, repair.Behavior, repair.Description())
			case group:
				res.Operation, res.Err = a.performReservationGroup(cctx, st.RequestID, subBlock, members)
			default:
				res.Operation, res.Err = a.opts.Maintainer.PerformMaintenance(cctx, st.RequestID)
			}
			cancel()
			if ctx.Err() != nil {
				return // stopping: the next agent continues from the Node
			}
			res.Outcome = compute.Outcome(res.Err)
		}
		if res.Err != nil {
			a.log.Warn(method+" failed", "request_id", st.RequestID, "outcome", res.Outcome, "err", res.Err)
			if res.Outcome == protocol.ManualPermissionDenied {
				a.permissionDenied(permission, res.Err)
			}
		} else {
			a.log.Info(method+" accepted", "request_id", st.RequestID, "operation", res.Operation)
		}
		a.setPerformResult(res)
	}()
}

// follow keeps one goroutine reading the operation of the node's call
// (State.Call, on the Node before it is followed) while it is not seen to
// end, or a maintenance under way follows it, so that an agent restarted
// while it runs follows the same one. What it reads wakes the loop: the
// operation DONE, or failed (Step decides what follows); one that cannot
// be read is said, and the step then goes by its bounds alone.
func (a *Agent) follow(ctx context.Context, st lifecycle.State) {
	op, id := "", st.Call.RequestID
	if !st.Call.Done || st.Active() {
		op = st.Call.Operation
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.following == op {
		return
	}
	if a.stopFollowing != nil {
		a.stopFollowing()
	}
	a.following, a.stopFollowing = op, nil
	if op == "" || a.opts.Maintainer == nil {
		return
	}
	fctx, cancel := context.WithCancel(ctx)
	a.stopFollowing = cancel
	a.performGroup.Add(1)
	go func() {
		defer a.performGroup.Done()
		ended, err := a.opts.Maintainer.WaitOperation(fctx, op)
		switch {
		case fctx.Err() != nil:
			return // stopping, or no longer named: the next follower reads it
		case errors.Is(err, compute.ErrPermissionDenied):
			a.log.Warn("the operation cannot be read", "request_id", id, "operation", op, "err", err)
			a.permissionDenied(compute.OperationPermission, err)
			return
		case errors.Is(err, compute.ErrOperationFailed):
			a.log.Warn("the operation failed", "request_id", id, "operation", op, "err", err)
		case err != nil:
			a.log.Warn("the operation was not followed to its end", "request_id", id, "operation", op, "err", err)
			return
		default:
			a.log.Info("the operation is done", "request_id", id, "operation", op, "ended", ended)
		}
		a.mu.Lock()
		res := lifecycle.PerformResult{RequestID: id, Operation: op}
		if r := a.performResult; r != nil && r.RequestID == id {
			res = *r
		}
		a.mu.Unlock()
		res.OperationDone, res.OperationEnded, res.OperationErr = true, ended, err
		a.setPerformResult(&res)
	}()
}

func (a *Agent) setPerformResult(res *lifecycle.PerformResult) {
	a.mu.Lock()
	a.performResult = res
	a.mu.Unlock()
	a.poke()
}

// permissionDenied says that Compute Engine refused a call for lack of
// permission: a Warning Event naming it, and the metric.
func (a *Agent) permissionDenied(permission string, err error) {
	a.opts.Metrics.PermissionDenied(permission)
	what := "the maintenance was not started"
	switch permission {
	case compute.GetPermission:
		what = "the VM's preemption notice and known end are not known, so a preemption is drained by --preemption-deadline and a time limit is not drained for; grant it, or give the notice with --preemption-notice"
	case compute.ReportPermission:
		what = "the faulty host was not reported; the node stays drained and tainted faulty, and its repair is approved again after the pool's cool-down"
	case compute.OperationPermission:
		what = "the operation cannot be followed, so a failed one is seen only when --manual-start-timeout (for a fault report, --report-timeout) ends without the maintenance"
	}

	a.opts.Events.NodeEvent(true, protocol.EventPermissionDenied, fmt.Sprintf(
		"Compute Engine refused a call: the caller's service account (the aggregator's; with --compute-caller=node, the node's) lacks the IAM permission %s (grant the role docs/install.md documents under IAM): %s. %v", permission, what, err))
}

// callFor is the Compute Engine method st's call asks with, and the
// permission it needs: a fault's report; for a voluntary maintenance of
// a reservation group, the group's (its sub-block's, or its block's);
// else the VM's own performMaintenance.
func (a *Agent) callFor(st lifecycle.State) (method, permission string, group, subBlock bool) {
	group = st.Reason == protocol.ReasonManual && a.group.Kind == protocol.GroupReservation
	subBlock = a.group.Label == protocol.LabelTopologySubblock
	switch {
	case st.RepairCall == protocol.RepairReport:
		return string(protocol.RepairReport), compute.ReportPermission, false, false
	case group && subBlock:
		return "reservationSubBlocks.performMaintenance", compute.SubBlockPermission, true, true
	case group:
		return "reservationBlocks.performMaintenance", compute.BlockPermission, true, false
	}
	return "performMaintenance", compute.Permission, false, false
}

// performReservationGroup starts the maintenance of the reservation group
// the node is maintained with (members nodes, drained), at the group's
// scope. Where that call cannot be made (the VM names no reservation
// block or sub-block; the group is not GROUPED, or has hosts in use the
// cluster did not drain; the reads it needs are refused), it asks for its
// own VM's, and says why: maintaining one VM of a GROUPED group by hand
// moves the group's state, not its other VMs.
func (a *Agent) performReservationGroup(ctx context.Context, requestID string, subBlock bool, members int) (string, error) {
	op, err := a.opts.Maintainer.PerformGroupMaintenance(ctx, requestID, subBlock, members)
	if err == nil || ctx.Err() != nil || !compute.NotAtGroupScope(err) {
		return op, err
	}
	a.log.Warn("the reservation group's maintenance cannot be asked for at its scope; asking for this VM's", "err", err)
	a.groupScopeUnknown(err.Error())
	return a.opts.Maintainer.PerformMaintenance(ctx, requestID)
}

// groupScopeUnknown says that the group's maintenance was asked for at the
// VM's scope, and why (this agent's call, or the aggregator's for it).
func (a *Agent) groupScopeUnknown(why string) {
	a.opts.Events.NodeEvent(true, protocol.EventGroupScopeUnknown, fmt.Sprintf(
		"The reservation group's maintenance was asked for at this VM's scope (instances.performMaintenance), not the group's, so only this VM's maintenance starts now: %s", why))
}

// groupMembers is how many Nodes the node's group has, its own included,
// as the watch of its group lists them.
func (a *Agent) groupMembers() int {
	if a.siblings == nil {
		return 1
	}
	n := 0
	for _, o := range a.siblings.List() {
		if node, ok := o.(*corev1.Node); ok && a.grouping().Name(node) == a.slice {
			n++
		}
	}
	return max(n, 1)
}
