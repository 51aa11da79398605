package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/policy"
)

// policyCommand is `kubectl gce-maintenance policy validate`: a policy checked
// as the aggregator reads it, before it is applied. It writes nothing.
func (a *app) policyCommand() *cobra.Command {
	root := &cobra.Command{Use: "policy", Short: "The policy ConfigMap's policy.yaml: windows, exclusions, caps, faults"}
	var file, configMap string
	validate := &cobra.Command{
		Use:   "validate (-f FILE | --config-map NAMESPACE/NAME)",
		Short: "Check a policy as the aggregator reads it, before it is applied",
		Long: "Check a policy.yaml as the aggregator reads it: every problem is named, with its field. FILE is a policy.yaml, " +
			"or a ConfigMap's manifest whose data holds one ('-': standard input); --config-map reads the cluster's. " +
			"Exit 0: valid; 1: not (a pool's own problem holds only that pool, and is one too).",
		Example: "  kubectl gce-maintenance policy validate -f policy.yaml\n  kubectl gce-maintenance policy validate --config-map maintenance-handler/maintenance-handler",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (file == "") == (configMap == "") {
				return fmt.Errorf("%w: give -f FILE or --config-map NAMESPACE/NAME", errUsage)
			}
			text, from, err := a.policyText(cmd.Context(), file, configMap)
			if err != nil {
				return err
			}
			return a.validatePolicy(text, from)
		},
	}
	validate.Flags().StringVarP(&file, "filename", "f", "", "A policy.yaml, or a ConfigMap's manifest holding one ('-': standard input).")
	validate.Flags().StringVar(&configMap, "config-map", "", "The cluster's policy ConfigMap to check, namespace/name.")
	root.AddCommand(validate)
	return root
}

// policyText is the policy.yaml that file or configMap names, and where it
// is from.
func (a *app) policyText(ctx context.Context, file, configMap string) (string, string, error) {
	if configMap != "" {
		ns, name, ok := strings.Cut(configMap, "/")
		if !ok || ns == "" || name == "" {
			return "", "", fmt.Errorf("%w: --config-map %q: want namespace/name", errUsage, configMap)
		}
		c, err := a.client()
		if err != nil {
			return "", "", err
		}
		cm, err := c.GetConfigMap(ctx, ns, name)
		if err != nil {
			return "", "", fmt.Errorf("the ConfigMap %s: %w", configMap, err)
		}
		text, ok := cm.Data[policy.ConfigKey]
		if !ok {
			return "", "", fmt.Errorf("the ConfigMap %s has no %s", configMap, policy.ConfigKey)
		}
		return text, "ConfigMap " + configMap, nil
	}
	var raw []byte
	var err error
	if file == "-" {
		raw, err = io.ReadAll(a.in)
	} else {
		raw, err = os.ReadFile(file)
	}
	if err != nil {
		return "", "", err
	}
	// A ConfigMap's manifest: its policy.yaml.
	var cm corev1.ConfigMap
	if yaml.Unmarshal(raw, &cm) == nil && cm.Kind == "ConfigMap" {
		text, ok := cm.Data[policy.ConfigKey]
		if !ok {
			return "", "", fmt.Errorf("the ConfigMap in %s has no %s", file, policy.ConfigKey)
		}
		return text, file + " (ConfigMap " + cm.Name + ")", nil
	}
	return string(raw), file, nil
}

// validatePolicy parses text as the aggregator does and says what it
// found, or every problem.
func (a *app) validatePolicy(text, from string) error {
	cfg, err := policy.ParseConfig(text)
	if err != nil {
		return fmt.Errorf("%s is not valid: %w", from, err)
	}
	if len(cfg.PoolErrors) > 0 {
		var lines []string
		for _, pool := range slices.Sorted(maps.Keys(cfg.PoolErrors)) {
			lines = append(lines, fmt.Sprintf("pool %s: %v", pool, cfg.PoolErrors[pool]))
		}
		return fmt.Errorf("%s is not valid: the aggregator would leave these pools without opportunistic maintenance:\n%s", from, strings.Join(lines, "\n"))
	}
	pools := slices.Sorted(maps.Keys(cfg.Pools))
	fmt.Fprintf(a.out, "%s is valid: the cluster's settings and %d pools (%s)\n", from, len(pools), strings.Join(pools, ", "))
	return nil
}
