package admission_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/metrics"
)

// BenchmarkEvictionCheckUnder200IdleConnections: the latency of the
// eviction check's answer to the API server (127.0.0.1: a new TLS
// connection, its bearer token reviewed once and remembered, the pod read
// once and remembered, within its source's budget)
// while another client (127.0.0.2) holds 200 idle connections to the
// check's port: 200 reviews, p50, p99 and the slowest, in milliseconds.
func BenchmarkEvictionCheckUnder200IdleConnections(b *testing.B) {
	cs := fake.NewClientset(&admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hooks"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "evictions.maintenance-handler.io"}},
	})
	certs := newCerts(cs, clocktesting.NewFakeClock(time.Now()))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"}, Spec: corev1.PodSpec{NodeName: "a"}}
	check := admission.NewCallers(func(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
		tr.Status = authnv1.TokenReviewStatus{Authenticated: tr.Spec.Token == "apiserver-token", User: authnv1.UserInfo{Username: "kube-apiserver"}}
		return tr, nil
	}, []string{"kube-apiserver"}, func(string) {}).Wrap(&admission.Check{
		Pods:    func(context.Context, string, string) (*corev1.Pod, error) { return pod, nil },
		Metrics: metrics.NewEvictionCheck(prometheus.NewRegistry()), Clock: clocktesting.NewFakeClock(testTime), Logger: slog.New(slog.DiscardHandler),
		// As the aggregator serves it: each source's budget, the pods read
		// remembered.
		Sources: admission.NewSources(nil, slog.New(slog.DiscardHandler)), Nodes: &admission.PodNodes{},
	})
	ctx, cancel := context.WithCancel(context.Background())
	g, ctx := errgroup.WithContext(ctx)
	b.Cleanup(func() { cancel(); _ = g.Wait() })
	addr, err := admission.Serve(ctx, g, "127.0.0.1:0", check, certs, nil)
	if err != nil {
		b.Fatal(err)
	}
	waitReady(b, certs, cs)
	pool := x509.NewCertPool()
	for _, c := range bundle(b, cs) {
		pool.AddCert(c)
	}
	idle := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range 200 {
		c, err := idle.Dial("tcp", addr.String())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
	}
	apiserver := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: apiserver.DialContext, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	// The agent's eviction names its pod's UID.
	eviction, _ := json.Marshal(policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}})
	body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Namespace: "ns", Name: "p", SubResource: "eviction", Operation: admissionv1.Create,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: eviction},
			UserInfo: authnv1.UserInfo{Extra: map[string]authnv1.ExtraValue{admission.NodeNameExtra: {"a"}}}}})
	lat := make([]time.Duration, 0, 200)
	for b.Loop() {
		lat = lat[:0]
		for range 200 {
			start := time.Now()
			req, _ := http.NewRequest(http.MethodPost, "https://"+addr.String()+admission.Path, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer apiserver-token")
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			var out admissionv1.AdmissionReview
			err = json.NewDecoder(resp.Body).Decode(&out)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || out.Response == nil || !out.Response.Allowed {
				b.Fatalf("review: %d %v %+v", resp.StatusCode, err, out.Response)
			}
			lat = append(lat, time.Since(start))
		}
	}
	reportLatencies(b, lat)
}

// reportLatencies reports the median, the 99th percentile and the slowest
// of lat, in milliseconds.
func reportLatencies(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	for _, q := range []struct {
		at   int
		unit string
	}{{len(lat) / 2, "ms-p50"}, {len(lat) * 99 / 100, "ms-p99"}, {len(lat) - 1, "ms-max"}} {
		b.ReportMetric(float64(lat[q.at].Microseconds())/1000, q.unit)
	}
}
