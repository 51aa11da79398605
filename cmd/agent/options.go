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
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/metadata"
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
	// AcceleratorResources make a pod accelerator work, for idleness.
	AcceleratorResources []string
	// AcceleratorDeviceClasses: a pod holding a device of one through a
	// ResourceClaim does accelerator work, for idleness.
	AcceleratorDeviceClasses []string
	// PolicyConfigMap (namespace/name) holds the maintenance policy that
	// may gate manual triggers; empty means none.
	PolicyConfigMap string
	PoolLabel       string
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
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of this node (default $NODE_NAME).")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "Namespace of the agent's pod, never evicted (default $POD_NAMESPACE).")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "Name of the agent's pod, never evicted (default $POD_NAME).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig (its current context: a token, token file or client certificate; credential plugins such as exec are not supported); empty means $KUBECONFIG when set, else the pod's service account (in-cluster).")
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "Address for /metrics and /healthz.")
	fs.StringVar(&o.NoticeListenAddress, "notice-listen-address", o.NoticeListenAddress, "host:port on which to serve the node's pods the metadata server's maintenance keys (instance/maintenance-event, instance/upcoming-maintenance, instance/preempted) as the agent reads them, and the drain's deadline ("+metadata.KeyDeadline+"), with the metadata server's paths, header and wait_for_change contract; for the node's address only (the manifests give $(HOST_IP):8189). Empty: not served.")
	fs.StringSliceVar(&o.NoticeAllowedCIDRs, "notice-allowed-cidrs", o.NoticeAllowedCIDRs, "More client ranges the notice endpoint serves, beside the node's own addresses and its pod ranges (spec.podCIDRs), for network plugins that give pods addresses outside the Node's ranges. The endpoint answers any other client 403; it serves everyone who reaches the node's address only where the Node names no pod range and this is empty.")
	fs.StringVar(&o.MetadataHost, "metadata-host", o.MetadataHost, "host:port of the metadata server; empty means 169.254.169.254 (or $GCE_METADATA_HOST).")
	fs.DurationVar(&o.MetadataTimeout, "metadata-timeout", o.MetadataTimeout, "Long-poll timeout (timeout_sec), 1s to 1h.")
	fs.DurationVar(&o.UnhealthyAfter, "unhealthy-after", o.UnhealthyAfter, "/healthz fails when a watched metadata key has had no good answer, or the Node could not be updated, for this long; more than --metadata-timeout plus 10s.")
	fs.DurationVar(&o.HostMaintenanceDeadline, "host-maintenance-deadline", o.HostMaintenanceDeadline, "Time from TERMINATE_ON_HOST_MAINTENANCE appearing to the VM stopping (60m for GPU VMs); counted from when the signal appeared, as far as the agent can tell, and never past the maintenance window's end.")
	fs.DurationVar(&o.PreemptionDeadline, "preemption-deadline", o.PreemptionDeadline, "Time from preempted=TRUE appearing to the VM stopping; also the drain of a VM that outlived its estimated stop.")
	fs.StringVar(&o.PreemptionNotice, "preemption-notice", o.PreemptionNotice, "A Spot VM's preemption notice (scheduling.preemptionNoticeDuration: preempted turns TRUE this long before the soft-off, which leaves 30s more): auto (where the metadata server says the VM is preemptible, read it with instances.get, which needs compute.instances.get; without it, or with none, --preemption-deadline), none, or the duration, such as 120s, for the VMs the metadata server calls preemptible that are Spot (not on GKE, whose node pools cannot set a notice).")
	fs.StringVar(&o.KnownEnd, "known-end", o.KnownEnd, "A VM whose end Compute Engine knows (a time limit: scheduling.maxRunDuration or terminationTime, as flex-start VMs have): auto (read resourceStatus.scheduling.terminationTimestamp with instances.get, which needs compute.instances.get; without it, nothing is drained for the end) or none (the end is not looked for).")
	fs.DurationVar(&o.KnownEndLead, "known-end-lead", o.KnownEndLead, "The earliest a VM's known end's drain starts before the end: it starts as long before as the node's pods need to stop (longest checkpoint lead and grace, the drain's reserve and margin) plus a minute, at most this; the drain's deadline is the end itself, so every grace ends before it.")
	fs.StringVar(&o.GKEHandler, "gke-handler", o.GKEHandler, "What to do where GKE's own maintenance handler is seen handling the node (its active-node-maintenance label with a value this agent did not write, or its maintenance-window-started taint): defer (leave the maintenance to it: no drain, cordon or Compute Engine call; the interruption is still counted) or ignore (handle it too).")
	fs.DurationVar(&o.OngoingDeadline, "ongoing-deadline", o.OngoingDeadline, "Where maintenance-event is not served (TPU VMs) and the drain starts on the notice turning ONGOING: time from the window's opening to the VM stopping (5m: Cloud TPU waits at most that long for a process to exit after SIGTERM).")
	fs.DurationVar(&o.ManualDrainTimeout, "manual-drain-timeout", o.ManualDrainTimeout, "Drain deadline of a maintenance started with "+protocol.LabelPerformMaintenance+"=true: a drain that cannot finish by then (PodDisruptionBudgets hold) is given up, unless --manual-drain-escalate.")
	fs.BoolVar(&o.ManualDrainEscalate, "manual-drain-escalate", o.ManualDrainEscalate, "Let a manual (or opportunistic) drain delete a pod its PodDisruptionBudget still protects at the drain deadline minus the pod's grace, as host maintenance and preemption do. Off: a manual maintenance is voluntary, budgets hold to the end, and a drain that cannot finish by --manual-drain-timeout is given up (the node goes back in service).")
	fs.DurationVar(&o.FailureCooldown, "voluntary-failure-cooldown", o.FailureCooldown, "After a manual or opportunistic maintenance fails (Compute Engine refuses, or the drain is given up), the aggregator leaves the node alone this long; it doubles with each failure in a row, up to 24h, and a maintenance that goes through resets it.")
	fs.DurationVar(&o.TriggerMaxAge, "opportunistic-trigger-max-age", o.TriggerMaxAge, "The oldest opportunistic trigger (written by the aggregator) the agent acts on; an older one, one for another notice, or one on a node that is no longer idle is rejected and nothing is drained.")
	fs.DurationVar(&o.ManualStartTimeout, "manual-start-timeout", o.ManualStartTimeout, "After Compute Engine accepts a manual maintenance, how long to wait for it to begin (TERMINATE_ON_HOST_MAINTENANCE or the notice ONGOING); past it, or when the call's operation fails, the drained node goes back in service.")
	fs.DurationVar(&o.ReportTimeout, "report-timeout", o.ReportTimeout, "How long a fault report's operation is followed, the node kept drained (Google: usually 10-12 min, the VM stopping within a minute after); past it the repair has failed, and the next one follows that operation instead of reporting again.")
	fs.StringSliceVar(&o.AcceleratorResources, "accelerator-resources", o.AcceleratorResources, "Resources that make a pod accelerator work: a node none of whose pods (but DaemonSet and mirror pods) requests one is idle.")
	fs.StringSliceVar(&o.AcceleratorDeviceClasses, "accelerator-device-classes", o.AcceleratorDeviceClasses, "Device classes of dynamic resource allocation whose devices make a pod accelerator work: a pod holding one through a ResourceClaim (or whose claim cannot be read) keeps its node busy. The defaults are NVIDIA's GPU driver's and Google's TPU driver's; reading claims needs get on resourceclaims.")
	fs.StringVar(&o.PolicyConfigMap, "policy-configmap", o.PolicyConfigMap, "namespace/name of the aggregator's policy ConfigMap; when its policy.yaml sets gateManualTriggers, manual triggers outside the node pool's maintenance window or inside an exclusion are refused. Empty: manual triggers are never gated.")
	fs.StringVar(&o.PoolLabel, "pool-label", o.PoolLabel, "Node label naming the node's pool (for the policy, and, as on GKE, a multi-host TPU slice's pool is its slice).")
	fs.StringVar(&o.ReservationGroups, "reservation-groups", o.ReservationGroups, protocol.ReservationGroupsHelp)
	fs.StringVar(&o.SliceLabel, "slice-label", o.SliceLabel, "Node label whose value names the node's multi-host slice, where the pool does not (a self-managed cluster); the same as the aggregator's. The agent follows the other hosts of its slice.")
	fs.StringVar(&o.ComputeCaller, "compute-caller", o.ComputeCaller, "Who makes the Compute Engine calls on this VM (performMaintenance, the fault report, a reservation group's maintenance, instances.get): aggregator (the agent asks through its Node and the aggregator's leader, which holds the IAM permissions, checks the ask and calls; the node's service account needs none) or node (the agent calls with the node's service account, which then needs them for every VM of the project).")
	fs.StringVar(&o.ComputeEndpoint, "compute-endpoint", o.ComputeEndpoint, "Base URL of the Compute Engine API (ending in /compute/v1/); empty means Google's.")
	fs.DurationVar(&o.EvictionRetryInterval, "eviction-retry-interval", o.EvictionRetryInterval, "Delay before retrying an eviction a PodDisruptionBudget refused (for each pod on its own), when the budgets covering the pod do not allow it first.")
	fs.DurationVar(&o.DrainMargin, "drain-margin", o.DrainMargin, "Time kept between the end of every pod's grace period and the VM's stop: the drain plans each pod to end this much before the deadline, for the eviction call and the kubelet's delivery of SIGTERM (up to 2.0 s measured on a real kubelet), with a second to spare. 0 keeps none.")
	fs.DurationVar(&o.DrainReserve, "drain-reserve", o.DrainReserve, "Most time kept at the end of a drain for kube-system and DaemonSet pods: workload pods must stop by the deadline minus what those pods need (their longest grace), at most this and at most half the time left. 0 keeps none.")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Requests per second the agent may send to the API server; a drain of a full node makes one eviction per pod at once. An idle agent sends none (it only watches).")
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
