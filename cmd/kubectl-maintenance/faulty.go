package main

import (
	"bufio"
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
		Use:               "report-faulty NODE --behavior BEHAVIOR",
		ValidArgsFunction: a.completeNodes,
		Short:             "Ask for a faulty node's repair: drained in order, its host reported to Compute Engine, back when the VM returns",
		Long: `Ask for a faulty node's repair: the label ` + protocol.LabelReportFaulty + `=BEHAVIOR
(and your --description). The aggregator taints the node faulty at once and approves its repair
within the pool's maxInRepair; the node's agent drains it in order, then asks Compute Engine to
repair the host (reportHostAsFaulty, or performMaintenance for a repair Compute Engine booked).
The request stands until the node is repaired (its agent removes the label then) or you remove
the label; a repair that failed is approved again after the pool's cool-down.

BEHAVIOR is Compute Engine's: ` + strings.Join(protocol.FaultBehaviors, ", ") + `.`,
		RunE: func(cmd *cobra.Command, names []string) error {
			if len(names) != 1 {
				return fmt.Errorf("%w: report-faulty takes one NODE", errUsage)
			}
			if !protocol.ValidBehavior(behavior) {
				return fmt.Errorf("%w: --behavior %q: want one of %s", errUsage, behavior, strings.Join(protocol.FaultBehaviors, ", "))
			}
			ctx := cmd.Context()
			c, in, err := a.load(ctx, o, names)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s\n", plugin.FaultPreview(in, names[0], behavior, description))
			if err := a.showPlan(ctx, c, names[0]); err != nil {
				return err
			}
			if dryRun {
				fmt.Fprintln(a.out, "Dry run: nothing changed.")
				return nil
			}
			if !yes {
				fmt.Fprintf(a.out, "Report %s faulty (%s)? [y/N] ", names[0], behavior)
				answer, _ := bufio.NewReader(a.in).ReadString('\n')
				if ans := strings.ToLower(strings.TrimSpace(answer)); ans != "y" && ans != "yes" {
					fmt.Fprintln(a.out, "Not reported.")
					return nil
				}
			}
			desc := any(nil) // removes a description left from before
			if description != "" {
				desc = description
			}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
				"labels":      map[string]any{protocol.LabelReportFaulty: behavior},
				"annotations": map[string]any{protocol.AnnotationReportFaultyDescription: desc},
			}})
			if _, err := c.PatchNode(ctx, names[0], types.MergePatchType, patch, "kubectl-maintenance", ""); err != nil {
				return plugin.Explain(err, "label the node")
			}
			fmt.Fprintf(a.out, "Labelled %s %s=%s; `kubectl maintenance why %s` follows it.\n", names[0], protocol.LabelReportFaulty, behavior, names[0])
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
