package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
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
		Use:               "trigger (NODE... | -l SELECTOR | --pool POOL)",
		ValidArgsFunction: a.completeNodes,
		Short:             "Start nodes' pending maintenance now, after a pre-flight check; then follow it",
		Long: "Start the pending maintenance of the nodes named, or of every node the selector or the pool matches, now. " +
			"Each node is checked first as its agent would check the trigger; if any would refuse, none is started (exit 3). " +
			"Then it asks once, labels each node, and follows each until Compute Engine has begun its maintenance.",
		RunE: func(cmd *cobra.Command, names []string) error {
			if (len(names) == 0) == (o.Selector == "" && o.Pool == "") {
				return fmt.Errorf("%w: trigger takes NODE..., or -l SELECTOR or --pool POOL", errUsage)
			}
			ctx := cmd.Context()
			c, in, err := a.load(ctx, o, names)
			if err != nil {
				return err
			}
			targets := triggerTargets(in)
			if len(targets) == 0 {
				return fmt.Errorf("no node matches %s", strings.Trim(o.Selector+" "+o.Pool, " "))
			}
			refused := 0
			for _, node := range targets {
				ok, err := a.preflight(ctx, c, in, node)
				if err != nil {
					return err
				}
				if !ok {
					refused++
				}
			}
			if refused > 0 {
				return fmt.Errorf("%w: %d of %d node(s)' agents would refuse this trigger (problems above); nothing changed", errRefused, refused, len(targets))
			}
			if dryRun {
				fmt.Fprintln(a.out, "Dry run: nothing changed.")
				return nil
			}
			if !yes && !a.ask("Start the maintenance of "+nodeList(targets)+" now?") {
				fmt.Fprintln(a.out, "Not started.")
				return nil
			}
			return a.triggerAll(ctx, c, targets, timeout)
		},
	}
	o.addFlags(cmd, false)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Check and show what would happen; change nothing.")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Do not ask for confirmation.")
	cmd.Flags().DurationVar(&timeout, "timeout", 90*time.Minute, "How long to follow the maintenance.")
	return cmd
}

// triggerTargets are the nodes in.Shown names, by name.
func triggerTargets(in plugin.Input) []*corev1.Node {
	var out []*corev1.Node
	for _, n := range in.Nodes {
		if in.Shown[n.Name] {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// preflight prints the pre-flight check of node and its drain's plan, and
// says whether the agent would accept the trigger.
func (a *app) preflight(ctx context.Context, c *kube.Client, in plugin.Input, node *corev1.Node) (bool, error) {
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
	return len(problems) == 0, a.showPlan(ctx, c, node.Name)
}

// nodeList names nodes: one by its name, several by their count and names.
func nodeList(nodes []*corev1.Node) string {
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	if len(names) == 1 {
		return names[0]
	}
	return fmt.Sprintf("%d nodes (%s)", len(names), strings.Join(names, ", "))
}

// ask asks question and says whether the answer is yes.
func (a *app) ask(question string) bool {
	fmt.Fprintf(a.out, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(a.in).ReadString('\n')
	ans := strings.ToLower(strings.TrimSpace(answer))
	return ans == "y" || ans == "yes"
}

// triggerAll labels each node and follows them all, each node's lines
// prefixed with its name where there are several; it fails, naming each
// node, where any failed (a refusal among them: errRefused).
func (a *app) triggerAll(ctx context.Context, c *kube.Client, nodes []*corev1.Node, timeout time.Duration) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, protocol.LabelPerformMaintenance, protocol.TriggerValue)
	for _, n := range nodes {
		if _, err := c.PatchNode(ctx, n.Name, types.MergePatchType, []byte(patch), "kubectl-gce_maintenance", ""); err != nil {
			return plugin.Explain(err, "label "+n.Name)
		}
		fmt.Fprintf(a.out, "Labelled %s %s=%s.\n", n.Name, protocol.LabelPerformMaintenance, protocol.TriggerValue)
	}
	fmt.Fprintln(a.out, "Following (Ctrl-C stops following, not the maintenance):")
	if len(nodes) == 1 {
		return a.follow(ctx, c, nodes[0].Name, timeout, a.out)
	}
	var mu sync.Mutex
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			out := &prefixed{mu: &mu, w: a.out, prefix: "[" + n.Name + "] "}
			if err := a.follow(ctx, c, n.Name, timeout, out); err != nil {
				errs[i] = fmt.Errorf("%s: %w", n.Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prefixed writes each line to w with prefix before it, a whole line at a
// time under mu, so that several nodes' lines do not mix.
type prefixed struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	line   []byte
}

func (p *prefixed) Write(b []byte) (int, error) {
	p.line = append(p.line, b...)
	for {
		i := bytes.IndexByte(p.line, '\n')
		if i < 0 {
			return len(b), nil
		}
		p.mu.Lock()
		_, err := fmt.Fprintf(p.w, "%s%s", p.prefix, p.line[:i+1])
		p.mu.Unlock()
		p.line = p.line[i+1:]
		if err != nil {
			return len(b), err
		}
	}
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
func (a *app) follow(ctx context.Context, c *kube.Client, node string, timeout time.Duration, out io.Writer) error {
	seen := map[types.UID]bool{}
	var outcome error
	var drained, before *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		events, err := c.ListEvents(ctx, "", metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",source=" + protocol.EventSourceAgent})
		if err == nil {
			for _, e := range events.Items {
				if !seen[e.UID] && plugin.IsNodesWord(&e, node) && e.LastTimestamp.Time.After(a.now().Add(-time.Minute)) {
					seen[e.UID] = true
					fmt.Fprintf(out, "  %s %s: %s\n", e.Type, e.Reason, e.Message)
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
			fmt.Fprintf(out, "%s is drained (%s=%s); waiting for Compute Engine to begin the maintenance.\n", node, protocol.LabelActiveMaintenance, protocol.ValueTerminating)
		}
		if begun(before, n) {
			fmt.Fprintf(out, "Compute Engine has begun the maintenance of %s.\n", node)
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
