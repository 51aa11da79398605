package main

import (
	"os"
	"testing"

	"github.com/spf13/pflag"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
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

// TestChartArgsValidate: what the chart starts the agent with, by default,
// with each example values file and with every duration the chart takes
// set, parses and passes the agent's own checks.
func TestChartArgsValidate(t *testing.T) {
	t.Setenv("NODE_NAME", "n")
	t.Setenv("POD_NAMESPACE", "maintenance-handler-agent")
	t.Setenv("POD_NAME", "maintenance-handler-agent-x")
	const chart = "../../charts/maintenance-handler"
	const set = "agent.metadataTimeout=30s,agent.unhealthyAfter=2m,agent.hostMaintenanceDeadline=55m,agent.preemptionDeadline=25s," +
		"agent.preemptionNotice=120s,agent.knownEnd=none,agent.knownEndLead=2h,agent.ongoingDeadline=4m,agent.manualDrainTimeout=2h,agent.manualDrainEscalate=true," +
		"agent.manualStartTimeout=20m,agent.voluntaryFailureCooldown=2h,agent.opportunisticTriggerMaxAge=3m,agent.reportTimeout=45m,agent.evictionRetryInterval=10s," +
		"agent.drainReserve=0s,agent.drainMargin=5s,agent.kubeAPIBurst=200,agent.logLevel=debug,agent.noticeAllowedCIDRs={10.8.0.0/14}"
	testworld.EachChartRender(t, chart, "agent", set, func(render, args []string) {
		o := NewOptions()
		fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Errorf("helm template %v: the agent's args do not parse: %v", render, err)
			return
		}
		if err := o.Validate(); err != nil {
			t.Errorf("helm template %v: the agent refuses its args: %v", render, err)
		}
	})
}
