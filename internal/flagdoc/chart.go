package flagdoc

import "strings"

// Chart is how the Helm chart (charts/maintenance-handler) sets one flag:
// through a typed value of its values.yaml, checked by its schema, or by
// itself, from what the install already says. Every flag of the agent and
// the aggregator has one (Reference fails on a flag without), so that no
// setting is left to the chart's extraArgs, which no schema checks.
type Chart struct {
	// Value is the path in values.yaml of the value that sets the flag
	// ("agent.logLevel"); empty for a flag the chart sets itself.
	Value string
	// Itself says, for a flag no value sets, what the chart gives it and
	// why ("the Downward API: the pod's node").
	Itself string
}

// cell is c as the reference's chart column shows it.
func (c Chart) cell() string {
	if c.Value != "" {
		return "`" + c.Value + "`"
	}
	return "set by the chart: " + c.Itself
}

// The marks of the flags the chart sets itself, shared by both binaries.
var (
	inCluster  = Chart{Itself: "none: the pod's service account, in-cluster"}
	podNodeEnv = Chart{Itself: "the pod's node, from the Downward API"}
)

// AgentChart is how the chart sets each of the agent's flags, by name.
var AgentChart = map[string]Chart{
	"node-name":                     podNodeEnv,
	"pod-namespace":                 {Itself: "the pod's namespace, from the Downward API"},
	"pod-name":                      {Itself: "the pod's name, from the Downward API"},
	"kubeconfig":                    inCluster,
	"listen-address":                {Value: "agent.metricsPort"},
	"notice-listen-address":         {Value: "agent.noticePort"},
	"notice-allowed-cidrs":          {Value: "agent.noticeAllowedCIDRs"},
	"metadata-host":                 {Itself: "none: the VM's own metadata server (tests and the demo set another)"},
	"metadata-timeout":              {Value: "agent.metadataTimeout"},
	"unhealthy-after":               {Value: "agent.unhealthyAfter"},
	"host-maintenance-deadline":     {Value: "agent.hostMaintenanceDeadline"},
	"preemption-deadline":           {Value: "agent.preemptionDeadline"},
	"preemption-notice":             {Value: "agent.preemptionNotice"},
	"known-end":                     {Value: "agent.knownEnd"},
	"known-end-lead":                {Value: "agent.knownEndLead"},
	"gke-handler":                   {Value: "agent.gkeHandler"},
	"ongoing-deadline":              {Value: "agent.ongoingDeadline"},
	"manual-drain-timeout":          {Value: "agent.manualDrainTimeout"},
	"compute-caller":                {Value: "computeCaller"},
	"compute-endpoint":              {Value: "computeEndpoint"},
	"accelerator-resources":         {Value: "agent.acceleratorResources"},
	"accelerator-device-classes":    {Value: "agent.acceleratorDeviceClasses"},
	"policy-configmap":              {Itself: "the ConfigMap of the chart's `policy`, `<release namespace>/maintenance-handler`"},
	"pool-label":                    {Value: "poolLabel"},
	"observe-only":                  {Value: "observeOnly"},
	"slice-label":                   {Value: "sliceLabel"},
	"reservation-groups":            {Value: "reservationGroups"},
	"voluntary-failure-cooldown":    {Value: "agent.voluntaryFailureCooldown"},
	"manual-drain-escalate":         {Value: "agent.manualDrainEscalate"},
	"opportunistic-trigger-max-age": {Value: "agent.opportunisticTriggerMaxAge"},
	"manual-start-timeout":          {Value: "agent.manualStartTimeout"},
	"report-timeout":                {Value: "agent.reportTimeout"},
	"eviction-retry-interval":       {Value: "agent.evictionRetryInterval"},
	"drain-reserve":                 {Value: "agent.drainReserve"},
	"drain-margin":                  {Value: "agent.drainMargin"},
	"eviction-requests":             {Value: "agent.evictionRequests"},
	"kube-api-qps":                  {Value: "agent.kubeAPIQPS"},
	"kube-api-burst":                {Value: "agent.kubeAPIBurst"},
	"log-level":                     {Value: "agent.logLevel"},
}

// AggregatorChart is how the chart sets each of the aggregator's flags, by
// name.
var AggregatorChart = map[string]Chart{
	"namespace":                     {Itself: "the release's namespace, from the Downward API"},
	"identity":                      {Itself: "the pod's name, from the Downward API"},
	"node-name":                     podNodeEnv,
	"kubeconfig":                    inCluster,
	"listen-address":                {Value: "aggregator.metricsPort"},
	"unhealthy-after":               {Value: "aggregator.unhealthyAfter"},
	"config-map":                    {Itself: "`maintenance-handler`, the ConfigMap of the chart's `policy`"},
	"pool-label":                    {Value: "poolLabel"},
	"observe-only":                  {Value: "observeOnly"},
	"interval":                      {Value: "aggregator.interval"},
	"lease-name":                    {Itself: "its default, the Lease the chart's Role grants by name"},
	"lease-duration":                {Value: "aggregator.leaseDuration"},
	"renew-deadline":                {Value: "aggregator.renewDeadline"},
	"retry-period":                  {Value: "aggregator.retryPeriod"},
	"kube-api-qps":                  {Value: "aggregator.kubeAPIQPS"},
	"kube-api-burst":                {Value: "aggregator.kubeAPIBurst"},
	"gke-opportunistic-config":      {Value: "aggregator.gkeOpportunisticConfig"},
	"slice-label":                   {Value: "sliceLabel"},
	"reservation-groups":            {Value: "reservationGroups"},
	"reservations":                  {Value: "aggregator.reservations"},
	"reservation-interval":          {Value: "aggregator.reservationInterval"},
	"notify-url-file":               {Value: "aggregator.notifier.urlSecret"},
	"notify-format":                 {Value: "aggregator.notifier.format"},
	"notify-template-file":          {Value: "aggregator.notifier.templateKey"},
	"notify-headers-file":           {Value: "aggregator.notifier.headersKey"},
	"notify-timeout":                {Value: "aggregator.notifier.timeout"},
	"notify-retries":                {Value: "aggregator.notifier.retries"},
	"cluster-name":                  {Value: "aggregator.notifier.clusterName"},
	"notify-steps":                  {Value: "aggregator.notifier.steps"},
	"notify-digest":                 {Value: "aggregator.notifier.digest"},
	"maintain-unused-capacity":      {Value: "aggregator.maintainUnusedCapacity"},
	"compute-endpoint":              {Value: "computeEndpoint"},
	"compute-caller":                {Value: "computeCaller"},
	"project":                       {Value: "aggregator.project"},
	"regions":                       {Value: "aggregator.regions"},
	"autoscaler-status":             {Value: "aggregator.autoscalerStatus"},
	"repair-ask-grace":              {Value: "aggregator.repairAskGrace"},
	"trigger-answer-timeout":        {Value: "aggregator.triggerAnswerTimeout"},
	"recreate-window":               {Value: "aggregator.recreateWindow"},
	"eviction-check-listen-address": {Value: "aggregator.evictionCheckPort"},
	"eviction-check-service":        {Itself: "its default, the Service the chart makes"},
	"eviction-check-secret":         {Itself: "its default, the Secret the chart's Role grants by name"},
	"eviction-check-webhook":        {Itself: "its default, the webhook configuration the chart makes"},
	"eviction-check-qps":            {Value: "aggregator.evictionCheckQPS"},
	"eviction-check-burst":          {Value: "aggregator.evictionCheckBurst"},
	"eviction-check-hosts":          {Itself: "none: the chart's webhook calls the check through its Service"},
	"eviction-check-callers":        {Value: "aggregator.evictionCheckCallers"},
	"memory-limit":                  {Itself: "`aggregator.resources.limits.memory`, through `$MEMORY_LIMIT`"},
	"log-level":                     {Value: "aggregator.logLevel"},
	"uninstall":                     {Itself: "in the uninstall Job only (`uninstall.cleanNodes`)"},
	"agent-namespace":               {Value: "agent.namespace.name"},
}

// chartCell is the chart column of the reference for the flags names,
// one cell per distinct way the chart sets them, and the names the chart
// does not set (missing).
func chartCell(chart map[string]Chart, names []string) (cell string, missing []string) {
	var cells []string
	for _, n := range names {
		c, ok := chart[n]
		if !ok || (c.Value == "") == (c.Itself == "") {
			missing = append(missing, n)
			continue
		}
		if s := c.cell(); len(cells) == 0 || cells[len(cells)-1] != s {
			cells = append(cells, s)
		}
	}
	return strings.Join(cells, ", "), missing
}
