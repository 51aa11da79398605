// Package kuberest is what the aggregator and the kubectl plugin take from
// client-go, and the agent does not: kubeconfig loading as kubectl does it
// (credential plugins included), request counting, and the aggregator's
// protobuf watch of every Node. Its Client is internal/kube's client over
// client-go's authenticated transport.
//
// The agent never imports it (TestLayering): client-go's REST client
// links the protobuf code of every type it knows, megabytes of a binary
// that every accelerator node pulls.
package kuberest

import (
	"fmt"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
)

// Config is the client configuration for the cluster of kubeconfig (empty:
// $KUBECONFIG, ~/.kube/config, or else in-cluster): it identifies itself
// as userAgent and sends at most qps requests per second, with bursts of
// burst (zero: client-go's 5 and 10).
func Config(kubeconfig, userAgent string, qps float32, burst int) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = userAgent
	cfg.QPS, cfg.Burst = qps, burst
	return cfg, nil
}

// CountRequests counts in c (labels method and code: the HTTP status, or
// "<error>") every request of each client made from cfg from now on.
func CountRequests(cfg *rest.Config, c *metrics.CounterVec) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counting{next: rt, c: c} })
}

type counting struct {
	next http.RoundTripper
	c    *metrics.CounterVec
}

func (t counting) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	code := "<error>"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	t.c.WithLabelValues(r.Method, code).Inc()
	return resp, err
}

// Client is a kube.Client over cfg's transport, and a protobuf REST client
// of the core group for the watch of every Node.
type Client struct {
	*kube.Client
	core rest.Interface
}

// codecs know the core (v1) group alone.
var codecs = Codecs(corev1.AddToScheme)

// New returns a Client for cfg: both its clients share cfg's rate limit
// (its QPS and Burst, or its RateLimiter).
func New(cfg *rest.Config) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.RateLimiter == nil {
		qps, burst := cfg.QPS, cfg.Burst
		if qps <= 0 {
			qps, burst = rest.DefaultQPS, rest.DefaultBurst
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	host, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	kc, err := kube.New(kube.Config{Host: host.String(), HTTPClient: hc, UserAgent: cfg.UserAgent, Limiter: cfg.RateLimiter})
	if err != nil {
		return nil, err
	}
	// Protobuf, as the kubelet speaks: the aggregator decodes every write
	// to every Node of the cluster.
	core, err := rest.RESTClientForConfigAndClient(GroupConfig(cfg, corev1.SchemeGroupVersion, "/api", codecs), hc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Client{Client: kc, core: core}, nil
}

// AllNodesListWatch lists and watches every Node, in protobuf.
func (c *Client) AllNodesListWatch() cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.core, "nodes", metav1.NamespaceAll, fields.Everything())
}

// Codecs is the serializer of a scheme of the groups adds register (each
// registers metav1's options and Status for its group version too), and
// of no other group; it panics if one cannot register (a programming
// error, found at start-up).
func Codecs(adds ...func(*runtime.Scheme) error) runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	for _, add := range adds {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("kuberest: scheme: %v", err))
		}
	}
	return serializer.NewCodecFactory(s).WithoutConversion()
}

// GroupConfig is a copy of cfg for the REST client of one group version
// (at apiPath, "/api" or "/apis"), whose types s knows: it speaks
// protobuf, JSON where the server cannot, and its calls are bound by cfg's
// rate limiter or else by one of cfg's QPS and Burst.
func GroupConfig(cfg *rest.Config, gv schema.GroupVersion, apiPath string, s runtime.NegotiatedSerializer) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &gv, apiPath, s
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	return c
}
