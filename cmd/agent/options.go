package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/agent"
	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/internal/cli"
	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Options are the agent's flags. NODE_NAME, POD_NAMESPACE and POD_NAME come
// from the Downward API.
type Options struct {
	NodeName     string
	PodNamespace string
	PodName      string
	Kubeconfig   string
	// ListenAddress serves /metrics and /healthz.
	ListenAddress string
	// NoticeListenAddress, when set, serves the maintenance keys to the
	// node's pods (metadata.Mirror).
	NoticeListenAddress string
	// NoticeAllowedCIDRs are more client ranges the notice endpoint serves
	// beside the node's addresses and pod ranges.
	NoticeAllowedCIDRs []string
	// MetadataHost replaces the metadata server's address (host:port); empty
	// means 169.254.169.254 or GCE_METADATA_HOST.
	MetadataHost string
	// MetadataTimeout is the long poll's timeout_sec.
	MetadataTimeout time.Duration
	// UnhealthyAfter: /healthz fails when a watched key has had no good
	// answer for longer than this.
	UnhealthyAfter          time.Duration
	HostMaintenanceDeadline time.Duration
	PreemptionDeadline      time.Duration
	// PreemptionNotice is the VM's preemption notice: "auto" (a Spot VM's
	// own, read with instances.get), "none", or a duration.
	PreemptionNotice string
	// KnownEnd is "auto" (the VM's time limit, read with instances.get)
	// or "none"; KnownEndLead is how long before the end its drain
	// starts.
	KnownEnd     string
	KnownEndLead time.Duration
	// GKEHandler is "defer" (a maintenance GKE's own handler is seen
	// handling is left to it) or "ignore" (the agent handles it too).
	GKEHandler string
	// OngoingDeadline is the time from a maintenance window's opening to
	// the VM stopping, where the drain starts on the notice turning
	// ONGOING (TPU VMs).
	OngoingDeadline time.Duration
	// ManualDrainTimeout is the drain deadline of a manual maintenance.
	ManualDrainTimeout time.Duration
	// ManualStartTimeout bounds the wait for an accepted manual
	// maintenance to begin.
	ManualStartTimeout time.Duration
	// ReportTimeout bounds how long a fault report's operation is
	// followed.
	ReportTimeout time.Duration
	// TriggerMaxAge is the oldest opportunistic trigger acted on.
	TriggerMaxAge time.Duration
	// FailureCooldown is the first cool-down after a voluntary maintenance
	// failed.
	FailureCooldown time.Duration
	// ManualDrainEscalate: manual drains delete PDB-protected pods at the
	// deadline minus their grace, as forced ones do.
	ManualDrainEscalate bool
	// ComputeEndpoint replaces the Compute API's base URL; empty means
	// Google's.
	ComputeEndpoint string
	// ComputeCaller is who makes the Compute Engine calls on the VM:
	// computeCallerAggregator or computeCallerNode.
	ComputeCaller         string
	EvictionRetryInterval time.Duration
	// DrainReserve is kept for system and DaemonSet pods at a drain's end.
	DrainReserve time.Duration
	// DrainMargin is kept before the VM's stop, after every pod's grace.
	DrainMargin time.Duration
	// EvictionRequests: a pod that names eviction responders is asked for
	// through an EvictionRequest (lifecycle.k8s.io/v1alpha1) first.
	EvictionRequests bool
	// AcceleratorResources make a pod accelerator work, for idleness.
	AcceleratorResources []string
	// AcceleratorDeviceClasses: a pod holding a device of one through a
	// ResourceClaim does accelerator work, for idleness.
	AcceleratorDeviceClasses []string
	// PolicyConfigMap (namespace/name) holds the maintenance policy that
	// may gate manual triggers; empty means none.
	PolicyConfigMap string
	PoolLabel       string
	// ObserveOnly: every node is observed only (agent.Options.ObserveOnly).
	ObserveOnly bool
	// SliceLabel, when set, names the label whose value is the node's
	// multi-host slice.
	SliceLabel string
	// ReservationGroups is none, subblock or block
	// (protocol.ParseReservationGroups).
	ReservationGroups string
	LogLevel          string
	// KubeAPIQPS and KubeAPIBurst size the agent's API client for a
	// drain: one eviction per pod, at once, on a node of 110 pods.
	KubeAPIQPS   float32
	KubeAPIBurst int
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		NodeName:                 os.Getenv("NODE_NAME"),
		PodNamespace:             os.Getenv("POD_NAMESPACE"),
		PodName:                  os.Getenv("POD_NAME"),
		ListenAddress:            ":9102",
		MetadataTimeout:          60 * time.Second,
		UnhealthyAfter:           3 * time.Minute,
		HostMaintenanceDeadline:  lifecycle.DefaultConfig.HostMaintenanceDeadline,
		PreemptionDeadline:       lifecycle.DefaultConfig.PreemptionDeadline,
		PreemptionNotice:         preemptionNoticeAuto,
		KnownEnd:                 knownEndAuto,
		ComputeCaller:            computeCallerAggregator,
		KnownEndLead:             lifecycle.DefaultConfig.KnownEndLead,
		OngoingDeadline:          lifecycle.DefaultConfig.OngoingDeadline,
		GKEHandler:               gkeHandlerDefer,
		ManualDrainTimeout:       lifecycle.DefaultConfig.ManualDrainTimeout,
		ManualStartTimeout:       lifecycle.DefaultConfig.ManualStartTimeout,
		ReportTimeout:            lifecycle.DefaultConfig.ReportTimeout,
		TriggerMaxAge:            lifecycle.DefaultConfig.TriggerMaxAge,
		FailureCooldown:          lifecycle.DefaultConfig.FailureCooldown,
		AcceleratorResources:     resourceStrings(agent.DefaultAcceleratorResources),
		AcceleratorDeviceClasses: agent.DefaultAcceleratorDeviceClasses,
		PoolLabel:                protocol.LabelNodePool,
		EvictionRetryInterval:    drain.DefaultRetryInterval,
		DrainReserve:             drain.DefaultReserve,
		DrainMargin:              drain.DefaultMargin,
		LogLevel:                 "info",
		ReservationGroups:        "none",
		KubeAPIQPS:               50,
		KubeAPIBurst:             100,
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "This node's name (default $NODE_NAME; required).")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "Namespace of the agent's own pod, never evicted (default $POD_NAMESPACE).")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "Name of the agent's own pod, never evicted (default $POD_NAME).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, flagdoc.Kubeconfig.Help)
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "Address for /metrics and /healthz.")
	fs.StringVar(&o.NoticeListenAddress, "notice-listen-address", o.NoticeListenAddress, "host:port serving the node's pods the maintenance notice; empty: none.")
	fs.StringSliceVar(&o.NoticeAllowedCIDRs, "notice-allowed-cidrs", o.NoticeAllowedCIDRs, "More client ranges the notice endpoint serves.")
	fs.StringVar(&o.MetadataHost, "metadata-host", o.MetadataHost, "host:port of the metadata server; empty: 169.254.169.254.")
	fs.DurationVar(&o.MetadataTimeout, "metadata-timeout", o.MetadataTimeout, "Long-poll timeout of the metadata server, 1s to 1h.")
	fs.DurationVar(&o.UnhealthyAfter, "unhealthy-after", o.UnhealthyAfter, "/healthz fails after this long without a good answer or Node update.")
	fs.DurationVar(&o.HostMaintenanceDeadline, "host-maintenance-deadline", o.HostMaintenanceDeadline, "Time from TERMINATE_ON_HOST_MAINTENANCE to the VM's stop.")
	fs.DurationVar(&o.PreemptionDeadline, "preemption-deadline", o.PreemptionDeadline, "Time from preempted=TRUE to the VM's stop.")
	fs.StringVar(&o.PreemptionNotice, "preemption-notice", o.PreemptionNotice, "A Spot VM's preemption notice: auto, none or a duration.")
	fs.StringVar(&o.KnownEnd, "known-end", o.KnownEnd, "A VM's known end (a time limit): auto or none.")
	fs.DurationVar(&o.KnownEndLead, "known-end-lead", o.KnownEndLead, "The earliest a known end's drain starts before the end.")
	fs.StringVar(&o.GKEHandler, "gke-handler", o.GKEHandler, "defer to GKE's own maintenance handler where it acts, or ignore it.")
	fs.DurationVar(&o.OngoingDeadline, "ongoing-deadline", o.OngoingDeadline, "Time from an ONGOING window's opening to the VM's stop (TPU VMs).")
	fs.DurationVar(&o.ManualDrainTimeout, "manual-drain-timeout", o.ManualDrainTimeout, "Drain deadline of a manual or opportunistic maintenance.")
	fs.BoolVar(&o.ManualDrainEscalate, "manual-drain-escalate", o.ManualDrainEscalate, "Let a manual drain delete a pod its budget still protects, at the end.")
	fs.DurationVar(&o.FailureCooldown, "voluntary-failure-cooldown", o.FailureCooldown, "How long a node is left alone after a voluntary maintenance fails.")
	fs.DurationVar(&o.TriggerMaxAge, "opportunistic-trigger-max-age", o.TriggerMaxAge, "The oldest opportunistic trigger the agent acts on.")
	fs.DurationVar(&o.ManualStartTimeout, "manual-start-timeout", o.ManualStartTimeout, "How long an accepted manual maintenance may take to begin.")
	fs.DurationVar(&o.ReportTimeout, "report-timeout", o.ReportTimeout, "How long a fault report's operation is followed.")
	fs.StringSliceVar(&o.AcceleratorResources, "accelerator-resources", o.AcceleratorResources, "Resources that make a node busy.")
	fs.StringSliceVar(&o.AcceleratorDeviceClasses, "accelerator-device-classes", o.AcceleratorDeviceClasses, "DRA device classes whose claimed devices make a node busy.")
	fs.StringVar(&o.PolicyConfigMap, "policy-configmap", o.PolicyConfigMap, "namespace/name of the policy ConfigMap; empty: none.")
	fs.StringVar(&o.PoolLabel, "pool-label", o.PoolLabel, flagdoc.PoolLabel.Help)
	fs.BoolVar(&o.ObserveOnly, "observe-only", o.ObserveOnly, flagdoc.ObserveOnly.Help)
	fs.StringVar(&o.ReservationGroups, "reservation-groups", o.ReservationGroups, flagdoc.ReservationGroups.Help)
	fs.StringVar(&o.SliceLabel, "slice-label", o.SliceLabel, flagdoc.SliceLabel.Help)
	fs.StringVar(&o.ComputeCaller, "compute-caller", o.ComputeCaller, "Who makes the Compute Engine calls: aggregator or node.")
	fs.StringVar(&o.ComputeEndpoint, "compute-endpoint", o.ComputeEndpoint, "Base URL of the Compute Engine API; empty: Google's.")
	fs.DurationVar(&o.EvictionRetryInterval, "eviction-retry-interval", o.EvictionRetryInterval, "Delay before retrying an eviction a budget refused.")
	fs.DurationVar(&o.DrainMargin, "drain-margin", o.DrainMargin, "Time kept between the end of every pod's grace and the VM's stop.")
	fs.BoolVar(&o.EvictionRequests, "eviction-requests", o.EvictionRequests, "Ask through an EvictionRequest for a pod that names eviction responders.")
	fs.DurationVar(&o.DrainReserve, "drain-reserve", o.DrainReserve, "Most time kept at a drain's end for kube-system and DaemonSet pods.")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, flagdoc.LogLevel.Help)
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Requests per second to the API server.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of requests above --kube-api-qps.")
}

// Validate reports every problem at once.
func (o *Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required"))
	}
	if (o.PodName == "") != (o.PodNamespace == "") {
		errs = append(errs, errors.New("--pod-name and --pod-namespace go together"))
	}
	if o.GKEHandler != gkeHandlerDefer && o.GKEHandler != gkeHandlerIgnore {
		errs = append(errs, fmt.Errorf("--gke-handler %q: want %s or %s", o.GKEHandler, gkeHandlerDefer, gkeHandlerIgnore))
	}
	errs = append(errs, o.durationProblems()...)
	if _, _, err := o.preemptionNotice(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.choiceProblems()...)
	if o.ComputeCaller != computeCallerAggregator && o.ComputeCaller != computeCallerNode {
		errs = append(errs, fmt.Errorf("--compute-caller %q: want %s or %s", o.ComputeCaller, computeCallerAggregator, computeCallerNode))
	}
	if o.ComputeEndpoint != "" {
		if u, err := url.Parse(o.ComputeEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--compute-endpoint %q: want an http(s) URL", o.ComputeEndpoint))
		}
	}
	if o.PolicyConfigMap != "" {
		if ns, name, ok := strings.Cut(o.PolicyConfigMap, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			errs = append(errs, fmt.Errorf("--policy-configmap %q: want namespace/name", o.PolicyConfigMap))
		}
	}
	if o.NoticeListenAddress != "" {
		if _, port, err := net.SplitHostPort(o.NoticeListenAddress); err != nil || !validPort(port) {
			errs = append(errs, fmt.Errorf("--notice-listen-address %q: want host:port (the manifests give $(HOST_IP):8189)", o.NoticeListenAddress))
		}
	}
	_, cidrErrs := o.noticeRanges()
	errs = append(errs, cidrErrs...)
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v, --kube-api-burst %d: want both positive", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if len(o.AcceleratorResources) == 0 {
		errs = append(errs, errors.New("--accelerator-resources: want at least one resource name"))
	}
	if _, err := cli.ParseLevel(o.LogLevel); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// durationProblems are what is wrong with the duration flags: a deadline,
// timeout or interval must be positive (0 is refused), the drain's margin
// and reserve may be 0 (none), and the metadata timeout is whole seconds
// from 1 s to 1 h, well below --unhealthy-after.
func (o *Options) durationProblems() []error {
	var errs []error
	if o.MetadataTimeout < time.Second || o.MetadataTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("--metadata-timeout %s: want 1s to 1h", o.MetadataTimeout))
	}
	if o.MetadataTimeout%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--metadata-timeout %s: want whole seconds", o.MetadataTimeout))
	}
	if o.UnhealthyAfter <= o.MetadataTimeout+10*time.Second {
		errs = append(errs, fmt.Errorf("--unhealthy-after %s: want more than --metadata-timeout plus 10s (%s)", o.UnhealthyAfter, o.MetadataTimeout+10*time.Second))
	}
	for name, d := range map[string]time.Duration{
		"--host-maintenance-deadline":     o.HostMaintenanceDeadline,
		"--preemption-deadline":           o.PreemptionDeadline,
		"--ongoing-deadline":              o.OngoingDeadline,
		"--known-end-lead":                o.KnownEndLead,
		"--manual-drain-timeout":          o.ManualDrainTimeout,
		"--manual-start-timeout":          o.ManualStartTimeout,
		"--report-timeout":                o.ReportTimeout,
		"--opportunistic-trigger-max-age": o.TriggerMaxAge,
		"--voluntary-failure-cooldown":    o.FailureCooldown,
		"--eviction-retry-interval":       o.EvictionRetryInterval,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want a positive duration", name, d))
		}
	}
	if o.DrainMargin < 0 {
		errs = append(errs, fmt.Errorf("--drain-margin %s: want 0 or more", o.DrainMargin))
	}
	if o.DrainReserve < 0 {
		errs = append(errs, fmt.Errorf("--drain-reserve %s: want 0 or more", o.DrainReserve))
	}
	return errs
}

func resourceStrings(names []corev1.ResourceName) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, string(n))
	}
	return out
}

// The values of --gke-handler.
const (
	gkeHandlerDefer  = "defer"
	gkeHandlerIgnore = "ignore"
)

// validPort: port is a TCP port number (0 asks for any free one).
func validPort(port string) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// noticeRanges is --notice-allowed-cidrs, parsed, and an error for each
// that does not parse (Validate reports them).
func (o *Options) noticeRanges() ([]*net.IPNet, []error) {
	var out []*net.IPNet
	var errs []error
	for _, c := range o.NoticeAllowedCIDRs {
		_, r, err := net.ParseCIDR(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("--notice-allowed-cidrs %q: want a CIDR such as 10.8.0.0/14", c))
			continue
		}
		out = append(out, r)
	}
	return out, errs
}

// choiceProblems are what is wrong with the flags that take one of a few
// words.
func (o *Options) choiceProblems() []error {
	var errs []error
	if _, err := protocol.ParseReservationGroups(o.ReservationGroups); err != nil {
		errs = append(errs, err)
	}
	if o.KnownEnd != knownEndAuto && o.KnownEnd != knownEndNone {
		errs = append(errs, fmt.Errorf("--known-end %q: want %s or %s", o.KnownEnd, knownEndAuto, knownEndNone))
	}
	return errs
}

// The --compute-caller values.
const (
	computeCallerAggregator = "aggregator"
	computeCallerNode       = "node"
)

// The --known-end values.
const (
	knownEndAuto = "auto"
	knownEndNone = "none"
)

// The --preemption-notice values besides a duration.
const (
	preemptionNoticeAuto = "auto"
	preemptionNoticeNone = "none"
)

// preemptionNotice reads --preemption-notice: the duration given (zero
// for none), or auto (true).
func (o *Options) preemptionNotice() (notice time.Duration, auto bool, err error) {
	switch o.PreemptionNotice {
	case preemptionNoticeAuto:
		return 0, true, nil
	case preemptionNoticeNone:
		return 0, false, nil
	}
	d, err := time.ParseDuration(o.PreemptionNotice)
	if err != nil || d <= 0 || d > time.Hour {
		return 0, false, fmt.Errorf("--preemption-notice %q: want auto, none or a duration up to 1h, such as 120s", o.PreemptionNotice)
	}
	return d, false, nil
}
