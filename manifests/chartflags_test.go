package manifests_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
)

// flagExample is a value of the chart set as a user would, and the
// argument it must give the binary.
type flagExample struct {
	set  []string
	want string
}

// agentFlagExamples and aggregatorFlagExamples set, by flag name, the
// chart value docs/flags.md names for the flag (flagdoc's chart entries).
var agentFlagExamples = map[string]flagExample{
	"listen-address":                {[]string{"--set", "agent.metricsPort=9300"}, "--listen-address=$(HOST_IP):9300"},
	"notice-listen-address":         {[]string{"--set", "agent.noticePort=8190"}, "--notice-listen-address=$(HOST_IP):8190"},
	"notice-allowed-cidrs":          {[]string{"--set-json", `agent.noticeAllowedCIDRs=["10.8.0.0/14","fd00::/64"]`}, "--notice-allowed-cidrs=10.8.0.0/14,fd00::/64"},
	"metadata-timeout":              {[]string{"--set", "agent.metadataTimeout=30s"}, "--metadata-timeout=30s"},
	"unhealthy-after":               {[]string{"--set", "agent.unhealthyAfter=5m"}, "--unhealthy-after=5m"},
	"host-maintenance-deadline":     {[]string{"--set", "agent.hostMaintenanceDeadline=55m"}, "--host-maintenance-deadline=55m"},
	"preemption-deadline":           {[]string{"--set", "agent.preemptionDeadline=25s"}, "--preemption-deadline=25s"},
	"preemption-notice":             {[]string{"--set", "agent.preemptionNotice=120s"}, "--preemption-notice=120s"},
	"known-end":                     {[]string{"--set", "agent.knownEnd=none"}, "--known-end=none"},
	"known-end-lead":                {[]string{"--set", "agent.knownEndLead=2h"}, "--known-end-lead=2h"},
	"gke-handler":                   {[]string{"--set", "agent.gkeHandler=ignore"}, "--gke-handler=ignore"},
	"ongoing-deadline":              {[]string{"--set", "agent.ongoingDeadline=4m"}, "--ongoing-deadline=4m"},
	"manual-drain-timeout":          {[]string{"--set", "agent.manualDrainTimeout=2h"}, "--manual-drain-timeout=2h"},
	"compute-caller":                {[]string{"--set", "computeCaller=node"}, "--compute-caller=node"},
	"compute-endpoint":              {[]string{"--set", "computeEndpoint=https://compute-mh.p.googleapis.com/compute/v1/"}, "--compute-endpoint=https://compute-mh.p.googleapis.com/compute/v1/"},
	"accelerator-resources":         {[]string{"--set-json", `agent.acceleratorResources=["nvidia.com/gpu","amd.com/gpu"]`}, "--accelerator-resources=nvidia.com/gpu,amd.com/gpu"},
	"accelerator-device-classes":    {[]string{"--set-json", `agent.acceleratorDeviceClasses=["gpu.nvidia.com"]`}, "--accelerator-device-classes=gpu.nvidia.com"},
	"pool-label":                    {[]string{"--set", "poolLabel=example.com/pool"}, "--pool-label=example.com/pool"},
	"observe-only":                  {[]string{"--set", "observeOnly=true"}, "--observe-only"},
	"slice-label":                   {[]string{"--set", "sliceLabel=example.com/slice"}, "--slice-label=example.com/slice"},
	"reservation-groups":            {[]string{"--set", "reservationGroups=subblock"}, "--reservation-groups=subblock"},
	"voluntary-failure-cooldown":    {[]string{"--set", "agent.voluntaryFailureCooldown=2h"}, "--voluntary-failure-cooldown=2h"},
	"manual-drain-escalate":         {[]string{"--set", "agent.manualDrainEscalate=true"}, "--manual-drain-escalate"},
	"opportunistic-trigger-max-age": {[]string{"--set", "agent.opportunisticTriggerMaxAge=3m"}, "--opportunistic-trigger-max-age=3m"},
	"manual-start-timeout":          {[]string{"--set", "agent.manualStartTimeout=20m"}, "--manual-start-timeout=20m"},
	"report-timeout":                {[]string{"--set", "agent.reportTimeout=45m"}, "--report-timeout=45m"},
	"eviction-retry-interval":       {[]string{"--set", "agent.evictionRetryInterval=10s"}, "--eviction-retry-interval=10s"},
	"drain-reserve":                 {[]string{"--set", "agent.drainReserve=0s"}, "--drain-reserve=0s"},
	"drain-margin":                  {[]string{"--set", "agent.drainMargin=5s"}, "--drain-margin=5s"},
	"eviction-requests":             {[]string{"--set", "agent.evictionRequests=true"}, "--eviction-requests"},
	"kube-api-qps":                  {[]string{"--set-json", "agent.kubeAPIQPS=20.5"}, "--kube-api-qps=20.5"},
	"kube-api-burst":                {[]string{"--set", "agent.kubeAPIBurst=1000000"}, "--kube-api-burst=1000000"},
	"log-level":                     {[]string{"--set", "agent.logLevel=debug"}, "--log-level=debug"},
}

var aggregatorFlagExamples = map[string]flagExample{
	"listen-address":                {[]string{"--set", "aggregator.metricsPort=9301"}, "--listen-address=:9301"},
	"unhealthy-after":               {[]string{"--set", "aggregator.unhealthyAfter=4m"}, "--unhealthy-after=4m"},
	"pool-label":                    {[]string{"--set", "poolLabel=example.com/pool"}, "--pool-label=example.com/pool"},
	"observe-only":                  {[]string{"--set", "observeOnly=true"}, "--observe-only"},
	"interval":                      {[]string{"--set", "aggregator.interval=1m"}, "--interval=1m"},
	"lease-duration":                {[]string{"--set", "aggregator.leaseDuration=30s"}, "--lease-duration=30s"},
	"renew-deadline":                {[]string{"--set", "aggregator.renewDeadline=20s"}, "--renew-deadline=20s"},
	"retry-period":                  {[]string{"--set", "aggregator.retryPeriod=4s"}, "--retry-period=4s"},
	"kube-api-qps":                  {[]string{"--set", "aggregator.kubeAPIQPS=80"}, "--kube-api-qps=80"},
	"kube-api-burst":                {[]string{"--set", "aggregator.kubeAPIBurst=160"}, "--kube-api-burst=160"},
	"gke-opportunistic-config":      {[]string{"--set", "aggregator.gkeOpportunisticConfig=adopt"}, "--gke-opportunistic-config=adopt"},
	"slice-label":                   {[]string{"--set", "sliceLabel=example.com/slice"}, "--slice-label=example.com/slice"},
	"reservation-groups":            {[]string{"--set", "reservationGroups=block"}, "--reservation-groups=block"},
	"reservations":                  {[]string{"--set-json", `aggregator.reservations=["projects/p1/zones/us-central1-a/reservations/a3","projects/p1/zones/us-central1-b/reservations/a4"]`}, "--reservations=projects/p1/zones/us-central1-a/reservations/a3,projects/p1/zones/us-central1-b/reservations/a4"},
	"reservation-interval":          {[]string{"--set", "aggregator.reservationInterval=10m"}, "--reservation-interval=10m"},
	"notify-url-file":               {[]string{"--set", "aggregator.notifier.urlSecret=hook"}, "--notify-url-file=/etc/maintenance-handler/notifier/url"},
	"notify-format":                 {[]string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.format=slack"}, "--notify-format=slack"},
	"notify-template-file":          {[]string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.templateKey=t"}, "--notify-template-file=/etc/maintenance-handler/notifier/t"},
	"notify-headers-file":           {[]string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.headersKey=h"}, "--notify-headers-file=/etc/maintenance-handler/notifier/h"},
	"notify-timeout":                {[]string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.timeout=3s"}, "--notify-timeout=3s"},
	"notify-retries":                {[]string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.retries=2"}, "--notify-retries=2"},
	"cluster-name":                  {[]string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.clusterName=prod"}, "--cluster-name=prod"},
	"notify-steps":                  {[]string{"--set", "aggregator.notifier.urlSecret=hook", "--set-json", `aggregator.notifier.steps=["draining","failed"]`}, "--notify-steps=draining,failed"},
	"notify-digest":                 {[]string{"--set", "aggregator.notifier.urlSecret=hook", "--set", "aggregator.notifier.digest=1m"}, "--notify-digest=1m"},
	"maintain-unused-capacity":      {[]string{"--set", "aggregator.maintainUnusedCapacity=true"}, "--maintain-unused-capacity"},
	"compute-endpoint":              {[]string{"--set", "computeEndpoint=https://compute-mh.p.googleapis.com/compute/v1/"}, "--compute-endpoint=https://compute-mh.p.googleapis.com/compute/v1/"},
	"compute-caller":                {[]string{"--set", "computeCaller=node"}, "--compute-caller=node"},
	"project":                       {[]string{"--set", "aggregator.project=example.com:gpu-fleet"}, "--project=example.com:gpu-fleet"},
	"regions":                       {[]string{"--set-json", `aggregator.regions=["us-central1","europe-west4"]`}, "--regions=us-central1,europe-west4"},
	"autoscaler-status":             {[]string{"--set", "aggregator.autoscalerStatus=autoscaler/status"}, "--autoscaler-status=autoscaler/status"},
	"repair-ask-grace":              {[]string{"--set", "aggregator.repairAskGrace=20m"}, "--repair-ask-grace=20m"},
	"trigger-answer-timeout":        {[]string{"--set", "aggregator.triggerAnswerTimeout=15m"}, "--trigger-answer-timeout=15m"},
	"recreate-window":               {[]string{"--set", "aggregator.recreateWindow=2h"}, "--recreate-window=2h"},
	"eviction-check-listen-address": {[]string{"--set", "aggregator.evictionCheckPort=8443"}, "--eviction-check-listen-address=:8443"},
	"eviction-check-qps":            {[]string{"--set", "aggregator.evictionCheckQPS=900"}, "--eviction-check-qps=900"},
	"eviction-check-burst":          {[]string{"--set", "aggregator.evictionCheckBurst=1800"}, "--eviction-check-burst=1800"},
	"eviction-check-callers":        {[]string{"--set-json", `aggregator.evictionCheckCallers=["apiserver"]`}, "--eviction-check-callers=apiserver"},
	"log-level":                     {[]string{"--set", "aggregator.logLevel=warn"}, "--log-level=warn"},
	"agent-namespace":               {[]string{"--set", "agent.namespace.name=gpu-agents"}, "--agent-namespace=gpu-agents"},
}

// TestChartValuesSetTheirFlags: each flag docs/flags.md names a chart
// value for is set by that value, as the user sets it (helm template with
// the value alone), and by no other; a flag with a chart value but no
// example here fails, so that a new value comes with its check.
func TestChartValuesSetTheirFlags(t *testing.T) {
	for _, bin := range []struct {
		name      string
		chart     map[string]flagdoc.Chart
		examples  map[string]flagExample
		container func(t testing.TB, o map[string]*unstructured.Unstructured) []string
	}{
		{"agent", flagdoc.AgentChart, agentFlagExamples, func(t testing.TB, o map[string]*unstructured.Unstructured) []string {
			for k, v := range o {
				if strings.HasPrefix(k, "DaemonSet ") {
					return containerArgs(t, v)
				}
			}
			t.Fatal("no DaemonSet")
			return nil
		}},
		{"aggregator", flagdoc.AggregatorChart, aggregatorFlagExamples, func(t testing.TB, o map[string]*unstructured.Unstructured) []string {
			return containerArgs(t, o["Deployment maintenance-handler/maintenance-handler-aggregator"])
		}},
	} {
		for name, c := range bin.chart {
			ex, ok := bin.examples[name]
			switch {
			case c.Value == "" && ok:
				t.Errorf("%s --%s: an example, but the chart sets it itself (%s)", bin.name, name, c.Itself)
				continue
			case c.Value == "":
				continue
			case !ok:
				t.Errorf("%s --%s: the chart's value %s has no example in this test", bin.name, name, c.Value)
				continue
			}
			if !slices.ContainsFunc(ex.set, func(s string) bool { return strings.HasPrefix(s, c.Value+"=") }) {
				t.Errorf("%s --%s: the example %v does not set its value %s", bin.name, name, ex.set, c.Value)
			}
			t.Run(bin.name+"/"+name, func(t *testing.T) {
				args := bin.container(t, mustTemplate(t, ex.set...))
				if !slices.Contains(args, ex.want) {
					t.Errorf("helm template %v: the %s's args %q lack %q", ex.set, bin.name, args, ex.want)
				}
			})
		}
		for name := range bin.examples {
			if _, ok := bin.chart[name]; !ok {
				t.Errorf("%s --%s: an example, but no chart entry", bin.name, name)
			}
		}
	}
}

// containerArgs is the args of the first container of o's pod template.
func containerArgs(t testing.TB, o *unstructured.Unstructured) []string {
	t.Helper()
	containers := field(t, o, "spec", "template", "spec", "containers").([]any)
	return anyStrings(containers[0].(map[string]any)["args"])
}

// flagValues is the set of values.yaml's keys that set a flag of either
// binary, which TestChartValuesSetTheirFlags checks.
func flagValues() map[string]bool {
	values := map[string]bool{}
	for _, chart := range []map[string]flagdoc.Chart{flagdoc.AgentChart, flagdoc.AggregatorChart} {
		for _, c := range chart {
			if c.Value != "" {
				values[c.Value] = true
			}
		}
	}
	return values
}
