// Command aggregator is maintenance-handler's leader-elected opportunistic
// maintenance controller (a Deployment of two replicas). See package
// aggregator.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/internal/cli"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
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
	if opts.Uninstall {
		done, err := aggregator.Uninstall(ctx, client, leases, clock.RealClock{}, opts.Namespace, opts.LeaseName, logger)
		logger.Info("uninstalled", "cleaned", len(done.Cleaned), "in_maintenance", done.InMaintenance)
		return err
	}
	a, err := aggregator.New(aggregator.Options{
		Client: client, Leases: leases, EventClient: events, Namespace: opts.Namespace, ConfigMap: opts.ConfigMap,
		LeaseName: opts.LeaseName, Identity: opts.Identity,
		LeaseDuration: opts.LeaseDuration, RenewDeadline: opts.RenewDeadline, RetryPeriod: opts.RetryPeriod,
		PoolLabel: opts.PoolLabel, Interval: opts.Interval, RecreateWindow: opts.RecreateWindow, TriggerAnswerTimeout: opts.TriggerAnswerTimeout, AdoptGKEConfig: opts.GKEConfig == "adopt",
		AutoscalerStatus: opts.AutoscalerStatus, SliceLabel: opts.SliceLabel,
		Metrics: m, Logger: logger,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(reg))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	g, ctx := errgroup.WithContext(ctx)
	addr, err := cli.Serve(ctx, g, opts.ListenAddress, mux)
	if err != nil {
		return err
	}
	logger.Info("aggregator started", "version", version, "identity", opts.Identity, "listen", addr.String())
	g.Go(func() error { return a.Start(ctx) })
	return g.Wait()
}
