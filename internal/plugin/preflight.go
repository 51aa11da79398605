package plugin

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Preflight checks, from what is on the cluster, what the node's agent
// would check of a manual trigger (problems: it would refuse it), and what
// an operator should know first (notes: the pool's cap and min-nodes).
func Preflight(in Input, n *corev1.Node) (problems, notes []string) {
	st := protocol.ReadAgentState(n)
	pool := n.Labels[in.PoolLabel]
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	notice, present, err := metadata.ParseNotice(st.Notice)
	switch {
	case st.Active():
		problem("%s is already in maintenance (%s for %s)", n.Name, st.Phase, st.Reason)
	case err != nil || !present:
		problem("%s has no maintenance notice: there is nothing to start now", n.Name)
	case notice.Status != metadata.StatusPending:
		problem("its maintenance is %s, not PENDING: it cannot be started now", notice.RawStatus)
	case !notice.CanReschedule:
		problem("its maintenance scheduled for %s cannot be rescheduled (can_reschedule false)", notice.WindowStart.UTC().Format(time.RFC3339))
	}
	if v, set := n.Labels[protocol.LabelPerformMaintenance]; set {
		problem("%s=%s is already set", protocol.LabelPerformMaintenance, v)
	}
	switch {
	case in.ConfigErr != nil:
		problem("the maintenance policy cannot be read (%v): where manual triggers are gated, the agent refuses them (policy_unknown)", in.ConfigErr)
	case in.Config.PoolErrors[pool] != nil:
		problem("the maintenance policy's part for pool %s is invalid (%v): the agent refuses manual triggers there (policy_unknown)", pool, in.Config.PoolErrors[pool])
	default:
		if reason, detail := in.Config.ManualBlocked(pool, in.Now); reason != "" {
			problem("the maintenance policy gates manual triggers in pool %s, and now is %s (%s)", pool, detail, reason)
		}
	}
	if f := st.Failures; f.Count > 0 {
		note("its last %d voluntary maintenance(s) failed (%s)", f.Count, f.Reason)
	}
	views := make([]aggregator.Node, 0, len(in.Nodes))
	for _, m := range in.Nodes {
		views = append(views, aggregator.NodeOf(m, in.PoolLabel, ""))
	}
	for _, p := range aggregator.Decide(in.Now, in.Config, views) {
		if p.Pool != pool {
			continue
		}
		voluntary, ready := 0, 0
		for _, v := range views {
			if v.Pool == pool && v.Voluntary {
				voluntary++
			}
			if v.Pool == pool && v.Ready && !v.InMaintenance && v.Name != n.Name {
				ready++
			}
		}
		note("pool %s: %d of %d nodes in voluntary maintenance (cap %d; a manual trigger counts, and is not held back by it)",
			pool, voluntary, p.Nodes, in.Config.PoolBudget(pool, p.Setting).Of(p.Nodes))
		if p.Configured && p.ConfigErr == nil {
			note("after it, the pool keeps %d nodes Ready and out of maintenance (min-nodes=%d for opportunistic maintenance)", ready, p.Setting.MinNodes)
		} else {
			note("after it, the pool keeps %d nodes Ready and out of maintenance", ready)
		}
	}
	return problems, notes
}

// PlannedPod is one pod the drain will stop.
type PlannedPod struct {
	Pod   string
	Group drain.Group
	Grace time.Duration
	// RefusedBy names the PodDisruptionBudgets that refuse its eviction now.
	RefusedBy []string
}

// DrainPlan lists what the drain of the node will stop, in its order (by
// group, the longest grace first), and which budgets would refuse now.
func DrainPlan(pods []*corev1.Pod, pdbs []policyv1.PodDisruptionBudget) []PlannedPod {
	var out []PlannedPod
	for _, p := range pods {
		g, ok := drain.GroupOf(p)
		if !ok {
			continue
		}
		grace := 30 * time.Second
		if p.Spec.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
		}
		pp := PlannedPod{Pod: p.Namespace + "/" + p.Name, Group: g, Grace: grace}
		for _, b := range pdbs {
			if b.Namespace != p.Namespace || b.Spec.Selector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err == nil && sel.Matches(labels.Set(p.Labels)) && b.Status.DisruptionsAllowed < 1 {
				pp.RefusedBy = append(pp.RefusedBy, b.Namespace+"/"+b.Name)
			}
		}
		out = append(out, pp)
	}
	order := map[drain.Group]int{}
	for i, g := range drain.Groups {
		order[g] = i
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return order[out[i].Group] < order[out[j].Group]
		}
		if out[i].Grace != out[j].Grace {
			return out[i].Grace > out[j].Grace
		}
		return out[i].Pod < out[j].Pod
	})
	return out
}
