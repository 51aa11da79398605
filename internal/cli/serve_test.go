package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"
)

// idleFrom opens n connections to addr from the address source and holds
// them, sending nothing, until the test ends: what any pod on a node can
// do to a port it reaches. It returns once each is open (the kernel has
// it, whether or not the server took it).
func idleFrom(tb testing.TB, source, addr string, n int) {
	tb.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	var mu sync.Mutex
	var held []net.Conn
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			tb.Fatalf("hold a connection from %s: %v", source, err)
		}
		mu.Lock()
		held = append(held, c)
		mu.Unlock()
	}
}

// probeClient is the kubelet's probe, from 127.0.0.1: a new connection
// per request. Its timeout only keeps a failing test from hanging.
func probeClient(tlsConfig *tls.Config) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true, TLSClientConfig: tlsConfig}}
}

// longDeadlines makes Serve's deadlines an hour for the test: a client
// that holds connections open, opening a new one as the server closes
// one, holds them that long.
func longDeadlines(tb testing.TB) {
	idle, header, read := serveIdle, serveHeader, serveRead
	serveIdle, serveHeader, serveRead = time.Hour, time.Hour, time.Hour
	tb.Cleanup(func() { serveIdle, serveHeader, serveRead = idle, header, read })
}

// serveProbes serves /healthz and /readyz as the binaries do, over TLS
// where tlsConfig is set, until the test ends; it returns the address and
// the refusals by reason.
func serveProbes(tb testing.TB, tlsConfig *tls.Config) (string, func() map[string]int) {
	tb.Helper()
	mux := http.NewServeMux()
	for _, path := range []string{"/healthz", "/readyz"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	}
	var mu sync.Mutex
	refused := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	g, ctx := errgroup.WithContext(ctx)
	tb.Cleanup(func() { cancel(); _ = g.Wait() })
	addr, err := ServeTLS(ctx, g, "127.0.0.1:0", mux, tlsConfig, func(reason string) { mu.Lock(); refused[reason]++; mu.Unlock() })
	if err != nil {
		tb.Fatal(err)
	}
	return addr.String(), func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return map[string]int{RefusedOverShare: refused[RefusedOverShare], RefusedFull: refused[RefusedFull]}
	}
}

// testTLS is a serving certificate for 127.0.0.1 and a client
// configuration that trusts it.
func testTLS(tb testing.TB) (server, client *tls.Config) {
	s := httptest.NewUnstartedServer(nil)
	s.StartTLS()
	defer s.Close()
	return &tls.Config{Certificates: s.TLS.Certificates, MinVersion: tls.VersionTLS12}, s.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
}

// TestServeAnswersProbesUnder200IdleConnections: with 200 idle
// connections held from one client address (127.0.0.2), the probes from
// another (127.0.0.1, as the kubelet's) are still answered, over plain
// HTTP as on the agent's and the aggregator's ports and over TLS as on the
// eviction check's: the client holds its share, and each connection past
// it is refused at once and counted.
func TestServeAnswersProbesUnder200IdleConnections(t *testing.T) {
	longDeadlines(t)
	serverTLS, clientTLS := testTLS(t)
	for _, tc := range []struct {
		name   string
		server *tls.Config
		client *tls.Config
		scheme string
	}{
		{"plain", nil, nil, "http"},
		{"TLS", serverTLS, clientTLS, "https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, refused := serveProbes(t, tc.server)
			idleFrom(t, "127.0.0.2", addr, 200)
			probe := probeClient(tc.client)
			for _, path := range []string{"/healthz", "/readyz"} {
				resp, err := probe.Get(tc.scheme + "://" + addr + path)
				if err != nil {
					t.Fatalf("%s under 200 idle connections from another client: %v", path, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s: %d %q, want 200", path, resp.StatusCode, body)
				}
			}
			// The probe's connection came after the 200: each was taken or
			// refused before it.
			want := map[string]int{RefusedOverShare: 200 - serveBounds.PerSource, RefusedFull: 0}
			if diff := cmp.Diff(want, refused()); diff != "" {
				t.Errorf("refused (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLimitedKeepsTheHostsOwnPlaces: once other addresses hold every
// place of the cap, one more of theirs is refused, and the host's own
// address (the kubelet's, probing a host-network pod) is still taken.
func TestLimitedKeepsTheHostsOwnPlaces(t *testing.T) {
	accepted, refused := acceptFrom(t, Bounds{Conns: 2, PerSource: 1}, "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.1")
	if diff := cmp.Diff([]string{"127.0.0.2", "127.0.0.3", "127.0.0.1"}, accepted); diff != "" {
		t.Errorf("accepted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{RefusedFull}, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
}

// TestLimitedKeepsOneShareANode: the pods of one node, each from an address
// of its pod range, share one share: once three of its addresses hold it,
// a fourth is refused, and another node's pod, an address in no node's
// range and the host itself are still taken.
func TestLimitedKeepsOneShareANode(t *testing.T) {
	var ranges NodeRanges
	ranges.Set("hostile", []string{"127.0.1.0/24"})
	ranges.Set("other", []string{"127.0.2.0/24"})
	accepted, refused := acceptFrom(t, Bounds{Conns: 16, PerSource: 3, ShareOf: ranges.NodeOf},
		"127.0.1.2", "127.0.1.3", "127.0.1.4", "127.0.1.5", "127.0.2.2", "127.0.0.7", "127.0.0.1")
	if diff := cmp.Diff([]string{"127.0.1.2", "127.0.1.3", "127.0.1.4", "127.0.2.2", "127.0.0.7", "127.0.0.1"}, accepted); diff != "" {
		t.Errorf("accepted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{RefusedOverShare}, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
}

// TestLimitedKeepsOneShareARange: with no node's range known, the
// addresses of one default-sized pod range (a /24) share one share: a
// fourth is refused, and an address of another /24 and the host itself are
// still taken.
func TestLimitedKeepsOneShareARange(t *testing.T) {
	accepted, refused := acceptFrom(t, Bounds{Conns: 16, PerSource: 3, ShareOf: RangeShare},
		"127.0.1.2", "127.0.1.3", "127.0.1.4", "127.0.1.5", "127.0.2.2", "127.0.0.1")
	if diff := cmp.Diff([]string{"127.0.1.2", "127.0.1.3", "127.0.1.4", "127.0.2.2", "127.0.0.1"}, accepted); diff != "" {
		t.Errorf("accepted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{RefusedOverShare}, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
}

// acceptFrom dials a listener keeping b (on 127.0.0.1) once from each of
// sources, in turn, and accepts until all but one are accepted or
// refused (the test's bounds refuse exactly one); it returns the client
// addresses accepted, in order, and the reasons of the refusals.
func acceptFrom(t *testing.T, b Bounds, sources ...string) (accepted, refused []string) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inner.Close() })
	b.Refused = func(reason string) { refused = append(refused, reason) }
	l := newLimited(inner, b, false)
	for _, s := range sources {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(s)}}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	for range len(sources) - 1 {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		accepted = append(accepted, host)
	}
	return accepted, refused
}
