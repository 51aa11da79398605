package fleet

// Faulty nodes: which nodes are faulty (a person's request, or a detector's
// condition held for the policy's duration), which of them start their
// repair now, within each pool's cap, and why the others wait.

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// FaultReason is why a faulty node's repair waits (the reason label of
// fault_decisions_total).
type FaultReason string

const (
	// FaultApproved: the repair starts now.
	FaultApproved FaultReason = "approved"
	// FaultMaxInRepair: the pool's cap on nodes in repair is reached.
	FaultMaxInRepair FaultReason = "max_in_repair"
	// FaultUnderWay: another maintenance is under way on the node; the
	// repair waits for it to end (the VM may come back repaired).
	FaultUnderWay FaultReason = "maintenance_under_way"
	// FaultCoolingDown: the node's last repair ended less than the pool's
	// cool-down ago (a person's request is held by it only after a repair
	// that failed).
	FaultCoolingDown FaultReason = "cooling_down"
	// FaultInvalidRequest: the request label names no fault behavior.
	FaultInvalidRequest FaultReason = "invalid_request"
	// FaultRateLimited: the pool's repairRate is used up.
	FaultRateLimited FaultReason = "rate_limited"
	// FaultLapsed: the node's approval lapsed unused, and was withdrawn
	// (Node.ExpireRepair).
	FaultLapsed FaultReason = "approval_lapsed"
)

// FaultReasons lists them.
var FaultReasons = []FaultReason{FaultApproved, FaultMaxInRepair, FaultUnderWay, FaultCoolingDown, FaultInvalidRequest, FaultRateLimited, FaultLapsed}

// Fault is one faulty node and what the pass decided about it.
type Fault struct {
	Node string
	UID  types.UID
	Pool string
	// Reason is the decision; Approval, for an approved one, is what the
	// node's agent is given; Message says it in words, for the Event.
	Reason   FaultReason
	Approval protocol.RepairApproval
	Message  string
	// Since is when the fault began, as the aggregator can tell (a
	// condition's transition, no earlier than the aggregator first saw
	// it; zero for a person's request or a prediction), and LastApproved
	// when the aggregator last approved a repair of the node's VM: a pool
	// takes its faults in that order (queue).
	Since, LastApproved time.Time
}

// FaultPlan is one pass's decision about faulty nodes.
type FaultPlan struct {
	// Faults are the faulty nodes not in repair, each with its decision,
	// sorted by pool and name.
	Faults []Fault
	// Untaint are the nodes that carry the faulty taint and are neither
	// faulty nor in repair any more.
	Untaint []string
	// InRepair counts each pool's nodes in repair.
	InRepair map[string]int
	// NextCheck is the earliest time a condition that holds now reaches
	// its policy's duration (zero for none): a pass is due then.
	NextCheck time.Time
	// Unbelievable are the nodes whose last repair, as their agent wrote
	// it, ends after now (BelievableRepair): said as an unreadable value
	// (no agent's word counts toward a pool's repairRate anyway).
	Unbelievable []string
	// Lapsed are the nodes whose approval lapsed unused
	// (Node.ExpireRepair), each with its decision FaultLapsed: the
	// aggregator withdraws it.
	Lapsed []Fault
}

// DecideFaults decides about every faulty node: a pure function of what
// is on the Nodes, the configuration and now. A faulty node is tainted
// whatever the decision (no new pod lands on it). Its repair is approved
// when no other maintenance is under way on it, its last repair ended at
// least the pool's cool-down ago (a person's request after a repair that
// went through is not held by it), and the pool has
// fewer nodes in repair than its cap; within a pool a person's requests
// come first, then by name. min-nodes does not hold a repair back: a
// faulty node is no capacity to keep.
func DecideFaults(now time.Time, cfg policy.Config, nodes []Node) FaultPlan {
	byPool := map[string][]*Node{}
	for i := range nodes {
		byPool[nodes[i].Pool] = append(byPool[nodes[i].Pool], &nodes[i])
	}
	pools := make([]string, 0, len(byPool))
	for p := range byPool {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	return decideFaults(now, cfg, pools, func(pool string) []*Node { return byPool[pool] }, nil)
}

// Kept is the aggregator's record of the repairs it approved of VMs by
// the name of their Node, kept past the Node object's deletion: node ->
// pool -> when it last approved one there (protocol.Repairs.Approved).
type Kept map[string]map[string]time.Time

// DecideFaults is DecideFaults over the fleet's nodes: over the pools one
// of whose nodes may take part in it (faultRelevant), as no other pool has
// anything to decide, count or undo. kept are the approvals the
// aggregator recorded of Nodes deleted (and perhaps created again): their
// pools' repairRate counts them until they expire, as if on the Nodes.
func (f *Fleet) DecideFaults(now time.Time, cfg policy.Config, kept Kept) FaultPlan {
	return decideFaults(now, cfg, f.markedPools(markFault), func(pool string) []*Node { return f.pools[pool].members() }, kept)
}

// faultRelevant: n may take part in the faults' decision: it is in repair
// or claimed (counted), tainted faulty (to untaint), asked for a repair,
// predicted to degrade, carries a fault detector's condition, or a repair
// the aggregator approved in another pool than its own (counted there).
func faultRelevant(n *Node) bool {
	return n.InRepair() || n.Claimed || n.FaultTaint || n.ReportFaultySet || n.PredictedToDegrade || len(n.Conditions) > 0 || approvedElsewhere(n)
}

// approvedElsewhere: the aggregator approved a repair of n's VM in a pool
// other than the one its Node names now.
func approvedElsewhere(n *Node) bool {
	for pool := range n.Approved {
		if pool != n.Pool {
			return true
		}
	}
	return false
}

// decideFaults is DecideFaults over pools (sorted), each of whose nodes
// members gives; kept, the approvals recorded of Nodes deleted.
func decideFaults(now time.Time, cfg policy.Config, pools []string, byPool func(string) []*Node, kept Kept) FaultPlan {
	plan := FaultPlan{InRepair: map[string]int{}}
	rateUsed := repairsCounted(now, cfg, pools, byPool, kept)
	for _, pool := range pools {
		for _, n := range byPool(pool) {
			if n.InRepair() || n.Claimed {
				plan.InRepair[pool]++
			}
		}
	}
	for _, pool := range pools {
		members := byPool(pool)
		setting := cfg.Faults(pool)
		left := setting.MaxInRepair.Of(len(members)) - plan.InRepair[pool]
		rateLeft := setting.RateCount - rateUsed[pool]
		var faulty []Fault
		for _, n := range members {
			if n.LastRepair.Outcome != "" && !BelievableRepair(n.LastRepair, now) {
				plan.Unbelievable = append(plan.Unbelievable, n.Name)
			}
			if n.Repair != nil && n.RepairLapsed {
				plan.Lapsed = append(plan.Lapsed, Fault{Node: n.Name, UID: n.UID, Pool: pool, Reason: FaultLapsed, Approval: *n.Repair,
					Message: fmt.Sprintf("The approval of the node's repair (%s, %s: %s), given at %s, lapsed: its agent asked for no report within the drain timeout (%s) and the grace after it; it is withdrawn, and the node holds no place of the pool %s",
						n.Repair.Behavior, n.Repair.Source, n.Repair.Signal, n.Repair.Approved.UTC().Format(time.RFC3339), time.Duration(n.Repair.DrainTimeout), pool)})
			}
			if n.Claimed && !n.InRepair() {
				continue // decided when its claimed write is resolved
			}
			if n.InRepair() {
				continue
			}
			f, ok := faultOf(now, setting, n, n.LastApproved(kept), &plan.NextCheck)
			if !ok {
				if n.FaultTaint {
					plan.Untaint = append(plan.Untaint, n.Name)
				}
				continue
			}
			faulty = append(faulty, f)
		}
		sort.SliceStable(faulty, func(i, j int) bool { return queue(faulty[i], faulty[j]) < 0 })
		for _, f := range faulty {
			if f.Reason == FaultApproved {
				switch {
				case rateLeft <= 0 && setting.RateCount > 0:
					f.Reason = FaultRateLimited
					f.Message = fmt.Sprintf("The node is faulty (%s, %s: %s); its repair waits: the pool %s had %d repair(s) in the last %s, its repairRate %d/%s",
						f.Approval.Behavior, f.Approval.Source, f.Approval.Signal, pool, rateUsed[pool], setting.RateWindow, setting.RateCount, setting.RateWindow)
				case left <= 0:
					f.Reason = FaultMaxInRepair
					f.Message = fmt.Sprintf("The node is faulty (%s, %s: %s); its repair waits: the pool %s has %d node(s) in repair, its cap (maxInRepair %s)",
						f.Approval.Behavior, f.Approval.Source, f.Approval.Signal, pool, plan.InRepair[pool], setting.MaxInRepair)
				default:
					left--
					rateLeft--
					plan.InRepair[pool]++
					f.Approval.Approved, f.Approval.DrainTimeout, f.Approval.With = now, protocol.Duration(setting.DrainTimeout), setting.RepairWith
					f.Message = fmt.Sprintf("The node is faulty (%s, %s: %s); its repair is approved: its agent drains it (by %s) and asks Compute Engine to repair the host",
						f.Approval.Behavior, f.Approval.Source, f.Approval.Signal, setting.DrainTimeout)
				}
			}
			plan.Faults = append(plan.Faults, f)
		}
	}
	return plan
}

// faultOf is n's fault, if it is faulty and not in repair: a person's
// request first, else the first of the policy's conditions that has held
// for its duration (next moves to when one that holds will have);
// lastApproved is when the aggregator last approved its repair
// (Node.LastApproved). Its Reason is FaultApproved unless something other
// than the cap holds it.
func faultOf(now time.Time, setting policy.Faults, n *Node, lastApproved time.Time, next *time.Time) (Fault, bool) {
	f := Fault{Node: n.Name, UID: n.UID, Pool: n.Pool, Reason: FaultApproved, LastApproved: lastApproved}
	switch {
	case n.ReportFaultySet && !protocol.ValidBehavior(n.ReportFaulty):
		f.Reason = FaultInvalidRequest
		f.Message = fmt.Sprintf("The label %s=%q names no fault behavior (want one of %s); it was removed and nothing else changed",
			protocol.LabelReportFaulty, n.ReportFaulty, strings.Join(protocol.FaultBehaviors, ", "))
		return f, true
	case n.ReportFaultySet:
		signal := "a person labelled the node " + protocol.LabelReportFaulty + "=" + n.ReportFaulty
		if n.ReportDescription != "" {
			signal += ": " + n.ReportDescription
		}
		f.Approval = protocol.RepairApproval{Behavior: n.ReportFaulty, Source: protocol.FaultSourcePerson, Signal: signal}
	default:
		c, ok := heldCondition(now, setting, n, next)
		switch {
		case ok:
			f.Since = c.since
			f.Approval = protocol.RepairApproval{Behavior: c.Behavior, Source: protocol.FaultSourceCondition,
				Signal: fmt.Sprintf("the node condition %s has been %s for %s or more", c.Type, c.Status, c.For)}
		case setting.Prediction != "" && n.PredictedToDegrade && !n.IdleSince.IsZero() && n.Busy == "":
			// Acted on for idle nodes only, as opportunistic maintenance
			// is: a prediction is no failure, and a busy node's work is
			// worth more than the hours it may have left.
			f.Approval = protocol.RepairApproval{Behavior: setting.Prediction, Source: protocol.FaultSourcePrediction,
				Signal: fmt.Sprintf("GKE's node health prediction %s=false (likely to degrade within five hours), and the node is idle", protocol.LabelHealthPrediction)}
		default:
			return Fault{}, false
		}
	}
	switch {
	case n.Underway:
		// Another maintenance (or a request for one) is under way.
		f.Reason = FaultUnderWay
		f.Message = fmt.Sprintf("The node is faulty (%s, %s: %s); its repair waits for the maintenance under way to end", f.Approval.Behavior, f.Approval.Source, f.Approval.Signal)
	case n.Phase == protocol.PhaseDraining || n.Phase == protocol.PhaseTerminating:
		f.Reason = FaultUnderWay
		f.Message = fmt.Sprintf("The node is faulty (%s, %s: %s); its repair waits for the %s under way to end", f.Approval.Behavior, f.Approval.Source, f.Approval.Signal, n.Reason)
	case n.LastRepair.Outcome != "" && n.LastRepair.Outcome != protocol.RepairOvertaken && now.Before(n.LastRepair.Ended.Add(setting.Cooldown)) &&
		(f.Approval.Source != protocol.FaultSourcePerson || n.LastRepair.Outcome != protocol.RepairDone):
		// A person's request after a repair is a new one (the repair
		// removed the last): it is not held; one that stood through a
		// repair that failed is, as a detector's is. A repair another
		// maintenance overtook neither failed nor repaired: not held.
		f.Reason = FaultCoolingDown
		until := n.LastRepair.Ended.Add(setting.Cooldown)
		f.Message = fmt.Sprintf("The node is faulty (%s, %s: %s); its last repair ended (%s) at %s, and another waits for the pool's cool-down, until %s",
			f.Approval.Behavior, f.Approval.Source, f.Approval.Signal, n.LastRepair.Outcome, n.LastRepair.Ended.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
		wake(next, until)
	case f.Approval.Source != protocol.FaultSourcePerson && now.Before(f.LastApproved.Add(setting.Cooldown)):
		// A detector's condition may be the node's own word (its agent's,
		// or a detector's whose token it holds), which it may keep
		// writing however its repairs end: the aggregator's own record of
		// its last approval holds the next one back, so that the node
		// takes a place of its pool's at most once per cool-down.
		f.Reason = FaultCoolingDown
		until := f.LastApproved.Add(setting.Cooldown)
		f.Message = fmt.Sprintf("The node is faulty (%s, %s: %s); its repair was last approved at %s, and another on a detector's or a prediction's word waits for the pool's cool-down, until %s",
			f.Approval.Behavior, f.Approval.Source, f.Approval.Signal, f.LastApproved.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
		wake(next, until)
	}
	return f, true
}

// wake moves next to at, when at is earlier (or next is zero).
func wake(next *time.Time, at time.Time) {
	if next.IsZero() || at.Before(*next) {
		*next = at
	}
}

// Stale: c was last written before the node's last repair ended, and
// that repair was done (the VM went through it). A repair that failed
// repaired nothing, and the condition it was approved on still holds.
func Stale(c Condition, last protocol.LastFaultRepair) bool {
	return last.Outcome == protocol.RepairDone && !c.Written.After(last.Ended)
}

// heldCondition is the first of setting's conditions n has held for its
// duration; a condition that holds and has not yet moves next to when it
// will have. A condition its detector has not written since the node's
// last repair was done is stale, and does not count: the repair's drain may
// have evicted the detector, which then never came back to clear it.
func heldCondition(now time.Time, setting policy.Faults, n *Node, next *time.Time) (heldFor, bool) {
	for _, want := range setting.Conditions {
		for _, c := range n.Conditions {
			if c.Type != want.Type || c.Status != want.Status || Stale(c, n.LastRepair) {
				continue
			}
			at := c.Since.Add(want.For)
			if !now.Before(at) {
				return heldFor{want, c.Since}, true
			}
			wake(next, at)
		}
	}
	return heldFor{}, false
}

// heldFor is a fault policy's condition a node holds, since when.
type heldFor struct {
	policy.FaultCondition
	since time.Time
}
