package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// BenchmarkProbesUnder200IdleConnections: the latency of the kubelet's
// probes (/healthz as the agent's liveness probe, /readyz as the
// aggregator's readiness probe; a new connection each, from 127.0.0.1)
// while another client (127.0.0.2) holds 200 idle connections to the same
// port: 200 probes each, p50, p99 and the slowest, in milliseconds.
func BenchmarkProbesUnder200IdleConnections(b *testing.B) {
	longDeadlines(b)
	addr, _ := serveProbes(b, nil)
	idleFrom(b, "127.0.0.2", addr, 200)
	probe := probeClient(nil)
	for _, path := range []string{"/healthz", "/readyz"} {
		b.Run(path[1:], func(b *testing.B) {
			lat := make([]time.Duration, 0, 200)
			for b.Loop() {
				lat = lat[:0]
				for range 200 {
					start := time.Now()
					resp, err := probe.Get("http://" + addr + path)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("%s: %d", path, resp.StatusCode)
					}
					lat = append(lat, time.Since(start))
				}
			}
			reportLatencies(b, lat)
		})
	}
}

// reportLatencies reports the p50, the p99 and the slowest of lat, in
// milliseconds (ms-p50, ms-p99, ms-max).
func reportLatencies(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "ms-p50")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "ms-p99")
	b.ReportMetric(ms(lat[len(lat)-1]), "ms-max")
}

// BenchmarkNodeOf: naming the node of a client address (NodeRanges.NodeOf,
// once per connection accepted) among 65,000 nodes' /24 pod ranges, GKE's
// most nodes: ns per lookup.
func BenchmarkNodeOf(b *testing.B) {
	var r NodeRanges
	for i := range 65000 {
		r.Set(fmt.Sprintf("node-%d", i), []string{fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)})
	}
	addr := netip.MustParseAddr("10.200.17.9")
	for b.Loop() {
		if r.NodeOf(addr) == "" {
			b.Fatal("no node")
		}
	}
}
