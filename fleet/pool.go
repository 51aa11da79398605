package fleet

// One pool's decision: which of its nodes with a pending notice to
// trigger now, within its caps, windows and exclusions.

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// poolPass is one pool's decision in one pass: its nodes (sorted by
// name), what it decided so far (plan), and what every node's decision
// reads (its setting, the policy's block, the caps left).
type poolPass struct {
	now   time.Time
	cfg   policy.Config
	nodes []*Node
	plan  PoolPlan
	// fromPolicy: the setting is the policy ConfigMap's, not the nodes'
	// annotation (GKE's handler acts on the annotation alone).
	fromPolicy bool
	// block is why the policy's windows and exclusions refuse maintenance
	// now ("" when they do not), and blockDetail says it in words (and
	// blockText, once for every node it refuses).
	block, blockDetail string
	blockText          func() string
	caps               caps
	// until is when time alone may next change the plan (zero: never):
	// the earliest moment a comparison of now that the pass made turns.
	// readBlock: the windows and exclusions were read (block).
	until     time.Time
	readBlock bool
	// kept is what the pool's last decision found of its nodes (the
	// Fleet keeps it from pass to pass), and found one kept, told anew.
	kept  *eligibilities
	found eligibility
	next  int // the node after the one last decided about
}

// decidePool decides one pool's nodes, sorted by name: the pool's
// gauges, then its setting, and, where the pool is configured, valid and
// not left to the cluster autoscaler, each node with a pending notice
// (or each multi-host slice, whole). kept, when not nil, is what the
// pool's last decision found of its nodes (eligibilities), and is kept up
// to date.
func decidePool(now time.Time, cfg policy.Config, pool string, nodes []*Node, clusterLeft *int, kept *eligibilities) *poolPass {
	if kept == nil {
		kept = &eligibilities{}
	}
	kept.fit(len(nodes))
	p := &poolPass{now: now, cfg: cfg, nodes: nodes, plan: PoolPlan{Pool: pool, Nodes: len(nodes)}, kept: kept,
		caps: caps{clusterLeft: clusterLeft, clusterIn: *clusterLeft, lo: math.MinInt, hi: math.MaxInt}}
	sum := p.summarize()
	p.plan.Voluntary = sum.voluntary
	if p.plan.Pending > 0 {
		p.plan.Decisions = make([]Decision, 0, p.plan.Pending) // one for each node pending, at most
	}
	setting, configured, err := poolSetting(cfg, pool, nodes, sum, &p.plan)
	p.plan.Configured, p.plan.Setting = configured, setting
	var slices [][]*Node
	if sum.sliceHosts {
		slices = sliceMembers(nodes)
	}
	p.plan.Budget = cfg.PoolBudget(pool, setting, len(slices) > 0)
	var groups []string
	if sum.grouped {
		groups = groupNames(nodes)
	}
	p.plan.Autoscaled = cfg.Autoscaled(pool, len(groups) > 0)
	switch {
	case !configured:
		p.leftToGKE()
		return p
	case err != nil:
		p.plan.ConfigErr = err
		p.skipAll(ReasonInvalidConfig, func() string { return fmt.Sprintf("the pool's configuration is invalid: %v", err) })
		return p
	case p.plan.Autoscaled && !cfg.AllowAutoscaled(pool):
		how := "declared autoscaled in the policy ConfigMap"
		if len(groups) > 0 {
			how = "its node group " + strings.Join(groups, ", ") + " is in the autoscaler's status"
		}
		p.skipAll(ReasonAutoscaled, func() string {
			return fmt.Sprintf("the cluster autoscaler manages the pool %s (%s) and removes idle nodes itself, and GKE documents opportunistic maintenance as incompatible with it. Set opportunisticWhenAutoscaled: true for the pool in the policy ConfigMap to have it act anyway.", pool, how)
		})
		return p
	}
	p.block, p.blockDetail = cfg.Policy(pool).Blocks(now)
	p.blockText, p.readBlock = text(p.blockDetail), true
	pc, inPolicy := cfg.Pools[pool]
	p.fromPolicy = inPolicy && pc.Opportunistic != nil
	c := &p.caps
	c.spare, c.poolLeft = sum.available-setting.MinNodes, p.plan.Budget.Of(len(nodes))-p.plan.Voluntary
	c.pool, c.minNodes, c.available, c.poolBudget, c.nodes, c.clusterBudget = pool, setting.MinNodes, sum.available, p.plan.Budget, len(nodes), cfg.ClusterBudget()
	c.refusals = [3]func() string{c.minNodesDetail, c.poolCapDetail, c.clusterCapDetail}
	if len(slices) > 0 {
		for _, members := range slices {
			p.decideSlice(members)
		}
		return p
	}
	kept.use(eligibilityKey{window: setting.Window, idleTime: setting.NodeIdleTime, fromPolicy: p.fromPolicy, block: p.block, blockDetail: p.blockDetail})
	p.decideNodes()
	return p
}

// before: now is before t, which the plan reads; the plan holds no later
// than t, when the answer turns.
func (p *poolPass) before(t time.Time) bool {
	if !p.now.Before(t) {
		return false // time only moves on: the answer holds
	}
	p.turnsAt(t)
	return true
}

// turnsAt: the plan holds no later than t (zero: ever).
func (p *poolPass) turnsAt(t time.Time) {
	if !t.IsZero() && (p.until.IsZero() || t.Before(p.until)) {
		p.until = t
	}
}

// decide records the decision about n; msg is written only if announced.
func (p *poolPass) decide(n *Node, reason Reason, msg func() string) {
	p.add(n, Decision{Node: n.Name, UID: n.UID, Reason: reason, message: msg})
}

// skip: n is not picked, for reason (detail says why).
func (p *poolPass) skip(n *Node, reason Reason, detail func() string) {
	p.add(n, Decision{Node: n.Name, UID: n.UID, Reason: reason, message: detail, skipped: true})
}

// add adds d, the decision about n, to the plan, and notes it by n
// (eligibilities.changes).
func (p *poolPass) add(n *Node, d Decision) {
	i := p.next // the nodes are mostly decided about in order
	if i >= len(p.nodes) || p.nodes[i] != n {
		i = slices.Index(p.nodes, n)
	}
	p.addAt(i, d)
}

// addAt adds d, the decision about the node at i of the pool's nodes.
func (p *poolPass) addAt(i int, d Decision) {
	p.plan.Decisions = append(p.plan.Decisions, d)
	p.next = i + 1
	e := &p.kept.nodes[i]
	e.reason, e.decision = d.Reason, len(p.plan.Decisions)-1
}

// skipAll skips every node with a pending notice, for one reason.
func (p *poolPass) skipAll(reason Reason, detail func() string) {
	for i, n := range p.nodes {
		if f := &p.kept.nodes[i].facts; f.pending && !f.inMaintenance {
			p.skip(n, reason, detail)
		}
	}
}

// trigger picks n.
func (p *poolPass) trigger(n *Node, msg func() string) {
	p.plan.Trigger = append(p.plan.Trigger, n.Name)
	p.decide(n, ReasonTriggered, msg)
}

// leftToGKE: the pool is not configured; a node whose annotation GKE's own
// handler acts on is told so, once.
func (p *poolPass) leftToGKE() {
	for i, n := range p.nodes {
		if f := &p.kept.nodes[i].facts; f.leftToGKE && f.pending && !f.inMaintenance {
			p.decide(n, ReasonGKEHandles, text("Not picked by maintenance-handler's aggregator: GKE's own maintenance handler acts on "+protocol.AnnotationOpportunisticConfig+" on this node (GKE 1.31 and later), and two controllers must not pick nodes. Configure the pool in the aggregator's policy ConfigMap, or run it with --gke-opportunistic-config=adopt, to have it act instead."))
		}
	}
}

// text is a message already written.
func text(s string) func() string { return func() string { return s } }

// The details that read nothing of the node, written once.
var (
	gkeHandlesDetail       = text("GKE's own maintenance handler acts on " + protocol.AnnotationOpportunisticConfig + " on this node (GKE 1.31 and later)")
	notReadyDetail         = text("the node is not Ready")
	notReschedulableDetail = text("its maintenance cannot be rescheduled (can_reschedule false)")
	optedOutDetail         = text("it is labelled " + protocol.LabelOpportunisticDisable + "=true")
	notEvictableDetail     = text("a pod on it is annotated " + protocol.PodAnnotationSafeToEvict + "=false")
	notIdleDetail          = text("pods on it use accelerators")
)

// eligible checks one node: "" means it may be triggered now, else the
// reason it may not, and a detail written only if it is announced (what
// it needs of n is copied in its case alone, so that a node decided about
// does not cost a copy of itself).
func (p *poolPass) eligible(n *Node) (Reason, func() string) {
	setting := p.plan.Setting
	switch {
	case len(n.Unreadable) > 0:
		keys := n.Unreadable
		return ReasonUnreadable, func() string {
			return "its agent wrote values the aggregator cannot read (" + strings.Join(keys, ", ") + ")"
		}
	case n.GKEHandled && !p.fromPolicy:
		return ReasonGKEHandles, gkeHandlesDetail
	case !n.Ready:
		return ReasonNotReady, notReadyDetail
	case !n.Notice.CanReschedule:
		return ReasonNotReschedulable, notReschedulableDetail
	case n.OptOut:
		return ReasonOptedOut, optedOutDetail
	case p.before(n.Failures.RetryAfter):
		f := n.Failures
		return ReasonCoolingDown, func() string {
			return fmt.Sprintf("its last voluntary maintenance failed (%s, %d in a row, at %s); not picked again before %s",
				f.Reason, f.Count, f.Last.UTC().Format(time.RFC3339), f.RetryAfter.UTC().Format(time.RFC3339))
		}
	case p.before(n.Notice.WindowStart.Add(-setting.Window)):
		start := n.Notice.WindowStart
		return ReasonTooEarly, func() string {
			return fmt.Sprintf("its maintenance at %s is more than window=%s away", start.UTC().Format(time.RFC3339), policy.Seconds(setting.Window))
		}
	case p.endsSoon(n):
		end := n.KnownEnd
		return ReasonEndsSoon, func() string {
			return fmt.Sprintf("its VM's run ends at %s (a time limit), before its maintenance window closes or within %s: it goes before the maintenance would matter", end.UTC().Format(time.RFC3339), KnownEndQuiet)
		}
	case n.Busy == protocol.BusySafeToEvict:
		return ReasonNotEvictable, notEvictableDetail
	case n.IdleSince.IsZero() || n.Busy != "":
		return ReasonNotIdle, notIdleDetail
	case p.before(n.IdleSince.Add(setting.NodeIdleTime)):
		return ReasonIdleTooShort, p.idleTooShort(n.IdleSince)
	case p.block != "":
		return Reason(p.block), p.blockText
	}
	return "", nil
}

// idleTooShort says how long a node idle since then has been idle now.
func (p *poolPass) idleTooShort(since time.Time) func() string {
	idle, setting := p.now.Sub(since), p.plan.Setting
	return func() string {
		return fmt.Sprintf("idle for %s, less than node-idle-time=%s", idle.Round(time.Second), policy.Seconds(setting.NodeIdleTime))
	}
}

// decideNodes decides a pool of single nodes: every eligible node, the
// longest idle first, while the caps allow.
func (p *poolPass) decideNodes() {
	// The candidates by their place among the pool's nodes: their order
	// and their decisions read what was found of them, not their Node
	// structs, strewn over the heap.
	var candidates []int
	for i, n := range p.nodes {
		switch e := p.eligibility(i, n); e.state {
		case eligibilitySkip:
			p.addAt(i, e.skip)
		case eligibilityCandidate:
			candidates = append(candidates, i)
		}
	}
	found := p.kept.nodes
	slices.SortFunc(candidates, func(a, b int) int { // the longest idle first, then by name
		return cmp.Or(found[a].facts.idleSince.Compare(found[b].facts.idleSince), a-b)
	})
	setting := p.plan.Setting
	for _, i := range candidates {
		d := found[i].skip
		if reason, detail := p.caps.take(1); reason != "" {
			d.Reason, d.message, d.skipped = reason, detail, true
			p.addAt(i, d)
			continue
		}
		n := p.nodes[i]
		idle, start := n.IdleSince, n.Notice.WindowStart
		p.trigger(n, func() string {
			return fmt.Sprintf("Picked for opportunistic maintenance: idle since %s (node-idle-time=%s), maintenance pending for %s; the pool keeps at least %d nodes",
				idle.UTC().Format(time.RFC3339), policy.Seconds(setting.NodeIdleTime), start.UTC().Format(time.RFC3339), setting.MinNodes)
		})
	}
}

// poolSetting finds the pool's opportunistic setting: the ConfigMap's, else
// the nodes' annotation (which must agree). configured is false when
// neither says anything.
func poolSetting(cfg policy.Config, pool string, nodes []*Node, sum poolSummary, plan *PoolPlan) (policy.Opportunistic, bool, error) {
	var o policy.Opportunistic
	if err := cfg.PoolErrors[pool]; err != nil {
		return o, true, err // this pool's part of the ConfigMap is invalid
	}
	fromNodes := false
	if pc, ok := cfg.Pools[pool]; ok && pc.Opportunistic != nil {
		o = *pc.Opportunistic
	} else {
		// The annotation (GKE's handler acts on it where it runs): one
		// value on every node that has one.
		values := sum.configs
		if len(values) == 0 {
			return o, false, nil
		}
		fromNodes = true
		if len(values) > 1 {
			plan.ConfigNodes = configNodes(nodes)
			vs := make([]string, 0, len(values))
			for _, v := range values {
				vs = append(vs, strconv.Quote(v))
			}
			sort.Strings(vs)
			return o, true, fmt.Errorf("%w: the nodes of pool %s disagree on %s: %s", policy.ErrConfig, pool, protocol.AnnotationOpportunisticConfig, strings.Join(vs, ", "))
		}
		var err error
		if o, err = policy.ParseOpportunistic(values[0]); err != nil {
			plan.ConfigNodes = configNodes(nodes)
			return o, true, err
		}
	}
	if sum.sliceHosts && o.MinNodes != 0 {
		if fromNodes {
			plan.ConfigNodes = configNodes(nodes)
		}
		return o, true, fmt.Errorf("%w: pool %s is a multi-host TPU slice, maintained whole: min-nodes must be 0, not %d", policy.ErrConfig, pool, o.MinNodes)
	}
	return o, true, nil
}

// configNodes are the nodes whose annotation gives the pool's setting, by
// name: those an invalid one is told to.
func configNodes(nodes []*Node) []string {
	var out []string
	for _, n := range nodes {
		if n.Config != "" && !n.GKEHandled {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}

// endsSoon is endsSoon of n now, which the plan reads: when it is false
// the plan holds until the VM's end is KnownEndQuiet away.
func (p *poolPass) endsSoon(n *Node) bool {
	if endsSoon(p.now, n) {
		return true
	}
	if !n.KnownEnd.IsZero() {
		p.before(n.KnownEnd.Add(-KnownEndQuiet).Add(time.Nanosecond))
	}
	return false
}

// endsSoon: n's VM has a known end before its maintenance window closes
// (its start, where the notice gives no end), or within KnownEndQuiet.
func endsSoon(now time.Time, n *Node) bool {
	if n.KnownEnd.IsZero() {
		return false
	}
	closes := n.Notice.WindowEnd
	if closes.IsZero() {
		closes = n.Notice.WindowStart
	}
	return n.KnownEnd.Before(closes) || n.KnownEnd.Before(now.Add(KnownEndQuiet))
}
