package plugin

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/policy"
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
	if v, set := n.Labels[protocol.LabelPerformMaintenance]; set {
		problem("%s=%s is already set", protocol.LabelPerformMaintenance, v)
	}
	// The agent's own check, on what its Node shows: the notice it
	// mirrors, its state, and the policy as the agent reads it.
	check := lifecycle.TriggerCheck{Value: protocol.TriggerValue, State: st, Now: in.Now}
	check.Notice, check.NoticePresent = st.Notice, st.Notice.Status != ""
	check.Blocked, check.BlockedDetail = policy.ManualGateOf(in.Config, in.ConfigErr, in.PolicySource, pool, in.Now)
	if answer := check.Answer(); !answer.Accepted() {
		problem("%s (%s)", answer.Message, answer.Outcome)
	}
	if f := st.Failures; f.Count > 0 {
		note("its last %d voluntary maintenance(s) failed (%s)", f.Count, f.Reason)
	}
	views := make([]fleet.Node, 0, len(in.Nodes))
	for _, m := range in.Nodes {
		views = append(views, fleet.NodeOf(m, in.grouping()))
	}
	// What goes down: the node, or its whole multi-host slice.
	down := map[string]bool{n.Name: true}
	if slice := fleet.NodeOf(n, in.grouping()).Slice; slice != "" {
		var hosts []string
		for _, v := range views {
			if v.Slice == slice {
				down[v.Name] = true
				hosts = append(hosts, v.Name)
			}
		}
		sort.Strings(hosts)
		note("%s is a host of the multi-host slice %s: the trigger takes the whole slice down, its %d hosts %s. Every other host drains with it (voluntarily: budgets hold), and %s asks Compute Engine once, for the slice, after the last host is drained",
			n.Name, slice, len(hosts), strings.Join(hosts, ", "), n.Name)
	}
	for _, p := range fleet.Decide(in.Now, in.Config, views) {
		if p.Pool != pool {
			continue
		}
		ready := 0
		for _, v := range views {
			if v.Pool == pool && v.Ready && !v.InMaintenance && !down[v.Name] {
				ready++
			}
		}
		counts := "a manual trigger counts"
		if len(down) > 1 {
			counts = fmt.Sprintf("a manual trigger counts, as the slice's %d hosts", len(down))
		}
		note("pool %s: %d of %d nodes in voluntary maintenance (cap %d; %s, and is not held back by it)",
			pool, p.Voluntary, p.Nodes, p.Budget.Of(p.Nodes), counts)
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
	// Grace is the grace period it is asked to stop with.
	Grace time.Duration
	// Lead is how long after the drain begins it is asked to stop, at the
	// earliest (its checkpoint lead; zero without one).
	Lead time.Duration
	// RefusedBy names the PodDisruptionBudgets that refuse its eviction now.
	RefusedBy []string
}

// Agent pods carry these labels (manifests/base/agent-daemonset.yaml);
// the drain never stops the agent itself.
var agentPodLabels = labels.Set{"app.kubernetes.io/name": "maintenance-handler", "app.kubernetes.io/component": "agent"}

// DrainPlan is what the drain of a manual maintenance that begins at start
// will stop, in its order: drain.Plan, with the agent's default manual
// drain deadline, and which budgets would refuse each pod now.
func DrainPlan(pods []*corev1.Pod, pdbs []policyv1.PodDisruptionBudget, start time.Time) []PlannedPod {
	var skip types.NamespacedName
	for _, p := range pods {
		if labels.SelectorFromSet(agentPodLabels).Matches(labels.Set(p.Labels)) {
			skip = types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		}
	}
	var out []PlannedPod
	for _, planned := range drain.Plan(pods, skip, drain.DefaultTiming, start, start.Add(lifecycle.DefaultManualDrainTimeout)) {
		p := planned.Pod
		pp := PlannedPod{Pod: p.Namespace + "/" + p.Name, Group: planned.Group, Grace: planned.Grace, Lead: planned.NotBefore.Sub(start)}
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
	return out
}
