package manifests_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestEvictionCheckAnswersTheAPIServerUnderAFlood: one client (127.0.0.2)
// holds 200 idle connections to the check's port, and another
// (127.0.0.3) calls it with made-up bearer tokens until every budget of
// unknown tokens it may spend is spent; the agent's eviction through the
// API server (127.0.0.1, its token new to the check) is still reviewed
// and allowed. The budgets never refill here, so that the flood's effect
// does not depend on the test's pace: everyone's holds 10 reviews, one
// address's 3.
func TestEvictionCheckAnswersTheAPIServerUnderAFlood(t *testing.T) {
	testworld.Need(t)
	const node = "flood-gpu"
	agent := shippedForCallers(t, node)
	m, addr := hostEvictionCheckWith(t, testworld.ShippedNamespace, func(review admission.TokenReviewer, m *metrics.EvictionCheck) *admission.Callers {
		return &admission.Callers{Review: review, Users: []string{testworld.WebhookCaller}, Refused: m.CallerRefused, Remember: time.Minute,
			Unknown: rate.NewLimiter(0, 10), PerSource: func() *rate.Limiter { return rate.NewLimiter(0, 3) }, Clock: clock.RealClock{}}
	}, nil)

	idle := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range 200 {
		c, err := idle.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	flooder := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
	flood := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: flooder.DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the caller, not the server, is under test
	t.Cleanup(flood.CloseIdleConnections)
	for i := range 50 {
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+admission.Path, bytes.NewReader([]byte("{}")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", fmt.Sprintf("Bearer made-up-%d", i))
		resp, err := flood.Do(req)
		if err != nil {
			t.Fatalf("a made-up token: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	refused := func(reason string) float64 { return testutil.ToFloat64(m.CallersRefused.WithLabelValues(reason)) }
	if got := []float64{refused(admission.CallerNotValid), refused(admission.CallerThrottled)}; got[0] != 3 || got[1] != 47 {
		t.Errorf("made-up tokens refused (not-valid, throttled) %v, want 3 reviewed and 47 throttled", got)
	}

	as, err := kubernetes.NewForConfig(world.ConfigForToken(agentToken(t, agent).Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	podOn(t, "default", "flood-victim", node)
	if err := evictWhenServed(t, as, "default", "flood-victim"); err != nil {
		t.Fatalf("the agent's eviction of a pod on its own node, through the API server, under the flood: %v", err)
	}
	if got := testutil.ToFloat64(m.Checks.WithLabelValues(admission.Allowed)); got != 1 {
		t.Errorf("reviews allowed: %v, want 1", got)
	}
}

// shippedForCallers applies the shipped manifests with the aggregator's
// ClusterRole as the chart renders it for evictionCheckCallers set to the
// user the world's API server presents to webhooks, scales the
// aggregator to zero (the test serves the check itself), and returns the
// agent's pod on a new node named node.
func shippedForCallers(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	world.NodeT(t, testworld.NodeSpec{Name: node})
	apply(t, render(t, "base"))
	role := mustTemplate(t, "--set", "aggregator.evictionCheckCallers={"+testworld.WebhookCaller+"}")["ClusterRole /maintenance-handler-aggregator"]
	stripHelmLabels(role)
	apply(t, []*unstructured.Unstructured{role})
	agent := agentPodOn(t, node)
	scaleAggregatorToZero(t)
	return agent
}
