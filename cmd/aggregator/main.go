// Command aggregator is maintenance-handler's leader-elected opportunistic
// maintenance controller (a Deployment of two replicas). See package
// aggregator.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/metrics"
)

// version is stamped at build time: -ldflags "-X main.version=...".
var version = "dev"

func main() {
	opts := NewOptions()
	fs := pflag.NewFlagSet("aggregator", pflag.ContinueOnError)
	opts.AddFlags(fs)
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println("maintenance-handler aggregator", version)
		return
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "invalid flags:\n"+err.Error())
		os.Exit(2)
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(opts.LogLevel))
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	klog.SetSlogLogger(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, logger); err != nil && !errors.Is(err, context.Canceled) {
		logger.Error("aggregator stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts *Options, logger *slog.Logger) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "maintenance-handler-aggregator"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a := aggregator.New(aggregator.Options{
		Client: client, Namespace: opts.Namespace, ConfigMap: opts.ConfigMap,
		LeaseName: opts.LeaseName, Identity: opts.Identity,
		LeaseDuration: opts.LeaseDuration, RenewDeadline: opts.RenewDeadline, RetryPeriod: opts.RetryPeriod,
		PoolLabel: opts.PoolLabel, Interval: opts.Interval, RecreateWindow: opts.RecreateWindow,
		Metrics: metrics.NewAggregator(reg), Logger: logger,
	})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", opts.ListenAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", opts.ListenAddress, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	logger.Info("aggregator started", "version", version, "identity", opts.Identity, "listen", ln.Addr().String())
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.Start(ctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve %s: %w", ln.Addr(), err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	})
	return g.Wait()
}
