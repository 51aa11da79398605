package cli

// The bounds every listener of the project keeps: a share of connections
// per client (an address, or the node whose pods' addresses it holds), an
// overall cap for everyone but the host itself,
// and refusals that cost the refused client its connection, not anyone
// else's.

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Why a connection is refused, as Bounds.Refused is told.
const (
	// RefusedOverShare: its client (its address, or its node: ShareOf)
	// already held PerSource connections (answered 429 Too Many Requests over plain HTTP).
	RefusedOverShare = "over_share"
	// RefusedFull: Conns connections were open from addresses other than
	// the host's own (answered 503 Service Unavailable over plain HTTP).
	RefusedFull = "full"
	// RefusedForeign: Allow does not serve its address (answered 403
	// Forbidden over plain HTTP).
	RefusedForeign = "foreign"
)

// Bounds are what a listener allows its clients.
type Bounds struct {
	// Conns bounds the connections open at once from every address but
	// the host's own; one more is refused (RefusedFull).
	Conns int
	// PerSource bounds the connections open at once from one client
	// address (or one node's pods: ShareOf), the host's own included; one
	// more is refused
	// (RefusedOverShare), without taking a place of Conns.
	//
	// A connection whose client address is the address it reached comes
	// from the host itself: on a node, its kubelet's probes of a
	// host-network pod (and the node's other host-network processes).
	// Those hold their own share apart from Conns, so that no number of
	// other clients can keep the kubelet's probes out.
	PerSource int
	// ShareOf, when set, names the share a client address takes its
	// places from: the node whose pods the address is one of
	// (NodeRanges.NodeOf), so that one node holds one share however many
	// pods, each with an address of its own, it runs. "" keeps the
	// address's own share. The host's own address keeps its own share
	// whatever ShareOf says.
	ShareOf func(netip.Addr) string
	// Allow, when set, says which client addresses are served; any other
	// is refused (RefusedForeign), without taking a place.
	Allow func(net.IP) bool
	// Refused, when set, is told of each connection refused, and why.
	Refused func(reason string)
}

// limited is a listener that keeps b: a connection past them is refused
// in Accept and never reaches the server. Over plain HTTP a refused client
// reads why; over TLS its connection is closed.
type limited struct {
	net.Listener
	b     Bounds
	plain bool
	mu    sync.Mutex
	open  map[share]int
	// shared is the connections open that count against b.Conns.
	shared int
	// answering holds a place for each refused connection being answered.
	answering chan struct{}
}

// maxAnswering bounds the refused connections answered at once: past it,
// one is closed without an answer, so that a flood of refused clients
// holds no more than this many goroutines and sockets.
const maxAnswering = 16

// refuseWithin bounds the time a refused connection is held while it is
// answered.
const refuseWithin = 5 * time.Second

// share is whose places a connection takes: a node's (node set), or its
// client address's.
type share struct {
	node string
	addr netip.Addr
}

func newLimited(ln net.Listener, b Bounds, plain bool) *limited {
	return &limited{Listener: ln, b: b, plain: plain, open: map[share]int{}, answering: make(chan struct{}, maxAnswering)}
}

// shareOf is the share a connection from src takes.
func (l *limited) shareOf(src netip.Addr, own bool) share {
	if !own && l.b.ShareOf != nil {
		if node := l.b.ShareOf(src); node != "" {
			return share{node: node}
		}
	}
	return share{addr: src}
}

// Accept returns the next connection its bounds admit; it refuses the
// others on the way.
func (l *limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, own := sourceOf(c)
		if l.b.Allow != nil && !l.b.Allow(net.IP(src.AsSlice())) {
			l.refuse(c, RefusedForeign, http.StatusForbidden, "This endpoint serves only its node and the node's own pods.\n")
			continue
		}
		sh := l.shareOf(src, own)
		switch reason := l.take(sh, own); reason {
		case "":
			return &sourceConn{Conn: c, release: sync.OnceFunc(func() { l.release(sh, own) })}, nil
		case RefusedOverShare:
			from := "this address"
			if sh.node != "" {
				from = "this node's pods"
			}
			l.refuse(c, reason, http.StatusTooManyRequests, fmt.Sprintf("Too many connections from %s: at most %d at once.\n", from, l.b.PerSource))
		default:
			l.refuse(c, reason, http.StatusServiceUnavailable, "Too many connections at once; try again.\n")
		}
	}
}

// sourceOf is c's client address, and whether it is the address c
// reached: the host itself.
func sourceOf(c net.Conn) (netip.Addr, bool) {
	remote, local := addrOf(c.RemoteAddr()), addrOf(c.LocalAddr())
	return remote, remote.IsValid() && remote == local
}

func addrOf(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort().Addr().Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// take gives sh a place, or says why it gets none.
func (l *limited) take(sh share, own bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.b.PerSource > 0 && l.open[sh] >= l.b.PerSource:
		return RefusedOverShare
	case !own && l.b.Conns > 0 && l.shared >= l.b.Conns:
		return RefusedFull
	}
	l.open[sh]++
	if !own {
		l.shared++
	}
	return ""
}

func (l *limited) release(sh share, own bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[sh]--; l.open[sh] <= 0 {
		delete(l.open, sh)
	}
	if !own {
		l.shared--
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

// refuse tells b.Refused of c and, over plain HTTP, answers the request
// on c with status and body in the background before it closes c: read
// first, so that the client reads the answer rather than a reset. Past
// maxAnswering at once, and over TLS, c is closed unanswered.
func (l *limited) refuse(c net.Conn, reason string, status int, body string) {
	if l.b.Refused != nil {
		l.b.Refused(reason)
	}
	if !l.plain {
		_ = c.Close()
		return
	}
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
	_ = c.SetDeadline(time.Now().Add(refuseWithin))
	if _, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, 8<<10))); err != nil {
		return
	}
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// LogRefused is a Bounds.Refused that calls count with each refusal's
// reason (a metric) and logs that connections to listener are refused at
// most once a minute, so that a flood of refused clients is one line a
// minute, not one a connection.
func LogRefused(logger *slog.Logger, listener string, count func(reason string)) func(reason string) {
	var once rate.Sometimes
	once.Interval = time.Minute
	once.First = 1
	return func(reason string) {
		count(reason)
		once.Do(func() {
			logger.Warn("connections refused: a client holds its share, or the listener is full (counted by reason in the metric; logged at most once a minute)",
				"listener", listener, "reason", reason)
		})
	}
}
