package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/internal/plugin"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func (a *app) reportFaultyCommand() *cobra.Command {
	var o readOptions
	var behavior, description string
	var dryRun, yes bool
	cmd := &cobra.Command{
		Use:               "report-faulty (NODE... | -l SELECTOR | --pool POOL) --behavior BEHAVIOR",
		ValidArgsFunction: a.completeNodes,
		Short:             "Ask for a faulty node's repair: drained in order, its host reported to Compute Engine, back when the VM returns",
		Long: `Ask for a faulty node's repair: the label ` + protocol.LabelReportFaulty + `=BEHAVIOR
(and your --description). The aggregator taints the node faulty at once and approves its repair
within the pool's maxInRepair; the node's agent drains it in order, then asks Compute Engine to
repair the host (reportHostAsFaulty, or performMaintenance for a repair Compute Engine booked).
The request stands until the node is repaired (its agent removes the label then) or you remove
the label; a repair that failed is approved again after the pool's cool-down.

Several nodes, or those a selector or a pool matches, are each shown, asked for once and
labelled; the pool's maxInRepair still bounds how many are repaired at once.

BEHAVIOR is Compute Engine's: ` + strings.Join(protocol.FaultBehaviors, ", ") + `.`,
		RunE: func(cmd *cobra.Command, names []string) error {
			if (len(names) == 0) == (o.Selector == "" && o.Pool == "") {
				return fmt.Errorf("%w: report-faulty takes NODE..., or -l SELECTOR or --pool POOL", errUsage)
			}
			if !protocol.ValidBehavior(behavior) {
				return fmt.Errorf("%w: --behavior %q: want one of %s", errUsage, behavior, strings.Join(protocol.FaultBehaviors, ", "))
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
			for _, n := range targets {
				fmt.Fprintf(a.out, "%s\n", plugin.FaultPreview(in, n.Name, behavior, description))
				if err := a.showPlan(ctx, c, n.Name); err != nil {
					return err
				}
			}
			if dryRun {
				fmt.Fprintln(a.out, "Dry run: nothing changed.")
				return nil
			}
			if !yes && !a.ask(fmt.Sprintf("Report %s faulty (%s)?", nodeList(targets), behavior)) {
				fmt.Fprintln(a.out, "Not reported.")
				return nil
			}
			desc := any(nil) // removes a description left from before
			if description != "" {
				desc = description
			}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
				"labels":      map[string]any{protocol.LabelReportFaulty: behavior},
				"annotations": map[string]any{protocol.AnnotationReportFaultyDescription: desc},
			}})
			for _, n := range targets {
				if _, err := c.PatchNode(ctx, n.Name, types.MergePatchType, patch, "kubectl-gce_maintenance", ""); err != nil {
					return plugin.Explain(err, "label "+n.Name)
				}
				fmt.Fprintf(a.out, "Labelled %s %s=%s; `kubectl gce-maintenance why %s` follows it.\n", n.Name, protocol.LabelReportFaulty, behavior, n.Name)
			}
			return nil
		},
	}
	o.addFlags(cmd, false)
	cmd.Flags().StringVar(&behavior, "behavior", "", "The fault: "+strings.Join(protocol.FaultBehaviors, ", ")+".")
	cmd.Flags().StringVar(&description, "description", "", "What you saw, in your words; sent to Compute Engine with the report.")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Show what would happen; change nothing.")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Do not ask for confirmation.")
	return cmd
}
