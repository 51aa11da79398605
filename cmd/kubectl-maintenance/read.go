package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/internal/plugin"
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
	cmd.Flags().StringVar(&o.PoolLabel, "pool-label", protocol.LabelNodePool, "The Node label naming a node's pool.")
	if output {
		cmd.Flags().StringVarP(&o.output, "output", "o", "", "json, yaml or wide.")
	}
}

func (a *app) client() (kubernetes.Interface, error) {
	cfg, err := a.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// load connects and reads what the command shows.
func (a *app) load(ctx context.Context, o readOptions, names []string) (kubernetes.Interface, plugin.Input, error) {
	c, err := a.client()
	if err != nil {
		return nil, plugin.Input{}, err
	}
	in, err := plugin.Read(ctx, c, a.now(), o.ReadOptions, names)
	return c, in, err
}

func (a *app) statusCommand() *cobra.Command {
	var o readOptions
	cmd := &cobra.Command{
		Use:   "status [NODE...]",
		Short: "Every node's maintenance, and every pool's: pending, in maintenance, caps, windows",
		RunE: func(cmd *cobra.Command, names []string) error {
			if o.output != "" && o.output != "json" && o.output != "yaml" && o.output != "wide" {
				return fmt.Errorf("%w: --output %q: want json, yaml or wide", errUsage, o.output)
			}
			_, in, err := a.load(cmd.Context(), o, names)
			if err != nil {
				return err
			}
			st := plugin.BuildStatus(in)
			switch o.output {
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
			return st.WriteTable(a.out, in.Now, a.loc, o.output == "wide")
		},
	}
	o.addFlags(cmd, true)
	return cmd
}

func (a *app) whyCommand() *cobra.Command {
	var o readOptions
	cmd := &cobra.Command{
		Use:   "why NODE",
		Short: "Why a node is or is not in maintenance, not picked, or rejected",
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
