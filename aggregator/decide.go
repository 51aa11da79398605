package aggregator

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/window"
)

// Reasons for a decision about a node (the reason label of
// decisions_total, and the Events' wording).
const (
	ReasonTriggered        = "triggered"
	ReasonNotIdle          = "not_idle"
	ReasonNotEvictable     = "safe_to_evict"
	ReasonIdleTooShort     = "idle_too_short"
	ReasonMinNodes         = "min_nodes"
	ReasonOutsideWindow    = window.ReasonOutsideWindow
	ReasonExcluded         = window.ReasonExcluded
	ReasonOptedOut         = "opted_out"
	ReasonNotReschedulable = "not_reschedulable"
	ReasonTooEarly         = "too_early"
	ReasonNotReady         = "not_ready"
	ReasonSliceIncomplete  = "slice_incomplete"
	ReasonInvalidConfig    = "invalid_config"
	// ReasonCoolingDown: the node's last voluntary maintenance failed, and
	// its cool-down (written by its agent) has not passed.
	ReasonCoolingDown = "cooling_down"
	// ReasonGKEHandles: GKE's own maintenance handler acts on the node's
	// opportunistic-config annotation (GKE 1.31 and later).
	ReasonGKEHandles = "gke_handles"
	// ReasonMaxVoluntary: the pool's or the cluster's cap on nodes in
	// voluntary maintenance at once is reached.
	ReasonMaxVoluntary = "max_voluntary"
	// ReasonAutoscaled: the cluster autoscaler manages the pool, and the
	// policy does not opt in to opportunistic maintenance there.
	ReasonAutoscaled = "cluster_autoscaler"
	// ReasonUnreadable: the node's agent wrote values the aggregator cannot
	// read (protocol.Unreadable).
	ReasonUnreadable = "unreadable"
)

// Decision is what the aggregator decided about one node with a pending
// notice.
type Decision struct {
	Node   string
	UID    types.UID
	Reason string
	// message says why, for the Node's Event: written only when asked
	// (Message), as a pass decides about every node with a pending notice
	// and announces only the decisions that changed.
	message func() string
}

// Message says why, for the Node's Event.
func (d Decision) Message() string { return d.message() }

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
		plans = append(plans, decidePool(now, cfg, pool, byPool[pool], &clusterLeft))
	}
	return plans
}

func pending(n *Node) bool {
	return n.NoticePresent && n.Notice.Status == metadata.StatusPending
}

// countVoluntary counts the nodes in voluntary maintenance: a multi-host
// slice one host of which is in one counts every host, since the slice
// goes down whole.
func countVoluntary(nodes []*Node) int {
	n := 0
	down := map[string]bool{}
	for _, v := range nodes {
		if v.Voluntary && v.Slice != "" {
			down[v.Slice] = true
		}
	}
	for _, v := range nodes {
		if v.Voluntary || down[v.Slice] {
			n++
		}
	}
	return n
}

// decidePool decides one pool's nodes, sorted by name.
func decidePool(now time.Time, cfg policy.Config, pool string, nodes []*Node, clusterLeft *int) PoolPlan {
	plan := PoolPlan{Pool: pool, Nodes: len(nodes), Voluntary: countVoluntary(nodes)}
	available := 0
	for _, n := range nodes {
		if n.Ready && !n.InMaintenance {
			available++
		}
		if n.InMaintenance {
			plan.InMaintenance++
		}
		if !n.IdleSince.IsZero() && n.Busy == "" {
			plan.Idle++
		}
		if pending(n) && !n.InMaintenance {
			plan.Pending++
			if plan.NextMaintenance.IsZero() || n.Notice.WindowStart.Before(plan.NextMaintenance) {
				plan.NextMaintenance = n.Notice.WindowStart
			}
		}
	}
	setting, configured, err := poolSetting(cfg, pool, nodes, &plan)
	plan.Configured, plan.Setting = configured, setting
	slices := sliceMembers(nodes)
	plan.Budget = cfg.PoolBudget(pool, setting, len(slices) > 0)
	groups := groupNames(nodes)
	plan.Autoscaled = cfg.Autoscaled(pool, len(groups) > 0)
	decide := func(n *Node, reason string, msg func() string) {
		plan.Decisions = append(plan.Decisions, Decision{Node: n.Name, UID: n.UID, Reason: reason, message: msg})
	}
	text := func(s string) func() string { return func() string { return s } }
	if !configured {
		// Said once per node: the pool's annotation is GKE's to act on.
		for _, n := range nodes {
			if n.GKEHandled && n.Config != "" && pending(n) && !n.InMaintenance {
				decide(n, ReasonGKEHandles, text("Not picked by maintenance-handler's aggregator: GKE's own maintenance handler acts on "+protocol.AnnotationOpportunisticConfig+" on this node (GKE 1.31 and later), and two controllers must not pick nodes. Configure the pool in the aggregator's policy ConfigMap, or run it with --gke-opportunistic-config=adopt, to have it act instead."))
			}
		}
		return plan
	}
	if err != nil {
		plan.ConfigErr = err
		for _, n := range nodes {
			if pending(n) && !n.InMaintenance {
				decide(n, ReasonInvalidConfig, func() string {
					return fmt.Sprintf("Not picked for opportunistic maintenance: the pool's configuration is invalid: %v", err)
				})
			}
		}
		return plan
	}
	if plan.Autoscaled && !cfg.AllowAutoscaled(pool) {
		how := "declared autoscaled in the policy ConfigMap"
		if len(groups) > 0 {
			how = "its node group " + strings.Join(groups, ", ") + " is in the autoscaler's status"
		}
		for _, n := range nodes {
			if pending(n) && !n.InMaintenance {
				decide(n, ReasonAutoscaled, func() string {
					return fmt.Sprintf("Not picked for opportunistic maintenance: the cluster autoscaler manages the pool %s (%s) and removes idle nodes itself, and GKE documents opportunistic maintenance as incompatible with it. Set opportunisticWhenAutoscaled: true for the pool in the policy ConfigMap to have it act anyway.", pool, how)
				})
			}
		}
		return plan
	}
	block, blockDetail := cfg.Policy(pool).Blocks(now)
	pc, inPolicy := cfg.Pools[pool]
	fromPolicy := inPolicy && pc.Opportunistic != nil
	// eligible checks one node; "" means it may be triggered now.
	eligible := func(n *Node) (string, func() string) {
		// Each message is written only if it is announced; what it needs of
		// n is copied in its case alone, so that a node decided about does
		// not cost a copy of itself.
		switch {
		case len(n.Unreadable) > 0:
			keys := n.Unreadable
			return ReasonUnreadable, func() string {
				return "its agent wrote values the aggregator cannot read (" + strings.Join(keys, ", ") + ")"
			}
		case n.GKEHandled && !fromPolicy:
			return ReasonGKEHandles, text("GKE's own maintenance handler acts on " + protocol.AnnotationOpportunisticConfig + " on this node (GKE 1.31 and later)")
		case !n.Ready:
			return ReasonNotReady, text("the node is not Ready")
		case !n.Notice.CanReschedule:
			return ReasonNotReschedulable, text("its maintenance cannot be rescheduled (can_reschedule false)")
		case n.OptOut:
			return ReasonOptedOut, text("it is labelled " + protocol.LabelOpportunisticDisable + "=true")
		case now.Before(n.Failures.RetryAfter):
			f := n.Failures
			return ReasonCoolingDown, func() string {
				return fmt.Sprintf("its last voluntary maintenance failed (%s, %d in a row, at %s); not picked again before %s",
					f.Reason, f.Count, f.Last.UTC().Format(time.RFC3339), f.RetryAfter.UTC().Format(time.RFC3339))
			}
		case now.Before(n.Notice.WindowStart.Add(-setting.Window)):
			start := n.Notice.WindowStart
			return ReasonTooEarly, func() string {
				return fmt.Sprintf("its maintenance at %s is more than window=%s away", start.UTC().Format(time.RFC3339), policy.Seconds(setting.Window))
			}
		case n.Busy == protocol.BusySafeToEvict:
			return ReasonNotEvictable, text("a pod on it is annotated " + protocol.PodAnnotationSafeToEvict + "=false")
		case n.IdleSince.IsZero() || n.Busy != "":
			return ReasonNotIdle, text("pods on it use accelerators")
		case now.Sub(n.IdleSince) < setting.NodeIdleTime:
			idle := now.Sub(n.IdleSince)
			return ReasonIdleTooShort, func() string {
				return fmt.Sprintf("idle for %s, less than node-idle-time=%s", idle.Round(time.Second), policy.Seconds(setting.NodeIdleTime))
			}
		case block != "":
			return block, text(blockDetail)
		}
		return "", nil
	}
	skip := func(n *Node, reason string, detail func() string) {
		decide(n, reason, func() string { return "Not picked for opportunistic maintenance: " + detail() })
	}
	trigger := func(n *Node, msg func() string) {
		plan.Trigger = append(plan.Trigger, n.Name)
		decide(n, ReasonTriggered, msg)
	}
	c := caps{spare: available - setting.MinNodes, poolLeft: plan.Budget.Of(len(nodes)) - plan.Voluntary, clusterLeft: clusterLeft,
		pool: pool, minNodes: setting.MinNodes, available: available, poolBudget: plan.Budget, nodes: len(nodes), clusterBudget: cfg.ClusterBudget()}
	if len(slices) > 0 {
		for _, members := range slices {
			decideSlice(members, eligible, skip, trigger, &c)
		}
		return plan
	}
	var candidates []*Node
	for _, n := range nodes {
		if !pending(n) || n.InMaintenance {
			continue
		}
		if reason, detail := eligible(n); reason != "" {
			skip(n, reason, detail)
			continue
		}
		candidates = append(candidates, n)
	}
	// The longest idle first.
	sort.SliceStable(candidates, func(i, j int) bool { return candidates[i].IdleSince.Before(candidates[j].IdleSince) })
	for _, n := range candidates {
		if reason, detail := c.take(1); reason != "" {
			skip(n, reason, detail)
			continue
		}
		idle, start := n.IdleSince, n.Notice.WindowStart
		trigger(n, func() string {
			return fmt.Sprintf("Picked for opportunistic maintenance: idle since %s (node-idle-time=%s), maintenance pending for %s; the pool keeps at least %d nodes",
				idle.UTC().Format(time.RFC3339), policy.Seconds(setting.NodeIdleTime), start.UTC().Format(time.RFC3339), setting.MinNodes)
		})
	}
	return plan
}

// caps is what a pool may still take in one pass: the nodes min-nodes
// spares, and what is left of the pool's and the cluster's caps on nodes
// in voluntary maintenance (the cluster's shared by the pools in order).
type caps struct {
	spare, poolLeft int
	clusterLeft     *int

	pool                      string
	minNodes, available       int
	poolBudget, clusterBudget policy.Budget
	nodes                     int
}

// take takes k nodes (a node, or every host of a slice) from every cap,
// or says which cap refuses them ("" when none does).
func (c *caps) take(k int) (reason string, detail func() string) {
	switch {
	case c.spare < k:
		return ReasonMinNodes, func() string {
			return fmt.Sprintf("the pool %s must keep min-nodes=%d nodes Ready and out of maintenance (%d are)", c.pool, c.minNodes, c.available)
		}
	case c.poolLeft < k:
		return ReasonMaxVoluntary, func() string {
			return fmt.Sprintf("the pool %s has as many nodes in voluntary maintenance as its cap allows (max-unavailable=%s, %d nodes)", c.pool, c.poolBudget, c.nodes)
		}
	case *c.clusterLeft < k:
		return ReasonMaxVoluntary, func() string {
			return fmt.Sprintf("the cluster has as many nodes in voluntary maintenance as its cap allows (maxVoluntaryMaintenance=%s)", c.clusterBudget)
		}
	}
	c.spare -= k
	c.poolLeft -= k
	*c.clusterLeft -= k
	return "", nil
}

// sliceMembers groups the nodes of multi-host TPU slices, by slice.
func sliceMembers(nodes []*Node) [][]*Node {
	bySlice := map[string][]*Node{}
	var names []string
	for _, n := range nodes {
		if n.Slice == "" {
			continue
		}
		if _, ok := bySlice[n.Slice]; !ok {
			names = append(names, n.Slice)
		}
		bySlice[n.Slice] = append(bySlice[n.Slice], n)
	}
	sort.Strings(names)
	out := make([][]*Node, 0, len(names))
	for _, s := range names {
		out = append(out, bySlice[s])
	}
	return out
}

// decideSlice takes a slice whole or not at all: every host must be
// eligible and out of maintenance, and the slice takes as many nodes of
// min-nodes' spare and of the pool's and the cluster's caps as it has
// hosts. Only its first host by name is triggered: its agent asks Compute
// Engine once, for the whole slice, after every other host, following
// it, is drained (lifecycle.SliceCaller).
func decideSlice(members []*Node, eligible func(*Node) (string, func() string), skip func(*Node, string, func() string), trigger func(*Node, func() string), c *caps) {
	var blocked []string
	for _, n := range members {
		if n.InMaintenance || n.Voluntary {
			return // the slice is down, or going down: nothing to decide
		}
	}
	for _, n := range members {
		if !pending(n) {
			blocked = append(blocked, n.Name+" has no pending maintenance")
			continue
		}
		if reason, detail := eligible(n); reason != "" {
			skip(n, reason, detail)
			blocked = append(blocked, n.Name+": "+reason)
		}
	}
	slice := members[0].Slice
	if len(blocked) > 0 {
		for _, n := range members {
			if pending(n) {
				if r, _ := eligible(n); r == "" {
					skip(n, ReasonSliceIncomplete, func() string {
						return fmt.Sprintf("the multi-host TPU slice %s is maintained whole, and not every node of it can go now (%s)", slice, strings.Join(blocked, "; "))
					})
				}
			}
		}
		return
	}
	if reason, detail := c.take(len(members)); reason != "" {
		for _, n := range members {
			skip(n, reason, func() string {
				return fmt.Sprintf("the multi-host TPU slice %s goes down whole, %d nodes, and %s", slice, len(members), detail())
			})
		}
		return
	}
	lead := members[0] // sorted by name
	hosts := len(members)
	trigger(lead, func() string {
		return fmt.Sprintf("Picked for opportunistic maintenance with the whole multi-host TPU slice %s (%d nodes, all idle): this host asks Compute Engine once for the slice, after every host of it is drained", slice, hosts)
	})
}

// poolSetting finds the pool's opportunistic setting: the ConfigMap's, else
// the nodes' annotation (which must agree). configured is false when
// neither says anything.
func poolSetting(cfg policy.Config, pool string, nodes []*Node, plan *PoolPlan) (policy.Opportunistic, bool, error) {
	var o policy.Opportunistic
	if err := cfg.PoolErrors[pool]; err != nil {
		return o, true, err // this pool's part of the ConfigMap is invalid
	}
	if pc, ok := cfg.Pools[pool]; ok && pc.Opportunistic != nil {
		o = *pc.Opportunistic
	} else {
		values := map[string][]string{}
		for _, n := range nodes {
			if n.Config != "" && !n.GKEHandled { // GKE's handler acts on it
				values[n.Config] = append(values[n.Config], n.Name)
			}
		}
		if len(values) == 0 {
			return o, false, nil
		}
		for _, names := range values {
			plan.ConfigNodes = append(plan.ConfigNodes, names...)
		}
		sort.Strings(plan.ConfigNodes)
		if len(values) > 1 {
			var vs []string
			for v := range values {
				vs = append(vs, strconv.Quote(v))
			}
			sort.Strings(vs)
			return o, true, fmt.Errorf("%w: the nodes of pool %s disagree on %s: %s", policy.ErrConfig, pool, protocol.AnnotationOpportunisticConfig, strings.Join(vs, ", "))
		}
		var err error
		for v := range values {
			if o, err = policy.ParseOpportunistic(v); err != nil {
				return o, true, err
			}
		}
	}
	for _, n := range nodes {
		if n.Slice != "" && o.MinNodes != 0 {
			return o, true, fmt.Errorf("%w: pool %s is a multi-host TPU slice, maintained whole: min-nodes must be 0, not %d", policy.ErrConfig, pool, o.MinNodes)
		}
	}
	return o, true, nil
}
