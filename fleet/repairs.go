package fleet

// A repair's place under its pool's maxInRepair, and for how long it holds
// (RepairPlaceUntil); the order in which a pool's faulty nodes take its
// places (queue); and what its repairRate counts (repairsCounted): each
// from what the aggregator itself wrote, never a node's word alone.

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// queue orders a pool's faults for its places: a person's requests
// first; then the nodes whose VM the aggregator approved a repair of least
// recently (never first), so that a node faulty again and again, on its
// own word or not, cannot keep the others waiting; then the oldest fault;
// then by name.
func queue(a, b Fault) int {
	pa, pb := a.Approval.Source == protocol.FaultSourcePerson, b.Approval.Source == protocol.FaultSourcePerson
	switch {
	case pa != pb && pa:
		return -1
	case pa != pb:
		return 1
	}
	if c := a.LastApproved.Compare(b.LastApproved); c != 0 {
		return c
	}
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	return strings.Compare(a.Node, b.Node)
}

// LastApproved is when the aggregator last approved a repair of n's VM,
// in any pool, by its record on the Node, the record it kept of a Node
// deleted (kept), or an approval whose write was refused (zero: never, as
// far as its records go).
func (n *Node) LastApproved(kept Kept) time.Time {
	last := n.ApprovalRefused
	for _, approved := range []map[string]time.Time{n.Approved, kept[n.Name]} {
		for _, at := range approved {
			if at.After(last) {
				last = at
			}
		}
	}
	return last
}

// repairsCounted is, for each of pools with a repairRate, how many
// repairs it counts now: only what the aggregator itself approved. A node
// counts against a pool (once, however many times it was repaired there
// within the window) when
//   - the aggregator approved a repair of its VM in that pool within the
//     pool's window (its record on the Node, Node.Approved, or kept
//     from a Node deleted, kept): against the pool where the repair was
//     approved, whatever pool the Node names now, so that a node that
//     registers again under another pool's label neither empties its
//     pool's count nor fills the other's;
//   - or, in its own pool, it is in repair or claimed (a deposed
//     leader's approval may still land, as maxInRepair counts them).
//
// What the node's agent says of its last repair (Node.LastRepair) is
// never counted: an agent that writes a repair ending "now" again and
// again would hold a place of its pool's for ever.
func repairsCounted(now time.Time, cfg policy.Config, pools []string, byPool func(string) []*Node, kept Kept) map[string]int {
	window := make(map[string]time.Duration, len(pools))
	for _, pool := range pools {
		if s := cfg.Faults(pool); s.RateCount > 0 {
			window[pool] = s.RateWindow
		}
	}
	counted := map[string]map[string]bool{}
	count := func(pool, node string) {
		if counted[pool] == nil {
			counted[pool] = map[string]bool{}
		}
		counted[pool][node] = true
	}
	approvals := func(node string, approved map[string]time.Time) {
		for pool, at := range approved {
			if w, ok := window[pool]; ok && now.Sub(at) < w {
				count(pool, node)
			}
		}
	}
	for _, pool := range pools {
		for _, n := range byPool(pool) {
			if _, ok := window[pool]; ok && (n.InRepair() || n.Claimed) {
				count(pool, n.Name)
			}
			approvals(n.Name, n.Approved)
		}
	}
	for node, approved := range kept {
		approvals(node, approved)
	}
	used := make(map[string]int, len(counted))
	for pool, nodes := range counted {
		used[pool] = len(nodes)
	}
	return used
}

// BelievableRepair: last is a repair that ended (it has an outcome) no
// later than now. The agent writes how its node's last repair ended; one
// that ends in the future is not believed (the aggregator says so as of
// an unreadable key).
func BelievableRepair(last protocol.LastFaultRepair, now time.Time) bool {
	return last.Outcome != "" && !last.Ended.After(now)
}

// AnswerWithin bounds the wait for the relay's answer to a report asked
// for within the approval's drain timeout and grace: the relay makes a
// call within 5 minutes, retries included, and writes its answer at once;
// an answer that cannot be written (a Node filled to its limit) is not
// waited for longer.
const AnswerWithin = 15 * time.Minute

// RepairPlaceUntil is when the node's repair stops holding a place of its
// pool's: an approval whose report the agent has asked for holds it until
// the relay's answer withdraws it, AnswerWithin past the ask's deadline at
// most;
// one GKE's flow took on, VouchedFor from the approval; any other, its
// drain timeout and grace after the approval: an agent that asks nothing
// by then (it never drained, or it lies) holds no place for ever. A
// repair whose report the relay accepted holds it until the answer's
// bound.
func (v *Node) RepairPlaceUntil(grace time.Duration) time.Time {
	switch {
	case v.Repair == nil:
		return v.ReportUntil
	case v.RepairAsked:
		return v.Repair.Approved.Add(time.Duration(v.Repair.DrainTimeout) + grace + AnswerWithin)
	case v.GKEFlow:
		return v.Repair.Approved.Add(protocol.VouchedFor)
	default:
		return v.Repair.Approved.Add(time.Duration(v.Repair.DrainTimeout) + grace)
	}
}

// ExpireRepair: a node whose repair's place has ended (RepairPlaceUntil,
// with grace for the agent's ask after its drain) holds it no longer, nor
// a place under the voluntary caps for it; an approval that lapsed is
// withdrawn (FaultPlan.Lapsed).
func (v *Node) ExpireRepair(now time.Time, grace time.Duration) {
	if until := v.RepairPlaceUntil(grace); v.InRepair() && !until.IsZero() && !now.Before(until) {
		v.RepairLapsed = true
		v.Voluntary, v.VouchedUntil = v.VoluntaryBesidesRepair, v.VouchedBesidesRepair
	}
}

// reportPlaceUntil is until when the report of n's repair under way (its
// request), which the relay accepted in n's present boot, holds a place
// (zero: none): the answer's bound, or sooner, ReportReturn after the
// report's operation ended, as the relay followed it. The operation of
// instances.reportHostAsFaulty is to "mark the host as faulty and try to
// restart the instance on a new host" (the Compute Engine API's
// description of the method): once it has ended, the repair is over but
// for the node's return.
func reportPlaceUntil(n *corev1.Node, request string) time.Time {
	until, ok := protocol.AcceptedCall(n, request)
	if !ok {
		return time.Time{}
	}
	if ans, _ := protocol.ReadComputeAnswer(n); ans.Done && !ans.Ended.IsZero() {
		if back := ans.Ended.Add(ReportReturn); back.Before(until) {
			return back
		}
	}
	return until
}

// ReportReturn is how long after its report's operation ended a repaired
// node may take to come back (its VM restarted on a new host, its kubelet
// and agent up again) and still hold its place.
const ReportReturn = 30 * time.Minute

// repairAsked: n's agent asked the relay for the report approval buys,
// and the relay has not answered it.
func repairAsked(n *corev1.Node, approval protocol.RepairApproval) bool {
	c, ok := protocol.ReadComputeCall(n)
	if !ok || approval.Request == "" || c.ID != approval.Request || c.Method != protocol.CallReportHostAsFaulty {
		return false
	}
	ans, answered := protocol.ReadComputeAnswer(n)
	return !answered || ans.ID != c.ID
}

// gkeFlowTook: GKE's report-and-replace flow has taken the approved
// repair on: its operation label, which GKE writes and no node may, names
// an operation other than the one on the Node when the repair was
// approved.
func gkeFlowTook(n *corev1.Node, approval protocol.RepairApproval) bool {
	op := n.Labels[protocol.LabelReportAndReplaceOperation]
	return op != "" && op != approval.GKEOperationBefore
}
