// Package cli is what the project's binaries (cmd/agent, cmd/aggregator)
// share: flag parsing with --version, JSON logging, and the /metrics and
// /healthz server.
package cli

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

	"github.com/spf13/pflag"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
)

// Options are a binary's flags.
type Options interface {
	AddFlags(fs *pflag.FlagSet)
	// Validate reports every problem at once.
	Validate() error
}

// Main parses the flags into opts (--version prints "maintenance-handler
// name version" and exits), validates them (exit 2, naming every problem),
// logs JSON to stderr at *logLevel (a field AddFlags binds), and runs run
// until SIGINT or SIGTERM. A failed run exits 1.
func Main(name, version string, opts Options, logLevel *string, run func(context.Context, *slog.Logger) error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
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
		fmt.Println("maintenance-handler", name, version)
		return
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "invalid flags:\n"+err.Error())
		os.Exit(2)
	}
	level, _ := ParseLevel(*logLevel)
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	klog.SetSlogLogger(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, logger); err != nil && !errors.Is(err, context.Canceled) {
		logger.Error(name+" stopped", "err", err)
		os.Exit(1)
	}
}

// ParseLevel parses --log-level.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// Serve listens on addr and serves h in g until ctx ends, then shuts the
// server down (bounded). It returns the address it listens on.
// ServeBounded serves h on addr until ctx ends, for clients that are not
// trusted: at most maxConns connections at once, headers of at most 8 KiB
// read within 5 s (no read timeout past them: the request context would end
// with it), idle connections closed after a minute. A long poll
// may hold a connection as long as h lets it.
func ServeBounded(ctx context.Context, addr string, h http.Handler, maxConns int) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}
	go func() { _ = srv.Serve(netutil.LimitListener(ln, maxConns)) }()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		_ = srv.Close() // long polls
	}()
	return ln.Addr(), nil
}

func Serve(ctx context.Context, g *errgroup.Group, addr string, h http.Handler) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
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
	return ln.Addr(), nil
}
