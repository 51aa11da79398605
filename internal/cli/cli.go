// Package cli is what the project's binaries (cmd/agent, cmd/aggregator)
// share: flag parsing with --version, JSON logging, and the servers of
// their listeners (/metrics, /healthz, /readyz, the eviction check, the
// notice endpoint).
//
// Every listener is bounded (Bounds): a share of connections per client
// address, or per node where the listener knows the nodes' pod ranges
// (NodeRanges: the aggregator's), an overall cap for every address but the host's own (so that
// the kubelet's probes of a host-network pod keep places no pod can
// take), and deadlines that close idle and slow connections. A connection
// past the bounds is refused at once, counted and logged (LogRefused); it
// never waits for a place, nor takes one.
//
// Concurrency: a listener's places are counted under a lock, taken in
// Accept and given back when the server closes the connection; refused
// connections are answered on goroutines of their own, a bounded number.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
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
