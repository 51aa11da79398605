package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
	"github.com/maintenance-handler/maintenance-handler/internal/plugin"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// readOptions are the flags that say what to read.
type readOptions struct {
	plugin.ReadOptions
	output string
}

func (o *readOptions) addFlags(cmd *cobra.Command, output bool) {
	cmd.Flags().StringVarP(&o.Selector, "selector", "l", "", "Only nodes matching this label selector.")
	cmd.Flags().StringVar(&o.Pool, "pool", "", "Only the nodes of this pool.")
	cmd.Flags().StringVar(&o.Policy, "policy", "maintenance-handler/maintenance-handler", "The policy ConfigMap, namespace/name (its policy.yaml: windows, exclusions, caps); empty for none.")
	cmd.Flags().StringVar(&o.PoolLabel, "pool-label", protocol.LabelNodePool, flagdoc.PoolLabel.Help)
	cmd.Flags().StringVar(&o.SliceLabel, "slice-label", "", flagdoc.SliceLabel.Help)
	cmd.Flags().StringVar(&o.ReservationGroups, "reservation-groups", "", flagdoc.ReservationGroups.Help)
	cmd.Flags().StringVar(&o.AgentNamespace, "agent-namespace", "maintenance-handler-agent", "The agents' namespace, where observed nodes keep their state; empty: none.")
	if output {
		cmd.Flags().StringVarP(&o.output, "output", "o", "", "json, yaml or wide.")
	}
}

func (a *app) client() (*kube.Client, error) {
	cfg, err := a.flags.config()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return kube.New(cfg)
}

// load connects and reads what the command shows.
func (a *app) load(ctx context.Context, o readOptions, names []string) (*kube.Client, plugin.Input, error) {
	c, err := a.client()
	if err != nil {
		return nil, plugin.Input{}, err
	}
	in, err := plugin.Read(ctx, c, a.now(), o.ReadOptions, names)
	return c, in, err
}

func (a *app) statusCommand() *cobra.Command {
	var o readOptions
	var watch bool
	cmd := &cobra.Command{
		Use:               "status [NODE...]",
		ValidArgsFunction: a.completeNodes,
		Short:             "Every node's maintenance, and every pool's: pending, in maintenance, caps, windows",
		Long: `Every node's maintenance, and every pool's: pending, in maintenance, caps, windows.

A line per node:
  WINDOW         the pending maintenance's window start, in local time and how far;
                 once the window has opened, "open until" its end: the VM may stop within it
  PHASE          Idle, Draining (workloads being stopped) or Terminating (drained; the VM may stop)
  REASON         why it is in maintenance: host-maintenance, preemption, manual (or opportunistic), slice
  DEADLINE       when the VM is expected to stop, while in maintenance
  PODS LEFT      the pods the drain has still to stop (not the agent's own, mirror or finished pods)
  IDLE           idle since when, or why busy (accelerators in use, safe-to-evict=false)
  DECISION       the aggregator's last Event about the node (-o wide adds its words)
  INTERRUPTIONS  the interruptions the agent counted, by type and reason
  CONDITIONS     (-o wide) the node lifecycle conditions the agent keeps that are True:
                 MaintenancePlanned, MaintenanceInProgress, DrainInProgress, Drained
A line per multi-host slice, instead of one per host (they go down and come back together):
  HOSTS          how many, "3 of 4" when a host's Node is gone, and their names
  PHASES         the hosts by phase
  CAUSE          the host whose maintenance takes the slice down, and that maintenance
A line per pool:
  PENDING        nodes with a pending notice
  IN MAINTENANCE nodes in maintenance, of any reason
  VOLUNTARY      of those, the manual or opportunistic ones, which CAP bounds (a slice's, every host)
  CAP            the most nodes the pool may have in voluntary maintenance at once
  MIN-NODES      the nodes the pool keeps Ready and out of maintenance (opportunistic)
  NEXT WINDOW    the earliest pending window
  CONFIG         none, valid, or why the pool's opportunistic configuration is invalid
A line per faulty node, when there are any (see report-faulty):
  BEHAVIOR       the fault, as Compute Engine names it; SEEN BY: condition or person
  REPAIR         in repair (and the agent's phase), or why it waits: max_in_repair,
                 maintenance_under_way, cooling_down
  POOL IN REPAIR the pool's nodes in repair, of its maxInRepair
Then the cluster's cap on voluntary maintenance, which the pools share.`,
		RunE: func(cmd *cobra.Command, names []string) error {
			if o.output != "" && o.output != "json" && o.output != "yaml" && o.output != "wide" {
				return fmt.Errorf("%w: --output %q: want json, yaml or wide", errUsage, o.output)
			}
			c, in, err := a.load(cmd.Context(), o, names)
			if err != nil {
				return err
			}
			if err := a.printStatus(in, o.output); err != nil || !watch {
				return err
			}
			return a.watchStatus(cmd.Context(), c, o, names)
		},
	}
	o.addFlags(cmd, true)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "After the table, print it again on every change of the Nodes (at most once a second), until interrupted.")
	return cmd
}

// printStatus prints in's status as output asks.
func (a *app) printStatus(in plugin.Input, output string) error {
	st := plugin.BuildStatus(in)
	switch output {
	case "json":
		enc := json.NewEncoder(a.out)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	case "yaml":
		b, err := yaml.Marshal(st)
		if err != nil {
			return err
		}
		_, err = a.out.Write(b)
		return err
	}
	return st.WriteTable(a.out, in.Now, a.loc, output == "wide")
}

// watchStatus prints the status again after every change of the Nodes,
// at most once a second, until ctx ends.
func (a *app) watchStatus(ctx context.Context, c *kube.Client, o readOptions, names []string) error {
	for ctx.Err() == nil {
		w, err := c.WatchNodes(ctx, metav1.ListOptions{})
		if err != nil {
			return plugin.Explain(err, "watch Nodes")
		}
		changed := false
		tick := time.NewTicker(time.Second)
	events:
		for {
			select {
			case <-ctx.Done():
				break events
			case _, ok := <-w.ResultChan():
				if !ok {
					break events // the server ended the watch: watch again
				}
				changed = true
			case <-tick.C:
				if !changed {
					continue
				}
				changed = false
				in, err := plugin.Read(ctx, c, a.now(), o.ReadOptions, names)
				if err != nil {
					if ctx.Err() == nil {
						fmt.Fprintln(a.errOut, "kubectl gce-maintenance:", err)
					}
					continue
				}
				fmt.Fprintf(a.out, "\n--- %s\n", a.now().In(a.loc).Format("15:04:05"))
				if err := a.printStatus(in, o.output); err != nil {
					w.Stop()
					tick.Stop()
					return err
				}
			}
		}
		w.Stop()
		tick.Stop()
	}
	return nil
}

func (a *app) whyCommand() *cobra.Command {
	var o readOptions
	cmd := &cobra.Command{
		Use:               "why NODE",
		ValidArgsFunction: a.completeNodes,
		Short:             "Why a node is or is not in maintenance, not picked, or rejected",
		RunE: func(cmd *cobra.Command, names []string) error {
			if len(names) != 1 {
				return fmt.Errorf("%w: why takes one NODE", errUsage)
			}
			_, in, err := a.load(cmd.Context(), o, names)
			if err != nil {
				return err
			}
			for _, n := range in.Nodes {
				if n.Name == names[0] {
					fmt.Fprintln(a.out, plugin.Why(in, n))
				}
			}
			return nil
		},
	}
	o.addFlags(cmd, false)
	return cmd
}
