package metrics

import "github.com/prometheus/client_golang/prometheus"

// NewConnectionsRefused creates the counter of connections a binary's
// listeners refused (internal/cli's bounds), by listener and reason;
// subsystem is the binary's ("agent", "aggregator"). Every listener's
// over_share and full start at 0. The caller registers it, once the
// labels its binary's series carry are known: a listener counts from the
// start.
func NewConnectionsRefused(subsystem string, listeners ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: "connections_refused_total",
		Help: "Connections a listener refused at once, by listener and reason: over_share (their client address, or the node whose pods the address is one of, already held its share of connections), full (the listener's cap was held by addresses other than the host's own)."},
		[]string{"listener", "reason"})
	for _, l := range listeners {
		for _, r := range []string{"over_share", "full"} {
			c.WithLabelValues(l, r)
		}
	}
	return c
}
