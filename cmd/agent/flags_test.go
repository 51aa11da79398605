package main

import (
	"os"
	"testing"

	"github.com/spf13/pflag"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
)

// TestFlagReference: docs/flags.md lists every flag of the agent, each once,
// with its entry in package flagdoc and how the chart sets it (a value, or
// the chart itself: a flag with neither fails); UPDATE_DOCS=1 (make docs) writes it.
func TestFlagReference(t *testing.T) {
	for _, env := range []string{"POD_NAMESPACE", "POD_NAME", "NODE_NAME", "MEMORY_LIMIT", "KUBECONFIG"} {
		t.Setenv(env, "")
	}
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	if err := flagdoc.CheckPage("../..", "agent", fs, flagdoc.Agent, flagdoc.AgentChart, os.Getenv("UPDATE_DOCS") != ""); err != nil {
		t.Error(err)
	}
}

// TestChartKeepsTheDefaults: each chart value that sets a flag of the
// agent either holds the flag's default or, unset, gives no flag and says
// what the default is (but those the chart makes an address of).
func TestChartKeepsTheDefaults(t *testing.T) {
	for _, env := range []string{"POD_NAMESPACE", "POD_NAME", "NODE_NAME", "MEMORY_LIMIT", "KUBECONFIG"} {
		t.Setenv(env, "")
	}
	values, err := os.ReadFile("../../charts/maintenance-handler/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	if err := flagdoc.CheckChartDefaults(fs, flagdoc.AgentChart, values, "agent.metricsPort", "agent.noticePort"); err != nil {
		t.Error(err)
	}
}
