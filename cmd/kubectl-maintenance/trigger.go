package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/internal/plugin"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func (a *app) triggerCommand() *cobra.Command {
	var o readOptions
	var dryRun, yes bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:               "trigger NODE",
		ValidArgsFunction: a.completeNodes,
		Short:             "Start a node's pending maintenance now, after a pre-flight check; then follow it",
		RunE: func(cmd *cobra.Command, names []string) error {
			if len(names) != 1 {
				return fmt.Errorf("%w: trigger takes one NODE", errUsage)
			}
			ctx := cmd.Context()
			c, in, err := a.load(ctx, o, names)
			if err != nil {
				return err
			}
			var node *corev1.Node
			for _, n := range in.Nodes {
				if n.Name == names[0] {
					node = n
				}
			}
			problems, notes := plugin.Preflight(in, node)
			fmt.Fprintf(a.out, "Pre-flight check of %s:\n", node.Name)
			for _, p := range problems {
				fmt.Fprintf(a.out, "  refused: %s\n", p)
			}
			for _, n := range notes {
				fmt.Fprintf(a.out, "  note: %s\n", n)
			}
			if len(problems) == 0 {
				fmt.Fprintln(a.out, "  ok: the agent would accept the trigger")
			}
			if err := a.showPlan(ctx, c, node.Name); err != nil {
				return err
			}
			if len(problems) > 0 {
				return fmt.Errorf("%w: the node's agent would refuse this trigger (%d problem(s) above); nothing changed", errRefused, len(problems))
			}
			if dryRun {
				fmt.Fprintln(a.out, "Dry run: nothing changed.")
				return nil
			}
			if !yes {
				fmt.Fprintf(a.out, "Start the maintenance of %s now? [y/N] ", node.Name)
				answer, _ := bufio.NewReader(a.in).ReadString('\n')
				if ans := strings.ToLower(strings.TrimSpace(answer)); ans != "y" && ans != "yes" {
					fmt.Fprintln(a.out, "Not started.")
					return nil
				}
			}
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, protocol.LabelPerformMaintenance, protocol.TriggerValue)
			if _, err := c.PatchNode(ctx, node.Name, types.MergePatchType, []byte(patch), "kubectl-maintenance", ""); err != nil {
				return plugin.Explain(err, "label the node")
			}
			fmt.Fprintf(a.out, "Labelled %s %s=%s; following it (Ctrl-C stops following, not the maintenance):\n", node.Name, protocol.LabelPerformMaintenance, protocol.TriggerValue)
			return a.follow(ctx, c, node.Name, timeout)
		},
	}
	o.addFlags(cmd, false)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Check and show what would happen; change nothing.")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Do not ask for confirmation.")
	cmd.Flags().DurationVar(&timeout, "timeout", 90*time.Minute, "How long to follow the maintenance.")
	return cmd
}

// showPlan prints what the drain of node will stop, in order.
func (a *app) showPlan(ctx context.Context, c *kube.Client, node string) error {
	pods, err := c.ListPods(ctx, "", metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return plugin.Explain(err, "list the pods of "+node)
	}
	pdbs, err := c.ListBudgets(ctx, "")
	if err != nil {
		return plugin.Explain(err, "list PodDisruptionBudgets")
	}
	ptrs := make([]*corev1.Pod, 0, len(pods.Items))
	for i := range pods.Items {
		ptrs = append(ptrs, &pods.Items[i])
	}
	plan := plugin.DrainPlan(ptrs, pdbs.Items, a.now())
	fmt.Fprintf(a.out, "The drain will stop %d pod(s), in this order:\n", len(plan))
	for _, p := range plan {
		refused := ""
		if len(p.RefusedBy) > 0 {
			refused = "  (refused now by " + strings.Join(p.RefusedBy, ", ") + ": retried, the budget holds)"
		}
		lead := ""
		if p.Lead > 0 {
			lead = fmt.Sprintf(", after its checkpoint lead of %s", p.Lead)
		}
		fmt.Fprintf(a.out, "  %-9s %s, grace %s%s%s\n", p.Group, p.Pod, p.Grace, lead, refused)
	}
	return nil
}

// follow prints the agent's Events on node until Compute Engine has begun
// the maintenance (the agent recorded TERMINATE_ON_HOST_MAINTENANCE or the
// notice ONGOING after the drain, or the VM stopped and came back), or the
// label is answered with a refusal. A node that is terminating is drained
// and only waits: Compute Engine may still not begin (not_started).
func (a *app) follow(ctx context.Context, c *kube.Client, node string, timeout time.Duration) error {
	seen := map[types.UID]bool{}
	var outcome error
	var drained, before *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		events, err := c.ListEvents(ctx, "", metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",source=" + protocol.EventSourceAgent})
		if err == nil {
			for _, e := range events.Items {
				if !seen[e.UID] && plugin.IsNodesWord(&e, node) && e.LastTimestamp.Time.After(a.now().Add(-time.Minute)) {
					seen[e.UID] = true
					fmt.Fprintf(a.out, "  %s %s: %s\n", e.Type, e.Reason, e.Message)
					if protocol.IsTriggerRefusal(e.Reason) {
						outcome = fmt.Errorf("%w: %s", errRefused, e.Message)
					}
				}
			}
		}
		n, err := c.GetNode(ctx, node)
		if err != nil || outcome != nil {
			return outcome != nil, nil
		}
		if before == nil {
			before = n
		}
		if n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating && drained == nil {
			drained = n
			fmt.Fprintf(a.out, "%s is drained (%s=%s); waiting for Compute Engine to begin the maintenance.\n", node, protocol.LabelActiveMaintenance, protocol.ValueTerminating)
		}
		if begun(before, n) {
			fmt.Fprintf(a.out, "Compute Engine has begun the maintenance of %s.\n", node)
			return true, nil
		}
		return false, nil
	})
	if outcome != nil {
		return outcome
	}
	return err
}

// begun: the maintenance the trigger asked for has begun on n, which was
// before when the trigger was followed: the agent recorded the signal of
// it (maintenance-handler.io/begun), or the VM stopped and came back
// (another boot ID).
func begun(before, n *corev1.Node) bool {
	if protocol.ReadAgentState(n).ManualBegun() {
		return true
	}
	return n.Status.NodeInfo.BootID != "" && n.Status.NodeInfo.BootID != before.Status.NodeInfo.BootID
}
