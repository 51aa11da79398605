package fleet

// One pool's decision: which of its nodes with a pending notice to
// trigger now, within its caps, windows and exclusions.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

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
