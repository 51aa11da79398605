package aggregator

// What the leader vouches for: a node's ask is a request, never a fact.
// The leader makes a call on a VM only as far as keys the asking node
// cannot write allow it (docs/security.md): a voluntary maintenance's call
// only while the perform-maintenance label (a person's, or the
// aggregator's own opportunistic pick) stands on the node, for the request
// its agent started for it; a reservation group's call only for the group
// the leader itself counts the node in, once every other member says on
// its own Node that it is drained; a repair's call only for the request
// the aggregator's approval names.

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// errGroupDraining: the group's other members are still draining for the
// group's maintenance; the ask is answered once they are drained.
var errGroupDraining = errors.New("the reservation group's other members are still draining")

// vouch says why the leader would not make c for n (nil: it would), and
// the VM the call is made on (n's own, in home: instanceOf). group lists
// the Nodes of n's group as the leader's cache holds them (n included; nil
// outside a group), and now is the leader's time. A call is made only for the maintenance under way on
// the node, with its request ID, and only as far as what the node cannot
// write allows:
//   - a report, or a repair's performMaintenance, only with the
//     aggregator's approval of the repair, for the request it names and
//     its behavior;
//   - a voluntary maintenance's performMaintenance, or its reservation
//     group's call, only while the perform-maintenance label stands (no
//     node identity may write it: a person or the aggregator asked);
//   - a group's call only for the reservation group the leader counts
//     the node in, at the scope the leader groups by (a block or a
//     sub-block: never the node's own choice), once every other member of
//     it says, each on its own Node, that it is drained (errGroupDraining
//     while some still drain).
func vouch(n *corev1.Node, c protocol.ComputeCall, g protocol.Grouping, group []*corev1.Node, home Home, now time.Time) (compute.Instance, error) {
	inst, err := instanceOf(n, home)
	if err != nil {
		return inst, err
	}
	st := protocol.ReadAgentState(n)
	if !st.Active() || st.RequestID != c.ID {
		return inst, fmt.Errorf("the node's maintenance under way (request %q) is not the one asked for (request %q)", st.RequestID, c.ID)
	}
	approval, approved := protocol.ReadRepairApproval(n)
	switch {
	case c.Method == protocol.CallReportHostAsFaulty && st.Reason == protocol.ReasonFault && st.RepairCall == protocol.RepairReport:
		if !approved || approval.Behavior != c.Behavior {
			return inst, fmt.Errorf("no repair of behavior %q is approved on the node", c.Behavior)
		}
		return inst, approvedFor(approval, c.ID)
	case c.Method == protocol.CallPerformMaintenance && st.Reason == protocol.ReasonFault && st.RepairCall == protocol.RepairPerformMaintenance:
		if !approved {
			return inst, errors.New("no repair is approved on the node")
		}
		return inst, approvedFor(approval, c.ID)
	case c.Method == protocol.CallPerformMaintenance && st.Reason == protocol.ReasonManual:
		return inst, asked(n)
	case c.Method == protocol.CallGroupMaintenance && st.Reason == protocol.ReasonManual:
		if err := asked(n); err != nil {
			return inst, err
		}
		if g.GroupOf(n).Kind != protocol.GroupReservation {
			return inst, errors.New("the node is in no reservation group")
		}
		if why := g.Unproven(n); why != "" {
			return inst, fmt.Errorf("the node's membership of its reservation group is not proven: %s", why)
		}
		if subBlock := g.Reservation == protocol.ReservationGroupSubblock; c.SubBlock != subBlock {
			return inst, fmt.Errorf("the node asks for its %s's maintenance, but its reservation group is its %s", scope(c.SubBlock), scope(subBlock))
		}
		return inst, groupDrained(n.Name, group, now)
	default:
		return inst, fmt.Errorf("a maintenance of reason %q (repair call %q) does not ask for %s", st.Reason, st.RepairCall, c.Method)
	}
}

// scope names a reservation group's scope.
func scope(subBlock bool) string {
	if subBlock {
		return "sub-block"
	}
	return "block"
}

// asked: the perform-maintenance label stands on n. Only a person or the
// aggregator may write it; the node's own state, that a manual
// maintenance is under way, is its word alone.
func asked(n *corev1.Node) error {
	if v, ok := n.Labels[protocol.LabelPerformMaintenance]; !ok || v != protocol.TriggerValue {
		return fmt.Errorf("no one asked for the node's maintenance: the label %s=%s is not on it", protocol.LabelPerformMaintenance, protocol.TriggerValue)
	}
	return nil
}

// approvedFor: the approval names request id, the one repair it buys. An
// approval that names none (written by an aggregator before approvals
// named their request) buys none: the next pass approves the repair again.
func approvedFor(approval protocol.RepairApproval, id string) error {
	if approval.Request != id {
		return fmt.Errorf("the repair approved on the node is for request %q, not %q", approval.Request, id)
	}
	return nil
}

// groupDrained says why the group of caller (its Nodes, caller's
// included) is not drained for the group's maintenance: nil when every
// other member is (lifecycle.SliceDrained, as the caller's agent reads
// it); errGroupDraining while every member that is not is draining for
// it; else an error naming a member that is not in the maintenance, or
// whose drain ended with pods left.
func groupDrained(caller string, group []*corev1.Node, now time.Time) error {
	hosts := make([]protocol.SliceHost, 0, len(group))
	byName := map[string]protocol.SliceHost{}
	for _, m := range group {
		h := protocol.SliceHostOf(m)
		hosts = append(hosts, h)
		byName[h.Name] = h
	}
	waiting, incomplete, _ := lifecycle.SliceDrained(hosts, caller, now)
	if len(incomplete) > 0 {
		return fmt.Errorf("the reservation group's member %s ended its drain with pods still on it", incomplete[0])
	}
	for _, name := range waiting {
		if h := byName[name]; h.Phase != protocol.PhaseDraining {
			return fmt.Errorf("the reservation group's member %s is not drained (it has no maintenance under way): its workload may be running", name)
		}
	}
	if len(waiting) > 0 {
		return errGroupDraining
	}
	return nil
}

// instanceOf is the VM n's spec.providerID names, which must carry the
// Node's own name (on Compute Engine a Node is named after its VM), in
// home's project and one of its regions: a Node recreated by its kubelet
// under another VM's identity, or naming a VM of its own name in another
// project or region the aggregator's identity can reach, names a VM that
// is not its own.
func instanceOf(n *corev1.Node, home Home) (compute.Instance, error) {
	inst, err := compute.InstanceFromProviderID(n.Spec.ProviderID)
	if err != nil {
		return inst, err
	}
	if inst.Name != n.Name {
		return inst, fmt.Errorf("the Node %s names the VM %s in its providerID, not its own", n.Name, inst)
	}
	return inst, home.holds(inst)
}

// expirePlaces frees the places under the caps that nodes hold by an
// accepted call of the relay's alone, once each call's place has ended
// (fleet.Node.ExpireVouched), and those of repairs whose place has ended
// (fleet.Node.ExpireRepair, with grace for the agent's ask), for the pass
// at now. It returns when the next repair's place ends (zero: none), for
// a pass to be due then.
func expirePlaces(nodes *fleet.Fleet, now time.Time, grace time.Duration) (next time.Time) {
	for _, v := range nodes.All() {
		if !v.VouchedUntil.IsZero() && !now.Before(v.VouchedUntil) {
			nodes.Amend(v.Name, func(v *fleet.Node) { v.ExpireVouched(now) })
		}
		if !v.InRepair() {
			continue
		}
		switch until := v.RepairPlaceUntil(grace); {
		case until.IsZero():
		case !now.Before(until):
			nodes.Amend(v.Name, func(v *fleet.Node) { v.ExpireRepair(now, grace) })
		case next.IsZero() || until.Before(next):
			next = until
		}
	}
	return next
}

// group lists the Nodes of n's reservation group as the leader's cache
// holds them, n included (nil when n is in none): the group the leader
// itself counts n in, of the members its read of their VMs proves (a
// node labelled into the group is no member: it can neither hold the
// group's call back nor be counted in it). A group call is made only
// where Compute Engine counts as many hosts in use, and only once every
// other member is drained (vouch).
func (r *relay) group(n *corev1.Node) []*corev1.Node {
	g := r.a.opts.grouping()
	grp := g.GroupOf(n)
	if grp.Kind != protocol.GroupReservation {
		return nil
	}
	var out []*corev1.Node
	for _, o := range r.a.nodes.List() {
		if m, ok := o.(*corev1.Node); ok && g.Name(m) == grp.Name && (m.Name == n.Name || g.Unproven(m) == "") {
			out = append(out, m)
		}
	}
	return out
}

// withdrawApproval is the patch that writes an answer (key, value) and
// withdraws the repair's approval.
func withdrawApproval(key, value string) []byte {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value, protocol.AnnotationFaultRepair: nil}}})
	return patch
}
