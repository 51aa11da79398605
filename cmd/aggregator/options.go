package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/internal/cli"
	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Options are the aggregator's flags. POD_NAMESPACE, POD_NAME and
// NODE_NAME come from the Downward API.
type Options struct {
	Namespace string
	Identity  string
	// NodeName is the node the replica runs on: its pods' addresses each
	// keep a share of their own on the replica's listeners (the kubelet
	// probes the replica from one of them), where every other node's pods
	// share one.
	NodeName      string
	Kubeconfig    string
	ListenAddress string
	// UnhealthyAfter: /healthz fails when a watch the aggregator needs has
	// failed for this long.
	UnhealthyAfter time.Duration
	ConfigMap      string
	LeaseName      string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	PoolLabel      string
	// ObserveOnly: every node is observed only.
	ObserveOnly bool
	// ComputeCaller is the agents' --compute-caller: aggregator or node.
	ComputeCaller  string
	Interval       time.Duration
	RecreateWindow time.Duration
	// TriggerAnswerTimeout: see aggregator.Options.
	TriggerAnswerTimeout time.Duration
	// RepairAskGrace: see aggregator.Options.
	RepairAskGrace time.Duration
	// GKEConfig is leave or adopt (see aggregator.Options.AdoptGKEConfig).
	GKEConfig        string
	AutoscalerStatus string
	SliceLabel       string
	// ReservationGroups is none, subblock or block
	// (protocol.ParseReservationGroups).
	ReservationGroups string
	// Reservations are read every ReservationInterval, through the
	// Compute API at ComputeEndpoint ("": Google's).
	Reservations        []string
	ReservationInterval time.Duration
	ComputeEndpoint     string
	// Project and Regions are where the cluster's VMs are: the Compute
	// relay calls only on a VM in them (empty: the replica's own project
	// and region, from the metadata server; homeOf).
	Project string
	Regions []string
	// MaintainUnusedCapacity: see aggregator.Options.
	MaintainUnusedCapacity bool
	// The webhook notifier (aggregator.NotifyOptions); none without
	// NotifyURLFile.
	NotifyURLFile, NotifyFormat, ClusterName string
	// NotifyTemplateFile holds the template of --notify-format=template,
	// parsed by Validate into notifyTemplate; NotifyHeadersFile, more
	// headers for each post.
	NotifyTemplateFile, NotifyHeadersFile string
	notifyTemplate                        *template.Template
	NotifyTimeout                         time.Duration
	NotifyRetries                         int
	// NotifySteps are the steps told, parsed by Validate into
	// notifySteps (aggregator.NotifyOptions.Steps); NotifyDigest, the
	// window of a digest (0: none).
	NotifySteps  []string
	notifySteps  []fleet.Step
	NotifyDigest time.Duration
	LogLevel     string
	// KubeAPIQPS and KubeAPIBurst size the aggregator's API client: a
	// slice going down is one write per host at once.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// EvictionCheck* configure the eviction check (package admission):
	// where it listens (empty, the default: not served; the manifests set
	// it), the Service the API server
	// calls it through (its DNS names are the serving certificate's, with
	// EvictionCheckHosts), the CA's Secret and the webhook configuration
	// whose caBundle it keeps.
	EvictionCheckListenAddress string
	EvictionCheckService       string
	EvictionCheckSecret        string
	EvictionCheckWebhook       string
	EvictionCheckHosts         []string
	// EvictionCheckCallers are the users the check answers (a bearer
	// token the API server reviews as one of them); empty: any caller.
	EvictionCheckCallers []string
	// EvictionCheckQPS and EvictionCheckBurst size the check's own API
	// client (the pods it reads), apart from the leader's writes.
	EvictionCheckQPS   float32
	EvictionCheckBurst int
	// MemoryLimit is the container's memory limit (MEMORY_LIMIT, from the
	// Downward API): the Go runtime's soft limit is set to 90% of it
	// (unless GOMEMLIMIT is set), and the replica warns at 90%. Empty:
	// unknown.
	MemoryLimit string
	// Uninstall: remove what the product wrote and exit (aggregator.Uninstall).
	Uninstall bool
	// AgentNamespace is where the agents' pods run, which Uninstall waits
	// to be gone; empty: Namespace.
	AgentNamespace string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	host, _ := os.Hostname()
	id := os.Getenv("POD_NAME")
	if id == "" {
		id = host
	}
	return &Options{
		Namespace:            os.Getenv("POD_NAMESPACE"),
		Identity:             id,
		NodeName:             os.Getenv("NODE_NAME"),
		ListenAddress:        ":9103",
		UnhealthyAfter:       3 * time.Minute,
		ConfigMap:            "maintenance-handler",
		LeaseName:            aggregator.Default.LeaseName,
		LeaseDuration:        aggregator.Default.LeaseDuration,
		RenewDeadline:        aggregator.Default.RenewDeadline,
		RetryPeriod:          aggregator.Default.RetryPeriod,
		PoolLabel:            aggregator.Default.PoolLabel,
		Interval:             aggregator.Default.Interval,
		RecreateWindow:       aggregator.Default.RecreateWindow,
		TriggerAnswerTimeout: aggregator.Default.TriggerAnswerTimeout,
		RepairAskGrace:       aggregator.Default.RepairAskGrace,
		ReservationGroups:    "none",
		ComputeCaller:        "aggregator",
		ReservationInterval:  aggregator.Default.ReservationInterval,
		NotifyFormat:         aggregator.NotifyJSON,
		NotifyTimeout:        10 * time.Second,
		NotifyRetries:        5,
		NotifySteps:          stepNames(fleet.Steps),
		NotifyDigest:         aggregator.DefaultNotifyDigest,
		KubeAPIQPS:           50,
		KubeAPIBurst:         100,
		GKEConfig:            "leave",
		AutoscalerStatus:     aggregator.DefaultAutoscalerStatus,
		LogLevel:             "info",
		MemoryLimit:          os.Getenv("MEMORY_LIMIT"),

		EvictionCheckService: "maintenance-handler-eviction-check",
		EvictionCheckSecret:  "maintenance-handler-eviction-check",
		EvictionCheckWebhook: "maintenance-handler-agent-evictions",
		EvictionCheckQPS:     500,
		EvictionCheckBurst:   1000,
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the Lease and the ConfigMap (default $POD_NAMESPACE).")
	fs.StringVar(&o.Identity, "identity", o.Identity, "This replica's name in the Lease (default $POD_NAME, else the host).")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "The node this replica runs on (default $NODE_NAME).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, flagdoc.Kubeconfig.Help)
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "Address for /metrics, /healthz and /readyz.")
	fs.DurationVar(&o.UnhealthyAfter, "unhealthy-after", o.UnhealthyAfter, "/healthz fails when a watch it needs has failed this long.")
	fs.StringVar(&o.ConfigMap, "config-map", o.ConfigMap, "ConfigMap of the policy (policy.yaml), in --namespace; empty: none.")
	fs.StringVar(&o.LeaseName, "lease-name", o.LeaseName, "Name of the leader-election Lease.")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "Leader election: the Lease's duration.")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", o.RenewDeadline, "Leader election: how long the leader tries to renew.")
	fs.DurationVar(&o.RetryPeriod, "retry-period", o.RetryPeriod, "Leader election: the time between tries.")
	fs.StringVar(&o.PoolLabel, "pool-label", o.PoolLabel, flagdoc.PoolLabel.Help)
	fs.BoolVar(&o.ObserveOnly, "observe-only", o.ObserveOnly, flagdoc.ObserveOnly.Help)
	fs.DurationVar(&o.Interval, "interval", o.Interval, "The longest time between passes.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Requests per second to the API server.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of requests above --kube-api-qps.")
	fs.StringVar(&o.GKEConfig, "gke-opportunistic-config", o.GKEConfig, "GKE's opportunistic-config label where GKE acts: leave or adopt.")
	fs.StringVar(&o.SliceLabel, "slice-label", o.SliceLabel, flagdoc.SliceLabel.Help)
	fs.StringVar(&o.ReservationGroups, "reservation-groups", o.ReservationGroups, flagdoc.ReservationGroups.Help)
	fs.StringVar(&o.ComputeCaller, "compute-caller", o.ComputeCaller, "Who makes the agents' Compute Engine calls: aggregator or node.")
	fs.StringSliceVar(&o.Reservations, "reservations", o.Reservations, "Reservations to read, projects/P/zones/Z/reservations/R.")
	fs.BoolVar(&o.MaintainUnusedCapacity, "maintain-unused-capacity", o.MaintainUnusedCapacity, "Maintain a reservation block's spare hosts first.")
	fs.StringVar(&o.NotifyURLFile, "notify-url-file", o.NotifyURLFile, "A file holding the notifier's webhook URL; empty: none.")
	fs.StringVar(&o.NotifyFormat, "notify-format", o.NotifyFormat, "The notifications' format: json, slack, cloudevents or template.")
	fs.StringVar(&o.NotifyTemplateFile, "notify-template-file", o.NotifyTemplateFile, "The template of --notify-format=template (a Go template of JSON).")
	fs.StringVar(&o.NotifyHeadersFile, "notify-headers-file", o.NotifyHeadersFile, "A file of headers for each notification, a Name: value a line.")
	fs.DurationVar(&o.NotifyTimeout, "notify-timeout", o.NotifyTimeout, "Bound on each notification's post.")
	fs.IntVar(&o.NotifyRetries, "notify-retries", o.NotifyRetries, "Attempts after a failed post.")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "The cluster's name in each notification.")
	fs.StringSliceVar(&o.NotifySteps, "notify-steps", o.NotifySteps, "The steps told: scheduled, draining, in-maintenance, back, failed.")
	fs.DurationVar(&o.NotifyDigest, "notify-digest", o.NotifyDigest, "Steps within this window (the first opens it) go as one message; 0: none.")
	fs.DurationVar(&o.ReservationInterval, "reservation-interval", o.ReservationInterval, "How often the leader reads --reservations.")
	fs.StringVar(&o.ComputeEndpoint, "compute-endpoint", o.ComputeEndpoint, "Base URL of the Compute Engine API; empty: Google's.")
	fs.StringVar(&o.Project, "project", o.Project, "The cluster's VMs' project; empty: the replica's own.")
	fs.StringSliceVar(&o.Regions, "regions", o.Regions, "The cluster's VMs' regions; empty: the replica's own.")
	fs.StringVar(&o.AutoscalerStatus, "autoscaler-status", o.AutoscalerStatus, "The cluster autoscaler's status ConfigMap, namespace/name.")
	fs.DurationVar(&o.TriggerAnswerTimeout, "trigger-answer-timeout", o.TriggerAnswerTimeout, "Withdraw an opportunistic trigger no agent answered within this.")
	fs.DurationVar(&o.RepairAskGrace, "repair-ask-grace", o.RepairAskGrace, "Withdraw a repair approval not used within its drain timeout and this.")
	fs.DurationVar(&o.RecreateWindow, "recreate-window", o.RecreateWindow, "A Node deleted and created again within this was repaired.")
	fs.StringVar(&o.EvictionCheckListenAddress, "eviction-check-listen-address", o.EvictionCheckListenAddress, "Where to serve the eviction check (HTTPS); empty: not served.")
	fs.StringVar(&o.EvictionCheckService, "eviction-check-service", o.EvictionCheckService, "The eviction check's Service, in --namespace.")
	fs.StringVar(&o.EvictionCheckSecret, "eviction-check-secret", o.EvictionCheckSecret, "The Secret holding the eviction check's CA, in --namespace.")
	fs.StringVar(&o.EvictionCheckWebhook, "eviction-check-webhook", o.EvictionCheckWebhook, "The webhook configuration whose caBundle the replicas keep.")
	fs.Float32Var(&o.EvictionCheckQPS, "eviction-check-qps", o.EvictionCheckQPS, "Pod reads per second of the eviction check's own client.")
	fs.IntVar(&o.EvictionCheckBurst, "eviction-check-burst", o.EvictionCheckBurst, "Burst of pod reads above --eviction-check-qps.")
	fs.StringSliceVar(&o.EvictionCheckCallers, "eviction-check-callers", o.EvictionCheckCallers, "Users the eviction check answers; empty: any caller.")
	fs.StringSliceVar(&o.EvictionCheckHosts, "eviction-check-hosts", o.EvictionCheckHosts, "More names or addresses for the check's serving certificate.")
	fs.StringVar(&o.MemoryLimit, "memory-limit", o.MemoryLimit, "The container's memory limit (default $MEMORY_LIMIT).")
	fs.BoolVar(&o.Uninstall, "uninstall", o.Uninstall, "Remove what the product wrote in the cluster, and exit.")
	fs.StringVar(&o.AgentNamespace, "agent-namespace", o.AgentNamespace, "Namespace of the agents' pods (default --namespace).")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, flagdoc.LogLevel.Help)
}

// choiceProblems are what is wrong with the flags that take one of a few
// words.
func (o *Options) choiceProblems() []error {
	var errs []error
	if o.GKEConfig != "leave" && o.GKEConfig != "adopt" {
		errs = append(errs, fmt.Errorf("--gke-opportunistic-config %q: want leave or adopt", o.GKEConfig))
	}
	if o.ComputeCaller != "aggregator" && o.ComputeCaller != "node" {
		errs = append(errs, fmt.Errorf("--compute-caller %q: want aggregator or node", o.ComputeCaller))
	}
	if _, err := protocol.ParseReservationGroups(o.ReservationGroups); err != nil {
		errs = append(errs, err)
	}
	for _, r := range o.Reservations {
		if _, err := compute.ParseReservation(r); err != nil {
			errs = append(errs, fmt.Errorf("--reservations: %w", err))
		}
	}
	errs = append(errs, o.notifyProblems()...)
	if o.ReservationInterval < time.Second {
		errs = append(errs, fmt.Errorf("--reservation-interval %s: want 1s or more", o.ReservationInterval))
	}
	if o.UnhealthyAfter < 10*time.Second {
		errs = append(errs, fmt.Errorf("--unhealthy-after %s: want 10s or more", o.UnhealthyAfter))
	}
	return errs
}

// notifyProblems are what is wrong with the notifier's flags: an unknown
// step, a digest out of bounds, and the format's problems.
func (o *Options) notifyProblems() []error {
	var errs []error
	o.notifySteps = nil
	if len(o.NotifySteps) == 0 {
		errs = append(errs, errors.New("--notify-steps: name at least one step (for no notifier, leave --notify-url-file empty)"))
	}
	for _, s := range o.NotifySteps {
		if !slices.Contains(fleet.Steps, fleet.Step(s)) {
			errs = append(errs, fmt.Errorf("--notify-steps: unknown step %q: want some of %s", s, strings.Join(stepNames(fleet.Steps), ", ")))
			continue
		}
		o.notifySteps = append(o.notifySteps, fleet.Step(s))
	}
	if o.NotifyDigest < 0 || o.NotifyDigest > aggregator.MaxNotifyDigest {
		errs = append(errs, fmt.Errorf("--notify-digest %s: want 0 (none) to %s", o.NotifyDigest, aggregator.MaxNotifyDigest))
	}
	return append(errs, o.notifyFormatProblems()...)
}

// notifyFormatProblems are what is wrong with the notifier's format; it
// parses the template of --notify-format=template.
func (o *Options) notifyFormatProblems() []error {
	if !slices.Contains(aggregator.NotifyFormats, o.NotifyFormat) {
		return []error{fmt.Errorf("--notify-format %q: want one of %s", o.NotifyFormat, strings.Join(aggregator.NotifyFormats, ", "))}
	}
	switch {
	case o.NotifyFormat == aggregator.NotifyTemplate && o.NotifyTemplateFile == "":
		return []error{errors.New("--notify-format=template needs --notify-template-file")}
	case o.NotifyFormat != aggregator.NotifyTemplate && o.NotifyTemplateFile != "":
		return []error{fmt.Errorf("--notify-template-file is read only with --notify-format=template, not %s", o.NotifyFormat)}
	case o.NotifyTemplateFile == "":
		return nil
	}
	text, err := os.ReadFile(o.NotifyTemplateFile)
	if err != nil {
		return []error{fmt.Errorf("--notify-template-file: %w", err)}
	}
	if o.notifyTemplate, err = aggregator.ParseNotifyTemplate(filepath.Base(o.NotifyTemplateFile), string(text)); err != nil {
		return []error{fmt.Errorf("--notify-template-file: %w", err)}
	}
	return nil
}

// stepNames are steps as --notify-steps takes them.
func stepNames(steps []fleet.Step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = string(s)
	}
	return out
}

// Validate reports every problem at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace (or $POD_NAMESPACE) is required"))
	}
	if o.Identity == "" {
		errs = append(errs, errors.New("--identity (or $POD_NAME) is required"))
	}
	if o.LeaseName == "" || o.PoolLabel == "" {
		errs = append(errs, errors.New("--lease-name and --pool-label must not be empty"))
	}
	if o.EvictionCheckQPS <= 0 || o.EvictionCheckBurst < 1 {
		errs = append(errs, fmt.Errorf("--eviction-check-qps %v, --eviction-check-burst %d: want both positive", o.EvictionCheckQPS, o.EvictionCheckBurst))
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v, --kube-api-burst %d: want both positive", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if o.RetryPeriod <= 0 || o.RenewDeadline <= o.RetryPeriod || o.LeaseDuration <= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("want 0 < --retry-period (%s) < --renew-deadline (%s) < --lease-duration (%s)", o.RetryPeriod, o.RenewDeadline, o.LeaseDuration))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"trigger-answer-timeout", o.TriggerAnswerTimeout}, {"repair-ask-grace", o.RepairAskGrace}, {"recreate-window", o.RecreateWindow}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s %s: want a positive duration", d.flag, d.v))
		}
	}
	errs = append(errs, o.choiceProblems()...)
	if ns, name, ok := strings.Cut(o.AutoscalerStatus, "/"); o.AutoscalerStatus != "" && (!ok || ns == "" || name == "" || strings.Contains(name, "/")) {
		errs = append(errs, fmt.Errorf("--autoscaler-status %q: want namespace/name, or empty", o.AutoscalerStatus))
	}
	if o.Interval < time.Second {
		errs = append(errs, fmt.Errorf("--interval %s: want 1s or more", o.Interval))
	}
	if o.EvictionCheckListenAddress != "" && (o.EvictionCheckService == "" || o.EvictionCheckSecret == "") {
		errs = append(errs, errors.New("--eviction-check-service and --eviction-check-secret must not be empty while --eviction-check-listen-address is set"))
	}
	if _, err := o.memoryLimit(); err != nil {
		errs = append(errs, err)
	}
	if _, err := cli.ParseLevel(o.LogLevel); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// memoryLimit is --memory-limit in bytes (0: unknown).
func (o *Options) memoryLimit() (int64, error) {
	if o.MemoryLimit == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(o.MemoryLimit)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("--memory-limit %q: want a quantity of bytes such as 1Gi: %v", o.MemoryLimit, err)
	}
	return q.Value(), nil
}
