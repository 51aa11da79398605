package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"golang.org/x/sync/errgroup"
)

// What Serve holds open: any pod can reach the agent's port (host
// network, every interface) and the aggregator's, so every connection has
// deadlines and their number is bounded, per client address and in all,
// lest one client keep the kubelet's probes, the scrapes or the API
// server's eviction reviews out, or exhaust the process's memory.
var (
	// serveIdle closes a kept-alive connection with no request (a
	// scrape every 15 s or more keeps its own).
	serveIdle = time.Minute
	// serveHeader bounds the wait for a request's headers (and a TLS
	// handshake's).
	serveHeader = 5 * time.Second
	// serveRead bounds the reading of a whole request, its body included:
	// no request Serve answers is a long poll.
	serveRead = 30 * time.Second
)

// serveBounds are Serve's bounds: 16 connections at once from one client
// address, or one node's pods (ServeShared), a scraper, the kubelet's
// probes and the API server's calls taking a few each; 128 in all from
// addresses other than the host's own.
var serveBounds = Bounds{Conns: 128, PerSource: 16}

// Serve listens on addr and serves h in g until ctx ends, then shuts the
// server down (bounded). It returns the address it listens on. It keeps
// serveBounds (refused tells of each connection refused, if not nil),
// closes idle and slow connections (serveIdle, serveHeader, serveRead),
// and bounds request headers to 8 KiB.
func Serve(ctx context.Context, g *errgroup.Group, addr string, h http.Handler, refused func(reason string)) (net.Addr, error) {
	return ServeTLS(ctx, g, addr, h, nil, refused)
}

// ServeTLS is Serve over TLS with cfg (its certificates from
// cfg.GetCertificate); a nil cfg serves plain HTTP. Over TLS a connection
// refused is closed unanswered.
func ServeTLS(ctx context.Context, g *errgroup.Group, addr string, h http.Handler, cfg *tls.Config, refused func(reason string)) (net.Addr, error) {
	return ServeShared(ctx, g, addr, h, cfg, refused, nil)
}

// ServeShared is ServeTLS with the share of each client address named by
// shareOf (Bounds.ShareOf: the node whose pod range holds it,
// NodeRanges.NodeOf); nil keeps a share per address.
func ServeShared(ctx context.Context, g *errgroup.Group, addr string, h http.Handler, cfg *tls.Config, refused func(reason string), shareOf func(netip.Addr) string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: serveHeader, ReadTimeout: serveRead, IdleTimeout: serveIdle, MaxHeaderBytes: 8 << 10, TLSConfig: cfg}
	b := serveBounds
	b.Refused, b.ShareOf = refused, shareOf
	bounded := newLimited(ln, b, cfg == nil)
	g.Go(func() error {
		serve := srv.Serve
		if cfg != nil {
			serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
		}
		if err := serve(bounded); !errors.Is(err, http.ErrServerClosed) {
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

// ServeBounded serves h on ln until ctx ends, keeping b, for clients that
// may long-poll: headers of at most 8 KiB read within 5 s (no read
// timeout past them: the request context would end with it), idle
// connections closed after a minute. A long poll may hold a connection as
// long as h lets it.
func ServeBounded(ctx context.Context, ln net.Listener, h http.Handler, b Bounds) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}
	go func() { _ = srv.Serve(newLimited(ln, b, true)) }()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		_ = srv.Close() // long polls
	}()
}
