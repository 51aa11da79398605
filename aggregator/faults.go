package aggregator

import (
	"context"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// decideFaults decides about faulty nodes (fleet.DecideFaults): the rest
// of the pass sees the faulty nodes as out of service, and those approved
// now as in repair (counted against the caps); the next pass is due when
// a detector's condition reaches its duration, or at lapse, when a
// repair's place ends. Approvals are claimed (claims.go) before they are
// written (writeFaults).
func (a *Aggregator) decideFaults(cfg policy.Config, nodes *fleet.Fleet, lapse time.Time) fleet.FaultPlan {
	a.refusals.amend(nodes, a.opts.Clock.Now())
	plan := nodes.DecideFaults(a.opts.Clock.Now(), cfg, a.keptApprovals(cfg))
	a.mu.Lock()
	a.faultCheck = plan.NextCheck
	if !lapse.IsZero() && (a.faultCheck.IsZero() || lapse.Before(a.faultCheck)) {
		a.faultCheck = lapse
	}
	a.mu.Unlock()
	a.opts.Metrics.InRepair.Reset()
	for pool, n := range plan.InRepair {
		a.opts.Metrics.InRepair.WithLabelValues(pool).Set(float64(n))
	}
	for _, name := range plan.Unbelievable {
		// A last repair that ends in the future is the agent's word
		// alone: said as an unreadable value (announceUnreadable).
		nodes.Amend(name, func(v *fleet.Node) {
			v.Unreadable = append(slices.Clone(v.Unreadable), protocol.AnnotationLastFaultRepair)
		})
	}
	for i := range plan.Faults {
		f := &plan.Faults[i]
		if f.Reason == fleet.FaultApproved {
			// The approval buys one repair's call: the one of this
			// request (vouch), after which the relay withdraws it.
			f.Approval.Request = a.opts.NewRequestID()
		}
		if f.Reason == fleet.FaultInvalidRequest {
			continue
		}
		nodes.Amend(f.Node, func(v *fleet.Node) {
			v.InMaintenance = true
			if f.Reason == fleet.FaultApproved {
				v.Repair, v.Voluntary = &f.Approval, true
			}
		})
	}
	return plan
}

// writeFaults writes what plan changes, announces each decision once per
// change, and returns the nodes whose approval landed (node ->
// resourceVersion before the write), for the next pass to wait for.
func (a *Aggregator) writeFaults(ctx context.Context, plan fleet.FaultPlan, decidedOn map[string]*corev1.Node) map[string]string {
	changes := map[string]faultChange{}
	for i := range plan.Faults {
		f := &plan.Faults[i]
		if n := decidedOn[f.Node]; n != nil && (f.Reason == fleet.FaultApproved || f.Reason == fleet.FaultInvalidRequest || !protocol.HasTaintKey(n, protocol.TaintFaulty)) {
			changes[f.Node] = faultChange{fault: f}
		}
	}
	for _, name := range plan.Untaint {
		changes[name] = faultChange{untaint: true}
	}
	for _, f := range plan.Lapsed {
		c := changes[f.Node]
		c.lapsed = true
		changes[f.Node] = c
	}
	landed := a.writeFaultChanges(ctx, changes, decidedOn)
	for name, c := range changes {
		if n := decidedOn[name]; !landed[name] && c.fault != nil && c.fault.Reason == fleet.FaultApproved && a.refusals.refusedAt(name, n.ResourceVersion) {
			// It takes no place (its claim is resolved), and waits as
			// if approved: a Node the API server refuses every update
			// of is not approved again each pass, first in the queue.
			a.refusals.approval(name, a.opts.Clock.Now())
			a.log.Warn("a repair's approval was refused by the API server; the node takes no place and waits its cool-down", "node", name, "pool", c.fault.Pool)
			a.nodeEvent(name, c.fault.UID, true, protocol.EventFaultRepairApprovalLapsed, "The approval of the node's repair could not be written: the API server refused the update of the Node; the node holds no place of its pool's, and its repair waits the pool's cool-down")
		}
	}
	for _, f := range plan.Lapsed {
		if landed[f.Node] {
			a.opts.Metrics.FaultDecisions.WithLabelValues(f.Pool, string(f.Reason)).Inc()
			a.log.Warn("a repair's approval lapsed unused; withdrawn", "node", f.Node, "pool", f.Pool, "approved", f.Approval.Approved)
			a.nodeEvent(f.Node, f.UID, true, protocol.EventFaultRepairApprovalLapsed, f.Message)
		}
	}
	a.announceFaults(plan, func(name string) bool { w, ok := landed[name]; return !ok || w })
	written := map[string]string{}
	for name, c := range changes {
		if landed[name] && c.fault != nil && c.fault.Reason == fleet.FaultApproved {
			written[name] = decidedOn[name].ResourceVersion
		}
	}
	return written
}

// faultChange is what a pass writes on one node about its fault: the
// decision's consequences (fault), or the taint removed (untaint).
type faultChange struct {
	fault   *fleet.Fault
	untaint bool
	// lapsed: the node's approval lapsed unused, and is withdrawn.
	lapsed bool
}

// writeFaultChanges writes changes, one update per node, conditional on
// the node being as the pass saw it (a conflict is retried by the next
// pass): the faulty taint on every faulty node, the approval on those
// whose repair starts, a person's request that names no behavior removed
// (one that does stands until the node is repaired: its agent removes it),
// the taint removed from a node no longer faulty. It returns whether each
// landed.
func (a *Aggregator) writeFaultChanges(ctx context.Context, changes map[string]faultChange, decidedOn map[string]*corev1.Node) map[string]bool {
	names := slices.Sorted(maps.Keys(changes))
	written := a.updateNodes(ctx, names, decidedOn, "fault decision", func(name string, n *corev1.Node) {
		c := changes[name]
		if c.lapsed {
			protocol.ConsumeRepairApproval(n)
		}
		switch {
		case c.fault == nil && !c.untaint:
		case c.untaint:
			setFaultyTaint(n, false)
		case c.fault.Reason == fleet.FaultInvalidRequest:
			protocol.ConsumeReportFaulty(n)
		case c.fault.Reason == fleet.FaultApproved:
			setFaultyTaint(n, true)
			c.fault.Approval.GKEOperationBefore = n.Labels[protocol.LabelReportAndReplaceOperation]
			protocol.WriteRepairApproval(n, c.fault.Approval)
			// The aggregator's own record, which its pool's repairRate
			// counts (fleet.Node.Approved).
			r := protocol.ReadRepairs(n)
			r.Approve(c.fault.Pool, c.fault.Approval.Approved)
			protocol.WriteRepairs(n, r)
		default:
			setFaultyTaint(n, true)
		}
	})
	landed := make(map[string]bool, len(names))
	for i, name := range names {
		landed[name] = written[i]
	}
	return landed
}

// announceFaults says each faulty node's decision once per change (an
// approval or an answered request only once written), and forgets the
// nodes no longer faulty, so that a fault that comes back is said again.
func (a *Aggregator) announceFaults(plan fleet.FaultPlan, landed func(string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[string]bool{}
	for _, f := range plan.Faults {
		seen[f.Node] = true
		if a.lastFault[f.Node] == f.Reason || !landed(f.Node) {
			continue
		}
		first := a.lastFault[f.Node] == ""
		a.lastFault[f.Node] = f.Reason
		a.opts.Metrics.FaultDecisions.WithLabelValues(f.Pool, string(f.Reason)).Inc()
		reason := protocol.EventFaultRepairWaits
		switch {
		case f.Reason == fleet.FaultInvalidRequest:
			reason = protocol.EventFaultRequestInvalid
			delete(a.lastFault, f.Node) // answered: a new request is said again
		case f.Reason == fleet.FaultApproved:
			reason = protocol.EventFaultRepairApproved
		case first:
			reason = protocol.EventFaultDetected
		}
		a.log.Info("faulty node", "node", f.Node, "pool", f.Pool, "decision", f.Reason, "behavior", f.Approval.Behavior, "source", f.Approval.Source)
		a.nodeEvent(f.Node, f.UID, true, reason, f.Message)
	}
	for name := range a.lastFault {
		if !seen[name] {
			delete(a.lastFault, name)
		}
	}
}

// setFaultyTaint puts the faulty taint on n, or takes it off.
func setFaultyTaint(n *corev1.Node, on bool) {
	taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == protocol.TaintFaulty })
	if on {
		taints = append(taints, corev1.Taint{Key: protocol.TaintFaulty, Effect: corev1.TaintEffectNoSchedule})
	}
	n.Spec.Taints = taints
}

// untilNextPass is the longest wait for the next pass: Interval, or less
// when a fault detector's condition reaches its duration sooner, or when
// pools whose decisions the last pass left untold may be told
// (announcePlans).
func (a *Aggregator) untilNextPass() time.Duration {
	a.mu.Lock()
	check, announce := a.faultCheck, a.announceAt
	a.announceAt = time.Time{}
	a.mu.Unlock()
	next := a.opts.Interval
	for _, at := range []time.Time{check, announce} {
		if d := at.Sub(a.opts.Clock.Now()); !at.IsZero() && d < next {
			next = max(d, 0)
		}
	}
	return next
}
