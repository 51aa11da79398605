// Command agent is maintenance-handler's node agent: one per accelerator
// node (DaemonSet). See package agent.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/agent"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/internal/cli"
	"github.com/maintenance-handler/maintenance-handler/internal/policysource"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// version is stamped at build time: -ldflags "-X main.version=...".
var version = "dev"

// gcPercent is the agent's garbage collection target when $GOGC does not
// set one: its heap is a few megabytes that change little, so collecting
// at half the live heap rather than Go's whole costs it no measurable CPU
// and keeps about 1.2 MiB less resident on every node (BenchmarkAgentBinaryDrain110Pods:
// 7.2 MiB of its own memory idle with 110 pods at 100, 6.0 at 50).
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	opts := NewOptions()
	cli.Main("agent", version, opts, &opts.LogLevel, func(ctx context.Context, logger *slog.Logger) error { return run(ctx, opts, logger) })
}

func run(ctx context.Context, opts *Options, logger *slog.Logger) error {
	cfg, err := kube.Load(opts.Kubeconfig, "maintenance-handler-agent/"+version, opts.KubeAPIQPS, opts.KubeAPIBurst)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	client, err := kube.New(cfg)
	if err != nil {
		return err
	}
	clk := clock.RealClock{}

	// /healthz and /metrics answer from the start: while the agent waits
	// for its Node, /healthz says why (and the log says it once per change).
	var health atomic.Pointer[func() error]
	setHealth := func(f func() error) { health.Store(&f) }
	setHealth(func() error { return fmt.Errorf("%w %q: starting", agent.ErrNoNode, opts.NodeName) })
	// running is closed once the agent runs on its Node (setRunning).
	running := make(chan struct{})
	markRunning := sync.OnceFunc(func() { close(running) })
	// detail, once running, is a line /healthz adds whatever it answers:
	// a part of the agent that does not work while the node's maintenance
	// is handled (the notice endpoint), "" when none.
	var detail atomic.Pointer[func() string]
	setRunning := func(f func() error, d func() string) { detail.Store(&d); setHealth(f); markRunning() }
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(reg))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		err := (*health.Load())()
		if err != nil {
			// Starting, not unhealthy: a probe that comes while the agent
			// starts waits a moment for it, so that the kubelet's startup
			// probe passes the moment the agent runs (and the readiness
			// probe, asked right after it), rather than a probe later.
			select {
			case <-running:
			case <-r.Context().Done():
			case <-time.After(startingHold):
			}
			err = (*health.Load())()
		}
		var more string
		if d := detail.Load(); d != nil {
			more = (*d)()
		}
		if err != nil {
			http.Error(w, strings.TrimSpace(err.Error()+"\n"+more), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
		if more != "" {
			fmt.Fprintln(w, more)
		}
	})
	g, ctx := errgroup.WithContext(ctx)
	// Counted from the start, exported with the node's labels once the
	// node is known.
	refused := metrics.NewConnectionsRefused("agent", "metrics")
	// Any pod can reach the agent's port: the pods of one node (its
	// default-sized pod range) share one share of its connections.
	addr, err := cli.ServeShared(ctx, g, opts.ListenAddress, mux, nil,
		cli.LogRefused(logger, "metrics", func(reason string) { refused.WithLabelValues("metrics", reason).Inc() }), cli.RangeShare)
	if err != nil {
		return err
	}
	logger.Info("agent started", "version", version, "node", opts.NodeName, "listen", addr.String())
	g.Go(func() error {
		node, err := agent.WaitForNode(ctx, client, opts.NodeName, clk, logger, func(why error) { setHealth(func() error { return why }) })
		if err != nil {
			return fmt.Errorf("wait for node %q: %w", opts.NodeName, err)
		}
		nodeRegisterer(reg, opts, node).MustRegister(refused)
		return runOnNode(ctx, opts, logger, client, node, reg, clk, setRunning)
	})
	return g.Wait()
}

// runOnNode runs the agent once its Node is known.
func runOnNode(ctx context.Context, opts *Options, logger *slog.Logger, client *kube.Client, node *corev1.Node,
	reg *prometheus.Registry, clk clock.Clock, setRunning func(func() error, func() string)) error {
	// Every series of the agent's own carries its node and pool, whatever
	// scrapes it (the recording rules aggregate on them).
	nodeLabels := nodeRegisterer(reg, opts, node)
	m := metrics.NewAgent(nodeLabels)
	reportClient(nodeLabels, client)
	events := kube.NewNodeEvents(client.EventSink(), protocol.EventSourceAgent, opts.NodeName, node.UID)
	defer events.Shutdown()
	caller, err := newCaller(ctx, opts, node, clk, logger)
	if err != nil {
		return err
	}
	var manualGate func(*corev1.Node, time.Time) (string, string)
	observeOnly := observeOnlyOf(opts)
	var src *policysource.Source
	if opts.PolicyConfigMap != "" {
		ns, name, _ := strings.Cut(opts.PolicyConfigMap, "/")
		src = policysource.NewSource(client.ConfigMapListWatch(ns, name), ns, name, logger.With("watch", "policy"))
		manualGate = src.ManualGate(opts.PoolLabel)
		if !opts.ObserveOnly {
			observeOnly = src.ObserveOnly(opts.PoolLabel)
		}
	}
	keys := []string{metadata.KeyMaintenanceEvent, metadata.KeyPreempted, metadata.KeyUpcomingMaintenance}
	metaHealth := &agent.MetadataHealth{Events: events, Metrics: m, Logger: logger.With("component", "metadata")}
	metaHealth.Init(keys)
	watcher := metadata.NewWatcher(metadata.WatcherOptions{
		Client:         metadata.NewClient(opts.MetadataTimeout, opts.MetadataHost),
		Timeout:        opts.MetadataTimeout,
		UnhealthyAfter: opts.UnhealthyAfter,
		Health:         metaHealth,
		Clock:          clk,
		Logger:         logger.With("component", "metadata"),
		Recorder:       m,
	})
	var mirror *metadata.Mirror
	noticeDetail := func() string { return "" }
	if opts.NoticeListenAddress != "" {
		mirror = metadata.NewMirror(keys...)
		endpoint := newNoticeEndpoint(opts, node, mirror, events, metrics.NewNoticeEndpoint(nodeLabels), logger.With("component", "notice"), clk)
		noticeDetail = endpoint.detail
		served := make(chan struct{})
		go func() { defer close(served); endpoint.run(ctx) }()
		defer func() { <-served }() // before the Events' shutdown
	}
	a, err := agent.New(agent.Options{
		Mirror:   mirror,
		Client:   client,
		NodeName: opts.NodeName,
		Self:     types.NamespacedName{Namespace: opts.PodNamespace, Name: opts.PodName},
		Watcher:  watcher,
		Pods:     drain.NewNodePods(client.PodListWatch(opts.NodeName), logger.With("watch", "pods")),
		Config: lifecycle.Config{HostMaintenanceDeadline: opts.HostMaintenanceDeadline, PreemptionDeadline: opts.PreemptionDeadline,
			OngoingDeadline: opts.OngoingDeadline, KnownEndLead: opts.KnownEndLead, IgnoreGKEHandler: opts.GKEHandler == gkeHandlerIgnore,
			ManualDrainTimeout: opts.ManualDrainTimeout, ManualStartTimeout: opts.ManualStartTimeout, ReportTimeout: opts.ReportTimeout,
			TriggerMaxAge: opts.TriggerMaxAge, ManualDrainEscalate: opts.ManualDrainEscalate, FailureCooldown: opts.FailureCooldown},
		PoolLabel:                opts.PoolLabel,
		SliceLabel:               opts.SliceLabel,
		ReservationGroups:        opts.ReservationGroups,
		AcceleratorResources:     resourceNames(opts.AcceleratorResources),
		AcceleratorDeviceClasses: opts.AcceleratorDeviceClasses,
		ManualGate:               manualGate,
		ObserveOnly:              observeOnly,
		Leases:                   client,
		ShadowNamespace:          opts.PodNamespace,
		Maintainer:               caller.maintainer,
		Relay:                    caller.relay,
		Schedule:                 schedule(opts, caller.metadata, caller.scheduling),
		RetryInterval:            opts.EvictionRetryInterval,
		DrainTiming:              &drain.Timing{Reserve: opts.DrainReserve, Margin: opts.DrainMargin},
		EvictionRequests:         evictionRequests(opts, client),
		Metrics:                  m,
		Events:                   events,
		Clock:                    clk,
		Logger:                   logger,
	})
	if err != nil {
		return err
	}
	if src != nil {
		src.OnChange(a.Wake) // the mode may change with the policy
		src.Run(ctx)         // until it is read, manual triggers are refused (policy_unknown)
		awaitPolicy(ctx, src, logger)
	}

	started := clk.Now()
	healthy := func() error {
		return errors.Join(watcher.Healthy(keys, started, opts.UnhealthyAfter), a.Healthy(opts.UnhealthyAfter))
	}
	setRunning(healthy, noticeDetail)
	registerHealth(nodeLabels, healthy)
	return a.Start(ctx)
}

// caller is who makes the Compute Engine calls on the VM (--compute-caller).
type caller struct {
	maintainer agent.Maintainer
	relay      *agent.Relay // the aggregator's, asked through the Node; nil: the node's own
	scheduling func(context.Context) (compute.Scheduling, error)
	metadata   *gcemetadata.Client
}

func newCaller(ctx context.Context, opts *Options, node *corev1.Node, clk clock.Clock, logger *slog.Logger) (caller, error) {
	if opts.MetadataHost != "" {
		// The OAuth token source reads the metadata server from here.
		if err := os.Setenv("GCE_METADATA_HOST", opts.MetadataHost); err != nil {
			return caller{}, fmt.Errorf("set GCE_METADATA_HOST: %w", err)
		}
	}
	md := metadata.NewClient(30*time.Second, opts.MetadataHost)
	if opts.ComputeCaller == computeCallerAggregator {
		relay := agent.NewRelay()
		return caller{maintainer: relay, relay: relay, scheduling: relay.Scheduling, metadata: md}, nil
	}
	m, err := compute.NewMaintainer(ctx, compute.Options{Endpoint: opts.ComputeEndpoint, Clock: clk, Logger: logger.With("component", "compute")})
	if err != nil {
		return caller{}, err
	}
	vm := &compute.VM{Maintainer: m, Metadata: md, ProviderID: node.Spec.ProviderID}
	return caller{maintainer: vm, scheduling: vm.Scheduling, metadata: md}, nil
}

// reportClient counts client's requests and the health of its watches.
func reportClient(reg prometheus.Registerer, client *kube.Client) {
	cm := metrics.NewClient(reg, "agent")
	cm.ReportClientGo()
	client.ReportWatches(cm)
}

// nodeRegisterer registers with reg series that carry node's name and
// pool.
func nodeRegisterer(reg prometheus.Registerer, opts *Options, node *corev1.Node) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"node_name": opts.NodeName, "node_pool_name": node.Labels[opts.PoolLabel]}, reg)
}

// registerHealth exports what /healthz answers.
func registerHealth(reg prometheus.Registerer, healthy func() error) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "maintenance_handler_agent_healthy",
		Help: "1 when /healthz answers ok (every watched metadata key answered, the Node updated, and the watches the agent needs healthy, within --unhealthy-after), 0 otherwise.",
	}, func() float64 {
		if healthy() != nil {
			return 0
		}
		return 1
	}))
}

// startingHold is how long /healthz holds a request that comes while the
// agent starts: less than the startup and readiness probes' timeout in the
// manifests (5 s).
const startingHold = 4 * time.Second

func resourceNames(names []string) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(names))
	for _, n := range names {
		out = append(out, corev1.ResourceName(n))
	}
	return out
}

// schedule is how the agent learns what the VM's own clock says (see
// readSchedule), from the metadata server and the VM's instances.get.
func schedule(opts *Options, md *gcemetadata.Client, scheduling func(context.Context) (compute.Scheduling, error)) func(context.Context) (agent.Schedule, error) {
	get := func(ctx context.Context, key string) (string, error) {
		v, err := md.GetWithContext(ctx, key)
		var undefined gcemetadata.NotDefinedError
		switch {
		case errors.As(err, &undefined):
			return "", nil
		case err != nil:
			return "", fmt.Errorf("read %s: %w", key, err)
		}
		return strings.TrimSpace(v), nil
	}
	return func(ctx context.Context) (agent.Schedule, error) {
		return readSchedule(ctx, opts, get, scheduling)
	}
}

// readSchedule learns what the VM's own clock says, and whether it
// live-migrates on host maintenance (the metadata server's
// instance/scheduling/on-host-maintenance is MIGRATE; TERMINATE, another
// value or none is taken as a stop, which is drained for). A preemption notice
// exists only on a Spot VM (scheduling.preemptionNoticeDuration is "Spot
// only", and GKE's node pools cannot set it): --preemption-notice auto
// reads it with instances.get where the metadata server says the VM is
// preemptible; a duration given applies only where the metadata server
// says so too, and not where instances.get, when read, says the VM's
// provisioning model is another than SPOT; none gives none. --known-end
// auto reads the VM's end with the same call, and none looks for no end;
// what that call says also tells whether Compute Engine would take a
// report of the VM's host (lifecycle.NotReportable).
func readSchedule(ctx context.Context, opts *Options, metadata func(ctx context.Context, key string) (string, error),
	scheduling func(context.Context) (compute.Scheduling, error)) (agent.Schedule, error) {
	notice, auto, _ := opts.preemptionNotice()
	endAuto := opts.KnownEnd == knownEndAuto
	out := agent.Schedule{EndKnown: !endAuto}
	policy, err := metadata(ctx, "instance/scheduling/on-host-maintenance")
	if err != nil {
		return out, err
	}
	out.LiveMigrates = policy == "MIGRATE"
	if auto || notice > 0 {
		preemptible, err := metadata(ctx, "instance/scheduling/preemptible")
		if err != nil {
			return out, err
		}
		spot := preemptible == "TRUE"
		out.NoticeWanted = auto && spot
		if spot {
			out.PreemptionNotice = notice
		}
	}
	if !out.NoticeWanted && !endAuto {
		return out, nil
	}
	sc, err := scheduling(ctx)
	if err != nil {
		return out, err
	}
	switch {
	case out.NoticeWanted:
		out.PreemptionNotice = sc.PreemptionNotice
	case sc.ProvisioningModel != "" && sc.ProvisioningModel != "SPOT":
		out.PreemptionNotice = 0
	}
	if endAuto {
		out.End, out.EndCause, out.EndKnown = sc.End, sc.EndCause, true
	}
	out.Reportable = lifecycle.ReportableView{ReportableKnown: true,
		NotReportable: lifecycle.NotReportable(sc.MachineType, sc.ProvisioningModel, sc.Status, sc.Consumption.Reservation != "")}
	return out, nil
}

// observeOnlyOf is whether the agent observes only, by its flag alone
// (nil: never).
func observeOnlyOf(opts *Options) func(*corev1.Node) (bool, bool) {
	if !opts.ObserveOnly {
		return nil
	}
	return func(*corev1.Node) (bool, bool) { return true, true }
}

// policyWait bounds how long the agent waits for the policy before it
// starts: until it is read, the node is observed only (nothing changed).
const policyWait = 10 * time.Second

// awaitPolicy waits, up to policyWait, for the policy to be read, so that
// the agent starts in the mode the policy gives its node.
func awaitPolicy(ctx context.Context, src *policysource.Source, logger *slog.Logger) {
	wctx, cancel := context.WithTimeout(ctx, policyWait)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), src.Synced) && ctx.Err() == nil {
		logger.Warn("the policy ConfigMap is not read yet: until it is, manual triggers are refused and the node is observed only (nothing changed)", "configmap", src.Name())
	}
}

// evictionRequests is the EvictionRequest API the drain asks through, with
// --eviction-requests; nil without.
func evictionRequests(opts *Options, client *kube.Client) drain.Requests {
	if !opts.EvictionRequests {
		return nil
	}
	return client
}
