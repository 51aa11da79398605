package fleet

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/window"
)

// Reason is why a node was decided about as it was: the reason label of
// decisions_total, and what the Events' wording explains.
type Reason string

// The reasons for a decision about a node.
const (
	ReasonTriggered        Reason = "triggered"
	ReasonNotIdle          Reason = "not_idle"
	ReasonNotEvictable     Reason = "safe_to_evict"
	ReasonIdleTooShort     Reason = "idle_too_short"
	ReasonMinNodes         Reason = "min_nodes"
	ReasonOutsideWindow    Reason = window.ReasonOutsideWindow
	ReasonExcluded         Reason = window.ReasonExcluded
	ReasonOptedOut         Reason = "opted_out"
	ReasonNotReschedulable Reason = "not_reschedulable"
	ReasonTooEarly         Reason = "too_early"
	ReasonNotReady         Reason = "not_ready"
	ReasonSliceIncomplete  Reason = "slice_incomplete"
	ReasonInvalidConfig    Reason = "invalid_config"
	// ReasonCoolingDown: the node's last voluntary maintenance failed, and
	// its cool-down (written by its agent) has not passed.
	ReasonCoolingDown Reason = "cooling_down"
	// ReasonGKEHandles: GKE's own maintenance handler acts on the node's
	// opportunistic-config annotation (GKE 1.31 and later).
	ReasonGKEHandles Reason = "gke_handles"
	// ReasonMaxVoluntary: the pool's or the cluster's cap on nodes in
	// voluntary maintenance at once is reached.
	ReasonMaxVoluntary Reason = "max_voluntary"
	// ReasonAutoscaled: the cluster autoscaler manages the pool, and the
	// policy does not opt in to opportunistic maintenance there.
	ReasonAutoscaled Reason = "cluster_autoscaler"
	// ReasonUnreadable: the node's agent wrote values the aggregator cannot
	// read (protocol.Unreadable).
	ReasonUnreadable Reason = "unreadable"
	// ReasonEndsSoon: the node's VM has a known end (a time limit) before
	// its maintenance window closes, or within KnownEndQuiet: maintaining
	// it early would cost its workloads a drain for a VM about to go.
	ReasonEndsSoon Reason = "ends_soon"
)

// KnownEndQuiet: a node whose VM ends within this long is not picked for
// opportunistic maintenance (ReasonEndsSoon).
const KnownEndQuiet = 6 * time.Hour

// Decision is what the aggregator decided about one node with a pending
// notice.
type Decision struct {
	Node   string
	UID    types.UID
	Reason Reason
	// message says why, for the Node's Event: written only when asked
	// (Message), as a pass decides about every node with a pending notice
	// and announces only the decisions that changed. skipped: it says why
	// the node was not picked.
	message func() string
	skipped bool
}

// Message says why, for the Node's Event.
func (d Decision) Message() string {
	if d.skipped {
		return "Not picked for opportunistic maintenance: " + d.message()
	}
	return d.message()
}

// PoolPlan is one pool's pass.
type PoolPlan struct {
	Pool string
	// Configured: the pool has opportunistic maintenance configured (valid
	// or not). Unconfigured pools get no decisions.
	Configured bool
	Setting    policy.Opportunistic
	// ConfigErr is why the pool's configuration is invalid; ConfigNodes
	// are the nodes whose annotation it came from.
	ConfigErr   error
	ConfigNodes []string
	Decisions   []Decision
	// Trigger lists the nodes to trigger now.
	Trigger []string
	// For the pool's gauges; Voluntary are the nodes in voluntary
	// (manual or opportunistic) maintenance, which the caps count.
	Nodes, Pending, Idle, InMaintenance, Voluntary int
	// NextMaintenance is the earliest pending window start (zero if none).
	NextMaintenance time.Time
	// Autoscaled: the cluster autoscaler manages the pool (detected or
	// declared).
	Autoscaled bool
	// Budget is the pool's cap on nodes in voluntary maintenance
	// (policy.Config.PoolBudget).
	Budget policy.Budget
	// ID names a plan a Fleet made (0: Decide's). Since, where it is not
	// 0, is the ID of the pool's plan before this one, and Changed and
	// Dropped say how this one differs from it: its decisions (indexes
	// into Decisions, in order) new or of another reason, and the nodes
	// it no longer decides about. Who told that plan tells this one by
	// these alone.
	ID, Since uint64
	Changed   []int
	Dropped   []string
}

// Decide is one pass over every node: for each pool, which nodes to trigger
// now and why every other node with a pending notice is not triggered. It
// is a pure function of what is on the Nodes, the configuration and now.
func Decide(now time.Time, cfg policy.Config, nodes []Node) []PoolPlan {
	// The nodes grouped by pool (pointers into the caller's slice, which
	// is left as it is), each pool's sorted by name.
	all := make([]*Node, len(nodes))
	byPool := map[string][]*Node{}
	for i := range nodes {
		all[i] = &nodes[i]
		byPool[nodes[i].Pool] = append(byPool[nodes[i].Pool], all[i])
	}
	pools := make([]string, 0, len(byPool))
	for p, members := range byPool {
		pools = append(pools, p)
		sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
	}
	sort.Strings(pools)
	// The cluster's cap on voluntary maintenance, shared by the pools in
	// order.
	clusterLeft := cfg.ClusterBudget().Of(len(nodes)) - countVoluntary(all)
	plans := make([]PoolPlan, 0, len(pools))
	for _, pool := range pools {
		plans = append(plans, decidePool(now, cfg, pool, byPool[pool], &clusterLeft, nil).plan)
	}
	return plans
}

func pending(n *Node) bool {
	return n.NoticePresent && n.Notice.Status == maintenance.StatusPending
}

// countVoluntary counts the nodes in voluntary maintenance: a multi-host
// slice one proven host of which is in one counts every proven host, since
// the slice goes down whole; an unproven host (Node.SliceUnproven) counts
// only itself, and only when it is in one itself.
func countVoluntary(nodes []*Node) int {
	n := 0
	var down map[string]bool // read as empty while nil
	for _, v := range nodes {
		if v.Voluntary && v.Slice != "" && !v.SliceUnproven {
			if down == nil {
				down = map[string]bool{}
			}
			down[v.Slice] = true
		}
	}
	for _, v := range nodes {
		if v.Voluntary || down[v.Slice] && !v.SliceUnproven {
			n++
		}
	}
	return n
}
