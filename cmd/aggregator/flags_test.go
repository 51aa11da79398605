package main

import (
	"os"
	"testing"

	"github.com/spf13/pflag"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestFlagReference: docs/flags.md lists every flag of the aggregator, each once,
// with its entry in package flagdoc and how the chart sets it (a value, or
// the chart itself: a flag with neither fails); UPDATE_DOCS=1 (make docs) writes it.
func TestFlagReference(t *testing.T) {
	for _, env := range []string{"POD_NAMESPACE", "POD_NAME", "NODE_NAME", "MEMORY_LIMIT", "KUBECONFIG"} {
		t.Setenv(env, "")
	}
	fs := pflag.NewFlagSet("aggregator", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	if err := flagdoc.CheckPage("../..", "aggregator", fs, flagdoc.Aggregator, flagdoc.AggregatorChart, os.Getenv("UPDATE_DOCS") != ""); err != nil {
		t.Error(err)
	}
}

// TestChartKeepsTheDefaults: each chart value that sets a flag of the
// aggregator either holds the flag's default or, unset, gives no flag and says
// what the default is (but those the chart makes an address of).
func TestChartKeepsTheDefaults(t *testing.T) {
	for _, env := range []string{"POD_NAMESPACE", "POD_NAME", "NODE_NAME", "MEMORY_LIMIT", "KUBECONFIG"} {
		t.Setenv(env, "")
	}
	values, err := os.ReadFile("../../charts/maintenance-handler/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("aggregator", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	if err := flagdoc.CheckChartDefaults(fs, flagdoc.AggregatorChart, values, "aggregator.metricsPort", "aggregator.evictionCheckPort", "agent.namespace.name"); err != nil {
		t.Error(err)
	}
}

// TestChartArgsValidate: what the chart starts the aggregator with, by
// default, with each example values file and with every duration the chart
// takes set, parses and passes the aggregator's own checks.
func TestChartArgsValidate(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "maintenance-handler")
	t.Setenv("POD_NAME", "maintenance-handler-aggregator-x")
	t.Setenv("NODE_NAME", "n")
	t.Setenv("MEMORY_LIMIT", "1536Mi")
	const chart = "../../charts/maintenance-handler"
	const set = "aggregator.interval=1m,aggregator.unhealthyAfter=4m,aggregator.leaseDuration=30s,aggregator.renewDeadline=20s," +
		"aggregator.retryPeriod=4s,aggregator.kubeAPIBurst=160,aggregator.evictionCheckBurst=1800,aggregator.gkeOpportunisticConfig=adopt," +
		"aggregator.reservationInterval=10m,aggregator.maintainUnusedCapacity=true,aggregator.repairAskGrace=20m,aggregator.triggerAnswerTimeout=15m," +
		"aggregator.recreateWindow=2h,aggregator.logLevel=warn,aggregator.notifier.urlSecret=hook,aggregator.notifier.timeout=3s,aggregator.notifier.retries=2"
	testworld.EachChartRender(t, chart, "aggregator", set, func(render, args []string) {
		o := NewOptions()
		fs := pflag.NewFlagSet("aggregator", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Errorf("helm template %v: the aggregator's args do not parse: %v", render, err)
			return
		}
		if err := o.Validate(); err != nil {
			t.Errorf("helm template %v: the aggregator refuses its args: %v", render, err)
		}
	})
}
