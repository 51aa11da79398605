package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/internal/cli"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// noticeConnections bounds the connections to the notice endpoint from
// addresses other than the node's own: a node's pods, each long-polling a
// few keys.
const noticeConnections = 256

// noticePerClient bounds the connections one client address holds on the
// notice endpoint at once: a pod whose processes each long-poll a few keys
// fits, and no one pod can hold all of noticeConnections.
const noticePerClient = 32

// noticeRetry is the pause between two tries to listen on the notice
// endpoint's address.
var noticeRetry = backoff.Policy{Base: time.Second, Max: time.Minute}

// noticeEndpoint serves the maintenance keys to the node's pods for the
// agent's life. A failure to listen (another program holds the port) does
// not stop the agent, which handles the node's maintenance all the same:
// it is a Warning Event, a log line, the serving gauge at 0 and a detail
// on /healthz, and listening is tried again with backoff until it
// succeeds (then a Normal Event).
type noticeEndpoint struct {
	addr string
	// allow says whom it serves (nil: everyone who reaches addr).
	allow  func(net.IP) bool
	mirror *metadata.Mirror
	events *kube.NodeEvents
	m      *metrics.NoticeEndpoint
	logger *slog.Logger
	clk    clock.Clock
	// problem says why the endpoint does not serve; nil while it does
	// (or has not tried yet).
	problem atomic.Pointer[string]
}

// newNoticeEndpoint is the endpoint --notice-listen-address asks for on
// node, serving mirror to the node and its pods (noticeSources).
func newNoticeEndpoint(opts *Options, node *corev1.Node, mirror *metadata.Mirror, events *kube.NodeEvents, m *metrics.NoticeEndpoint,
	logger *slog.Logger, clk clock.Clock) *noticeEndpoint {
	extra, _ := opts.noticeRanges() // validated
	allow := noticeSources(node, extra)
	if allow == nil {
		logger.Warn("the notice endpoint serves everyone who reaches the node's address: the Node names no pod range (spec.podCIDRs) and --notice-allowed-cidrs is empty")
	}
	return &noticeEndpoint{addr: opts.NoticeListenAddress, allow: allow, mirror: mirror, events: events, m: m, logger: logger, clk: clk}
}

// detail is the endpoint's line on /healthz: "" while it serves.
func (e *noticeEndpoint) detail() string {
	if p := e.problem.Load(); p != nil {
		return *p
	}
	return ""
}

// run listens and serves until ctx ends.
func (e *noticeEndpoint) run(ctx context.Context) {
	for failures := 0; ; {
		ln, err := net.Listen("tcp", e.addr)
		if err == nil {
			cli.ServeBounded(ctx, ln, e.mirror, cli.Bounds{Conns: noticeConnections, PerSource: noticePerClient, Allow: e.allow,
				Refused: cli.LogRefused(e.logger, "notice", func(reason string) { e.m.Refused.WithLabelValues(reason).Inc() })})
			e.problem.Store(nil)
			e.m.Serving.Set(1)
			e.logger.Info("serving the maintenance keys to the node's pods", "listen", ln.Addr().String())
			if failures > 0 {
				e.events.NodeEvent(false, protocol.EventNoticeEndpointServing, fmt.Sprintf("The notice endpoint serves the node's pods on %s.", ln.Addr()))
			}
			return
		}
		failures++
		why := fmt.Sprintf("notice endpoint unhealthy: cannot listen on %s: %v; the node's maintenance is handled all the same, but its pods cannot read the notice from this node; trying again", e.addr, err)
		e.problem.Store(&why)
		e.m.Serving.Set(0)
		if failures == 1 {
			e.logger.Error("cannot serve the notice endpoint; trying again with backoff", "listen", e.addr, "err", err)
			e.events.NodeEvent(true, protocol.EventNoticeEndpointUnavailable, why+" with backoff (at most a minute apart).")
		}
		if backoff.Wait(ctx, e.clk, noticeRetry.Delay(failures)) != nil {
			return
		}
	}
}

// noticeSources is whom the notice endpoint serves on node: the node
// itself (its addresses) and its pods (its pod ranges, spec.podCIDRs),
// and the ranges extra adds (pods whose network plugin gives addresses
// outside the Node's ranges). It is nil, serving everyone who reaches the
// node's address, when the Node names no pod range and extra is empty:
// the endpoint cannot tell its pods then, and the log says so.
func noticeSources(node *corev1.Node, extra []*net.IPNet) func(net.IP) bool {
	ranges := slices.Clone(extra)
	for _, c := range node.Spec.PodCIDRs {
		if _, r, err := net.ParseCIDR(c); err == nil {
			ranges = append(ranges, r)
		}
	}
	if len(ranges) == 0 {
		return nil
	}
	var own []net.IP
	for _, a := range node.Status.Addresses {
		if ip := net.ParseIP(a.Address); ip != nil {
			own = append(own, ip)
		}
	}
	return func(ip net.IP) bool {
		return slices.ContainsFunc(own, ip.Equal) || slices.ContainsFunc(ranges, func(r *net.IPNet) bool { return r.Contains(ip) })
	}
}
