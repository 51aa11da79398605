package metrics

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// NewRegistry returns a registry with the process's and the Go runtime's
// usual series (process_resident_memory_bytes, process_cpu_seconds_total,
// go_goroutines, go_memstats_*, ...), to which a binary adds its own.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return reg
}

// Handler serves reg's series to a scrape.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// Client holds the metrics of a binary's Kubernetes client: client-go's
// requests, by result and by latency, and the health of each watch the
// binary keeps (watch is a fixed name: "node", "pods", "slice",
// "budgets", "policy", ...).
type Client struct {
	Requests        *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec
	WatchHealthy    *prometheus.GaugeVec
	WatchFailures   *prometheus.CounterVec
}

// NewClient creates a binary's client metrics (subsystem: "agent" or
// "aggregator") and registers them with reg.
func NewClient(reg prometheus.Registerer, subsystem string) *Client {
	c := &Client{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: "api_requests_total",
			Help: "Requests to the Kubernetes API server, by method and code (the HTTP status, or <error> when none came back; each retry counts, a watch counts once, when it starts)."},
			[]string{"method", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem, Name: "api_request_duration_seconds",
			Help:    "Latency of requests to the Kubernetes API server, by verb, from client-go's send to the response's headers (a watch: to its start).",
			Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}},
			[]string{"verb"}),
		WatchHealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: "watch_healthy",
			Help: "1 while the watch has listed and its last list or watch did not fail, 0 from its failure until it lists again."},
			[]string{"watch"}),
		WatchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: "watch_failures_total",
			Help: "List and watch requests that failed, by watch (client-go tries again with its backoff; one try may be a watch that streams the list, then a list)."},
			[]string{"watch"}),
	}
	reg.MustRegister(c.Requests, c.RequestDuration, c.WatchHealthy, c.WatchFailures)
	return c
}

// ReportClientGo makes client-go report every request of this process to
// c. client-go keeps one set of request metrics per process: only the
// first call has an effect.
func (c *Client) ReportClientGo() {
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestLatency: requestLatency{c.RequestDuration},
		RequestResult:  requestResult{c.Requests},
	})
}

// WatchHealth implements kube.WatchRecorder: healthy false is one failed
// request.
func (c *Client) WatchHealth(watch string, healthy bool) {
	c.WatchHealthy.WithLabelValues(watch).Set(bit(healthy))
	if !healthy {
		c.WatchFailures.WithLabelValues(watch).Inc()
	}
}

type requestLatency struct{ h *prometheus.HistogramVec }

func (l requestLatency) Observe(_ context.Context, verb string, _ url.URL, d time.Duration) {
	l.h.WithLabelValues(verb).Observe(d.Seconds())
}

type requestResult struct{ c *prometheus.CounterVec }

func (r requestResult) Increment(_ context.Context, code, method, _ string) {
	r.c.WithLabelValues(method, code).Inc()
}
