// Command aggregator is maintenance-handler's leader-elected opportunistic
// maintenance controller (a Deployment of two replicas). See package
// aggregator.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	admissionregistrationv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/internal/cli"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// version is stamped at build time: -ldflags "-X main.version=...".
var version = "dev"

func main() {
	opts := NewOptions()
	cli.Main("aggregator", version, opts, &opts.LogLevel, func(ctx context.Context, logger *slog.Logger) error { return run(ctx, opts, logger) })
}

func run(ctx context.Context, opts *Options, logger *slog.Logger) error {
	cfg, err := kube.Load(opts.Kubeconfig, "maintenance-handler-aggregator/"+version, opts.KubeAPIQPS, opts.KubeAPIBurst)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	m := metrics.NewAggregator(reg)
	cm := metrics.NewClient(reg, "aggregator")
	cm.ReportClientGo()
	client, err := kube.New(cfg)
	if err != nil {
		return err
	}
	client.ReportWatches(cm)
	leases, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// Events through a client of their own: its own rate limit (the same
	// QPS and burst), so that they never hold back a trigger.
	events, err := kube.New(cfg)
	if err != nil {
		return err
	}
	// The relay's answers too: a flood of nodes' asks never holds back a
	// pass's writes.
	relayClient, err := kube.New(cfg)
	if err != nil {
		return err
	}
	if opts.Uninstall {
		done, err := aggregator.Uninstall(ctx, client, leases, clock.RealClock{}, aggregator.UninstallScope{Namespace: opts.Namespace, AgentNamespace: cmp.Or(opts.AgentNamespace, opts.Namespace), LeaseName: opts.LeaseName}, logger)
		logger.Info("uninstalled", "cleaned", len(done.Cleaned), "in_maintenance", done.InMaintenance)
		return err
	}
	// The Compute API, with the token of the pod's service account (on
	// GKE, Workload Identity's): the agents' calls (the relay) and
	// --reservations.
	caller, err := compute.NewMaintainer(ctx, compute.Options{Endpoint: opts.ComputeEndpoint, ServiceAccount: "the aggregator's service account",
		Logger: logger.With("component", "compute")})
	if err != nil {
		return err
	}
	reservations, reader := reservationReader(opts, caller)
	ranges, shareOf := nodeShares(opts)
	a, err := aggregator.New(aggregator.Options{
		Notify:       notifyOptions(opts),
		Reservations: reservations, ReservationReader: reader, ReservationInterval: opts.ReservationInterval, MaintainUnusedCapacity: opts.MaintainUnusedCapacity,
		Client: client, Leases: leases, EventClient: events, RelayClient: relayClient, Namespace: opts.Namespace, ConfigMap: opts.ConfigMap,
		LeaseName: opts.LeaseName, Identity: opts.Identity,
		LeaseDuration: opts.LeaseDuration, RenewDeadline: opts.RenewDeadline, RetryPeriod: opts.RetryPeriod,
		PoolLabel: opts.PoolLabel, Interval: opts.Interval, RecreateWindow: opts.RecreateWindow, TriggerAnswerTimeout: opts.TriggerAnswerTimeout, RepairAskGrace: opts.RepairAskGrace, AdoptGKEConfig: opts.GKEConfig == "adopt", ObserveOnly: opts.ObserveOnly, NodesCallCompute: opts.ComputeCaller == "node", AgentNamespace: opts.AgentNamespace,
		AutoscalerStatus: opts.AutoscalerStatus, SliceLabel: opts.SliceLabel, ReservationGroups: opts.ReservationGroups,
		Caller: caller, Home: homeOf(ctx, opts, logger), PodRanges: ranges.Set, Metrics: m, Logger: logger,
	})
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	refused := metrics.NewConnectionsRefused("aggregator", "metrics", "eviction-check")
	reg.MustRegister(refused)
	countRefused := func(listener string) func(string) {
		return cli.LogRefused(logger, listener, func(reason string) { refused.WithLabelValues(listener, reason).Inc() })
	}
	ready, err := serveEvictionCheck(ctx, g, cfg, opts, reg, countRefused("eviction-check"), shareOf, logger)
	if err != nil {
		return err
	}
	mux := serveMux(reg, func() error { return a.Healthy(opts.UnhealthyAfter) }, ready)
	addr, err := cli.ServeShared(ctx, g, opts.ListenAddress, mux, nil, countRefused("metrics"), shareOf)
	if err != nil {
		return err
	}
	logger.Info("aggregator started", "version", version, "identity", opts.Identity, "listen", addr.String())
	g.Go(func() error { return watchMemory(ctx, opts, events, m, logger) })
	g.Go(func() error { return a.Start(ctx) })
	return g.Wait()
}

// nodeShares are the nodes' pod ranges, which the Node watch keeps, and the
// share of each client address on the listeners: one per node, whatever
// number of pod addresses that node has (package cli, NodeRanges), but for
// the replica's own node, whose addresses keep one each.
func nodeShares(opts *Options) (*cli.NodeRanges, func(netip.Addr) string) {
	ranges := &cli.NodeRanges{}
	return ranges, func(addr netip.Addr) string {
		if node := ranges.NodeOf(addr); node != opts.NodeName {
			return node
		}
		return ""
	}
}

// serveEvictionCheck serves the eviction check (package admission) in g
// where --eviction-check-listen-address is set, and keeps its certificate;
// ready says whether the replica can serve it (always, where it is off).
// refused is told of each connection its listener refuses; shareOf names
// each client address's share (cli.Bounds.ShareOf).
func serveEvictionCheck(ctx context.Context, g *errgroup.Group, cfg *rest.Config, opts *Options, reg *prometheus.Registry, refused func(string), shareOf func(netip.Addr) string, logger *slog.Logger) (ready func() bool, err error) {
	if opts.EvictionCheckListenAddress == "" {
		return func() bool { return true }, nil
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	hooks, err := admissionregistrationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	log := logger.With("component", "eviction-check")
	certs := &admission.Certs{
		Secrets: core.Secrets(opts.Namespace), SecretName: opts.EvictionCheckSecret,
		Webhooks: hooks.ValidatingWebhookConfigurations(), Webhook: opts.EvictionCheckWebhook,
		Hosts: append(admission.ServiceHosts(opts.EvictionCheckService, opts.Namespace), opts.EvictionCheckHosts...),
		Clock: clock.RealClock{}, Logger: log,
	}
	// The pods it reads through a client of its own, with its own rate:
	// a fleet's evictions never wait behind the leader's writes, nor
	// those behind them.
	podsCfg := rest.CopyConfig(cfg)
	podsCfg.QPS, podsCfg.Burst = opts.EvictionCheckQPS, opts.EvictionCheckBurst
	pods, err := kube.New(podsCfg)
	if err != nil {
		return nil, err
	}
	m := metrics.NewEvictionCheck(reg)
	// Each node's pods are one source, as they hold one share of
	// connections: a budget of refused reviews, and of unknown tokens'.
	sources := admission.NewSources(shareOf, log)
	var check http.Handler = &admission.Check{Pods: pods.GetPod, Metrics: m, Sources: sources, Nodes: &admission.PodNodes{}, Clock: clock.RealClock{}, Logger: log}
	if len(opts.EvictionCheckCallers) > 0 {
		reviews, err := authenticationv1client.NewForConfig(podsCfg)
		if err != nil {
			return nil, err
		}
		callers := admission.NewCallers(reviews.TokenReviews().Create, opts.EvictionCheckCallers, m.CallerRefused)
		callers.SourceOf = sources.Of
		check = callers.Wrap(check)
	}
	// As admission.Serve serves it, with a share of connections per node.
	mux := http.NewServeMux()
	mux.Handle(admission.Path, check)
	addr, err := cli.ServeShared(ctx, g, opts.EvictionCheckListenAddress, mux, &tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12}, refused, shareOf)
	if err != nil {
		return nil, err
	}
	g.Go(func() error { return certs.Start(ctx) })
	log.Info("eviction check serving", "listen", addr.String())
	return certs.Ready, nil
}

// watchMemory sets the Go runtime's soft memory limit to 90% of the
// container's (unless GOMEMLIMIT is set) and runs the replica's
// aggregator.MemoryWatch.
func watchMemory(ctx context.Context, opts *Options, events *kube.Client, m *metrics.Aggregator, logger *slog.Logger) error {
	limit, _ := opts.memoryLimit() // Validate read it
	if soft := limit / 10 * 9; soft > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(soft)
		logger.Info("memory limit", "containerBytes", limit, "goSoftLimitBytes", soft)
	}
	rec := kube.NewRecorder(events.EventSink(), corev1.EventSource{Component: protocol.EventSourceAggregator}, nil)
	defer rec.Shutdown()
	w := &aggregator.MemoryWatch{
		Limit: limit, Used: aggregator.GoMemory,
		Pod:      &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: opts.Namespace, Name: opts.Identity},
		Recorder: rec, Metrics: m, Clock: clock.RealClock{}, Logger: logger,
	}
	return w.Start(ctx)
}

// serveMux serves /metrics from reg, /healthz (healthy) and /readyz
// (ready: the eviction check can serve).
func serveMux(reg *prometheus.Registry, healthy func() error, ready func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(reg))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "the eviction check has no serving certificate yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// reservationReader is what reads --reservations: m; none when none is
// named.
func reservationReader(opts *Options, m *compute.Maintainer) ([]compute.Reservation, aggregator.ReservationReader) {
	if len(opts.Reservations) == 0 {
		return nil, nil
	}
	var out []compute.Reservation
	for _, s := range opts.Reservations {
		r, _ := compute.ParseReservation(s) // validated before
		out = append(out, r)
	}
	return out, m
}

// notifyOptions is the webhook notifier the flags configure (nil: none).
func notifyOptions(opts *Options) *aggregator.NotifyOptions {
	if opts.NotifyURLFile == "" {
		return nil
	}
	return &aggregator.NotifyOptions{URLFile: opts.NotifyURLFile, Format: opts.NotifyFormat, Template: opts.notifyTemplate, HeadersFile: opts.NotifyHeadersFile,
		Timeout: opts.NotifyTimeout, Retries: opts.NotifyRetries, Cluster: opts.ClusterName, Steps: opts.notifySteps, Digest: opts.NotifyDigest}
}
