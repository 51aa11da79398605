package manifests_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// BenchmarkEvictionCheckFleetPreemption: a fleet-wide preemption as one
// replica's eviction check meets it: 1,000 nodes' agents evicting 16 pods
// each at once, 16,000 reviews from 1,000 callers. The check is the
// handler as served (TLS aside), reading each pod anew through its own
// client at the shipped rate (--eviction-check-qps 500, burst 1000) with
// the aggregator's shipped token, so that the API server's priority and
// fairness treat its reads as in a cluster. 1,024 pods on 16 nodes stand
// for the 16,000 (each review reads its pod again). Prints the time until
// every review was answered and the reviews per second; every review must
// be allowed. A preemption leaves the agents 30 s; the API server calls
// the check with a 5 s timeout per eviction, and the agent retries one
// refused.
func BenchmarkEvictionCheckFleetPreemption(b *testing.B) {
	testworld.Need(b)
	const ns, nodes, podsPerNode, callers, reviews = "maintenance-handler", 16, 64, 1000, 16000
	apply(b, render(b, "base"))
	tr, err := world.Client.CoreV1().ServiceAccounts(ns).CreateToken(testworld.Ctx(b, 10*time.Second), "maintenance-handler-aggregator", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := world.ConfigForToken(tr.Status.Token)
	cfg.QPS, cfg.Burst = 500, 1000
	pods, err := kube.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	wns := world.Namespace(b)
	type target struct{ node, pod string }
	var targets []target
	for n := range nodes {
		node := fmt.Sprintf("bench-fleet-%d", n)
		world.NodeT(b, testworld.NodeSpec{Name: node})
		for p := range podsPerNode {
			targets = append(targets, target{node, fmt.Sprintf("p-%d-%d", n, p)})
		}
	}
	var failed atomic.Int64
	parallelDo(32, len(targets), func(i int) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: targets[i].pod, Namespace: wns},
			Spec: corev1.PodSpec{NodeName: targets[i].node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
		if _, err := world.Client.CoreV1().Pods(wns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			failed.Add(1)
		}
	})
	if failed.Load() > 0 {
		b.Fatalf("%d pods not created", failed.Load())
	}

	check := &admission.Check{Pods: pods.GetPod, Metrics: metrics.NewEvictionCheck(prometheus.NewRegistry()), Clock: clock.RealClock{}, Logger: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(check)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers}, Timeout: 5 * time.Second}
	var worst time.Duration
	var late int64
	for b.Loop() {
		var refused, unanswered atomic.Int64
		start := time.Now()
		parallelDo(callers, reviews, func(i int) {
			t := targets[i%len(targets)]
			switch review(client, srv.URL, wns, t.pod, t.node) {
			case reviewRefused:
				refused.Add(1)
			case reviewUnanswered:
				unanswered.Add(1)
			}
		})
		took := time.Since(start)
		worst, late = max(worst, took), max(late, unanswered.Load())
		if refused.Load() > 0 {
			b.Errorf("%d of %d reviews of the callers' own pods refused", refused.Load(), reviews)
		}
	}
	b.ReportMetric(worst.Seconds(), "s/16000-reviews")
	b.ReportMetric(reviews/worst.Seconds(), "reviews/s")
	b.ReportMetric(float64(late), "reviews-past-5s")
	fmt.Printf("eviction check, fleet preemption: %d reviews from %d callers answered in %s (%.0f a second, one replica); %d past the API server's 5 s (the agent retries those)\n",
		reviews, callers, worst.Round(time.Millisecond), reviews/worst.Seconds(), late)
}

// A review's end: allowed, refused by the check (an answer), or not
// answered within the API server's timeout (or answered that the check
// could not read the pod), which the API server fails and the agent
// retries.
const (
	reviewAllowed = iota
	reviewRefused
	reviewUnanswered
)

// review posts the AdmissionReview the API server sends for the agent of
// node evicting namespace/name, and says how it ended.
func review(c *http.Client, url, namespace, name, node string) int {
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID(name), Namespace: namespace, Name: name, SubResource: "eviction",
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			UserInfo:  authnv1.UserInfo{Username: "system:serviceaccount:maintenance-handler:maintenance-handler-agent", Extra: map[string]authnv1.ExtraValue{admission.NodeNameExtra: {node}}},
			Operation: admissionv1.Create},
	})
	if err != nil {
		return reviewUnanswered
	}
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return reviewUnanswered
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	switch {
	case json.NewDecoder(resp.Body).Decode(&out) != nil || out.Response == nil:
		return reviewUnanswered
	case out.Response.Allowed:
		return reviewAllowed
	case out.Response.Result != nil && out.Response.Result.Code == http.StatusServiceUnavailable:
		return reviewUnanswered // the pod's read timed out
	}
	return reviewRefused
}

// parallelDo runs do(0..n-1) on workers goroutines.
func parallelDo(workers, n int, do func(i int)) {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				do(i)
			}
		}()
	}
	wg.Wait()
}
