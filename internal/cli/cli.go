// Package cli is what the project's binaries (cmd/agent, cmd/aggregator)
// share: flag parsing with --version, JSON logging, and the /metrics and
// /healthz server.
package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
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

// Bounds are what ServeBounded allows its clients.
type Bounds struct {
	// Conns bounds the connections open at once, in all.
	Conns int
	// PerSource bounds the connections open at once from one client
	// address: one more is answered 429 Too Many Requests and closed,
	// without taking one of Conns, and Refused (if set) is called.
	PerSource int
	Refused   func()
	// Allow, when set, says which client addresses are served: a
	// connection from any other is answered 403 and closed, without
	// taking one of Conns, and Foreign (if set) is called.
	Allow   func(net.IP) bool
	Foreign func()
}

// ServeBounded serves h on ln until ctx ends, for clients that are not
// trusted: at most b.Conns connections at once, at most b.PerSource of
// them from one address, headers of at most 8 KiB read within 5 s (no
// read timeout past them: the request context would end with it), idle
// connections closed after a minute. A long poll may hold a connection
// as long as h lets it.
func ServeBounded(ctx context.Context, ln net.Listener, h http.Handler, b Bounds) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}
	bounded := netutil.LimitListener(&perSource{Listener: ln, max: b.PerSource, refused: b.Refused, allow: b.Allow, foreign: b.Foreign,
		open: map[string]int{}, answering: make(chan struct{}, maxAnswering)}, b.Conns)
	go func() { _ = srv.Serve(bounded) }()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		_ = srv.Close() // long polls
	}()
}

// perSource is a listener that serves only the client addresses allow
// accepts (all when nil), and holds each to max connections open at once.
type perSource struct {
	net.Listener
	max     int
	refused func()
	allow   func(net.IP) bool
	foreign func()
	mu      sync.Mutex
	open    map[string]int
	// answering holds a place for each refused connection being answered.
	answering chan struct{}
}

// maxAnswering bounds the refused connections answered at once: past it,
// one is closed without an answer, so that a flood of refused clients
// holds no more than this many goroutines and sockets.
const maxAnswering = 16

func (l *perSource) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := c.RemoteAddr().String()
		if host, _, err := net.SplitHostPort(src); err == nil {
			src = host
		}
		if l.allow != nil && !l.allow(net.ParseIP(src)) {
			if l.foreign != nil {
				l.foreign()
			}
			l.answer(c, http.StatusForbidden, "This endpoint serves only its node and the node's own pods.\n")
			continue
		}
		l.mu.Lock()
		over := l.max > 0 && l.open[src] >= l.max
		if !over {
			l.open[src]++
		}
		l.mu.Unlock()
		if !over {
			return &sourceConn{Conn: c, release: sync.OnceFunc(func() { l.release(src) })}, nil
		}
		if l.refused != nil {
			l.refused()
		}
		l.answer(c, http.StatusTooManyRequests, fmt.Sprintf("Too many connections from this address: at most %d at once.\n", l.max))
	}
}

func (l *perSource) release(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[src]--; l.open[src] <= 0 {
		delete(l.open, src)
	}
}

// sourceConn gives its address's place back when it closes.
type sourceConn struct {
	net.Conn
	release func()
}

func (c *sourceConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// answer answers the request on c, a connection refused, with status and
// body and closes it, in the background: read first, so that the client
// reads the answer rather than a reset. Past maxAnswering at once, c is
// closed unanswered.
func (l *perSource) answer(c net.Conn, status int, body string) {
	select {
	case l.answering <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-l.answering }()
		respond(c, status, body)
	}()
}

func respond(c net.Conn, status int, body string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, 8<<10))); err != nil {
		return
	}
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// What Serve holds open: any pod can reach the agent's port (host
// network, every interface) and the aggregator's, so idle connections
// are closed and their number bounded, lest they exhaust the process's
// memory before the next preemption.
var (
	// serveIdle closes a kept-alive connection with no request (a
	// scrape every 15 s or more keeps its own).
	serveIdle = time.Minute
	// serveHeader bounds the wait for a request's headers.
	serveHeader = 10 * time.Second
)

// serveConns bounds the connections open at once; a connection past it
// waits in the kernel's backlog until one closes.
const serveConns = 128

// Serve listens on addr and serves h in g until ctx ends, then shuts the
// server down (bounded). It returns the address it listens on. Idle
// connections are closed (serveIdle, serveHeader), at most serveConns are
// served at once, and request headers are bounded to 8 KiB.
func Serve(ctx context.Context, g *errgroup.Group, addr string, h http.Handler) (net.Addr, error) {
	return ServeTLS(ctx, g, addr, h, nil)
}

// ServeTLS is Serve over TLS with cfg (its certificates from
// cfg.GetCertificate); a nil cfg serves plain HTTP.
func ServeTLS(ctx context.Context, g *errgroup.Group, addr string, h http.Handler, cfg *tls.Config) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: serveHeader, IdleTimeout: serveIdle, MaxHeaderBytes: 8 << 10, TLSConfig: cfg}
	ln = netutil.LimitListener(ln, serveConns)
	g.Go(func() error {
		serve := srv.Serve
		if cfg != nil {
			serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
		}
		if err := serve(ln); !errors.Is(err, http.ErrServerClosed) {
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
