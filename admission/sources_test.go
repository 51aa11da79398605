package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sync/errgroup"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/metrics"
)

// evictionReview is an AdmissionReview of the eviction of pod ns/name,
// naming uid, by a token whose node-name claim names node.
func evictionReview(node, name string, uid types.UID) []byte {
	obj, _ := json.Marshal(policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}})
	body, _ := json.Marshal(admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{UID: "u", Name: name, Namespace: "ns",
		SubResource: "eviction", Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Operation: admissionv1.Create,
		UserInfo: authnv1.UserInfo{Extra: map[string]authnv1.ExtraValue{admission.NodeNameExtra: {node}}}, Object: runtime.RawExtension{Raw: obj}}})
	return body
}

// TestSourcesBoundReadsPerNode: the pod reads a source can make the check
// spend. One node's pods (two addresses of its pod range) sending made-up
// reviews have 20 read, then are refused unread (429, counted as
// over-budget) until their budget refills (5 a second); another node's
// pods keep theirs. Reviews the check allows spend no budget, from
// whatever source, however many; asked again of one pod, they cost no
// read. From an address in no node's range (the API server's), the
// refusals of one node's token spend that node's budget, and those of
// made-up nodes the address's wider one (200).
func TestSourcesBoundReadsPerNode(t *testing.T) {
	var reads atomic.Int64
	get := func(_ context.Context, _, name string) (*corev1.Pod, error) {
		reads.Add(1)
		var i int
		if _, err := fmt.Sscanf(name, "real-%d", &i); err == nil {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}, Spec: corev1.PodSpec{NodeName: fmt.Sprint("node-", i%3)}}, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	ranges := map[string]string{"10.0.1.0/24": "node-1", "10.0.2.0/24": "node-2", "10.0.0.0/24": "node-0"}
	shareOf := func(a netip.Addr) string {
		for cidr, node := range ranges {
			if netip.MustParsePrefix(cidr).Contains(a) {
				return node
			}
		}
		return ""
	}
	clk := clocktesting.NewFakeClock(testTime)
	sources := admission.NewSources(shareOf, slog.New(slog.DiscardHandler))
	sources.Clock = clk
	m := metrics.NewEvictionCheck(prometheus.NewRegistry())
	check := &admission.Check{Pods: get, Metrics: m, Sources: sources, Nodes: &admission.PodNodes{}, Clock: clk, Logger: slog.New(slog.DiscardHandler)}
	// ask sends n reviews from the addresses from (in turn) and counts the
	// answers by code (200: allowed) and the reads they cost.
	ask := func(n int, from []string, body func(i int) []byte) (map[int32]int, int64) {
		t.Helper()
		before, codes := reads.Load(), map[int32]int{}
		for i := range n {
			r := httptest.NewRequest(http.MethodPost, admission.Path, bytes.NewReader(body(i)))
			r.RemoteAddr = from[i%len(from)] + ":40000"
			rec := httptest.NewRecorder()
			check.ServeHTTP(rec, r)
			var out admissionv1.AdmissionReview
			if err := json.NewDecoder(rec.Body).Decode(&out); err != nil || out.Response == nil {
				t.Fatalf("answer: %v", err)
			}
			code := int32(http.StatusOK)
			if !out.Response.Allowed {
				code = out.Response.Result.Code
			}
			codes[code]++
		}
		return codes, reads.Load() - before
	}
	madeUpAs := func(node func(i int) string) func(int) []byte {
		return func(i int) []byte {
			return evictionReview(node(i), fmt.Sprint("gone-", i), types.UID(fmt.Sprint("uid-", i)))
		}
	}
	madeUp := madeUpAs(func(int) string { return "node-1" })
	real := func(i int) []byte {
		return evictionReview(fmt.Sprint("node-", i%3), fmt.Sprint("real-", i), types.UID(fmt.Sprint("real-", i)))
	}
	type got struct {
		Codes map[int32]int
		Reads int64
	}
	for _, step := range []struct {
		name string
		n    int
		from []string
		body func(int) []byte
		tick time.Duration
		want got
	}{
		{"one node's pods, made-up pods", 100, []string{"10.0.1.2", "10.0.1.3"}, madeUp, 0,
			got{map[int32]int{http.StatusNotFound: 20, http.StatusTooManyRequests: 80}, 20}},
		{"another node's pod, a made-up pod", 1, []string{"10.0.2.2"}, madeUp, 0,
			got{map[int32]int{http.StatusNotFound: 1}, 1}},
		{"the API server, many evictions the check allows", 90, []string{"192.168.0.1"}, real, 0,
			got{map[int32]int{http.StatusOK: 90}, 90}},
		{"a proxy pod on the spent node, the same evictions again", 90, []string{"10.0.1.9"}, real, 0,
			got{map[int32]int{http.StatusOK: 90}, 0}},
		{"the spent node's pods, a second later", 10, []string{"10.0.1.2"}, madeUp, time.Second,
			got{map[int32]int{http.StatusNotFound: 5, http.StatusTooManyRequests: 5}, 5}},
		// Through the API server, one node's agent token evicting other
		// nodes' pods spends its own budget, not the other agents'.
		{"the API server, one agent's evictions the check refuses", 30, []string{"192.168.0.1"}, madeUp, 0,
			got{map[int32]int{http.StatusNotFound: 20, http.StatusTooManyRequests: 10}, 20}},
		{"the API server, another agent's eviction of a pod that is gone", 1, []string{"192.168.0.1"}, madeUpAs(func(int) string { return "node-2" }), 0,
			got{map[int32]int{http.StatusNotFound: 1}, 1}},
		{"an address in no node's range that makes up the node it names", 250, []string{"192.168.0.7"}, madeUpAs(func(i int) string { return fmt.Sprint("made-up-", i) }), 0,
			got{map[int32]int{http.StatusNotFound: 200, http.StatusTooManyRequests: 50}, 200}},
	} {
		clk.Step(step.tick)
		codes, n := ask(step.n, step.from, step.body)
		if diff := cmp.Diff(step.want, got{codes, n}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
	}
	if got := testutil.ToFloat64(m.CallersRefused.WithLabelValues(admission.CallerOverBudget)); got != 145 {
		t.Errorf("eviction_check_callers_refused_total{reason=%q} = %v, want 145", admission.CallerOverBudget, got)
	}
}

// BenchmarkCheckUnderAFloodFromOneNode: the latency of the check's answer
// to the API server (200 evictions of distinct pods, each read once) while
// 8 clients in one node's pod range send made-up reviews as fast as they
// are answered, the pods read through a client of 500 reads a second
// (bursts of 1000: --eviction-check-qps, --eviction-check-burst) as the
// aggregator's: p50, p99 and the slowest, in milliseconds, and the reads
// the flood cost.
func BenchmarkCheckUnderAFloodFromOneNode(b *testing.B) {
	var flooded atomic.Int64
	limiter := flowcontrol.NewTokenBucketRateLimiter(500, 1000)
	get := func(ctx context.Context, _, name string) (*corev1.Pod, error) {
		if err := limiter.Wait(ctx); err != nil {
			return nil, err
		}
		if _, uid, ok := strings.Cut(name, "real-"); ok {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + uid)}, Spec: corev1.PodSpec{NodeName: "node-0"}}, nil
		}
		flooded.Add(1)
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	shareOf := func(a netip.Addr) string {
		if netip.MustParsePrefix("10.0.1.0/24").Contains(a) {
			return "node-1"
		}
		return ""
	}
	check := &admission.Check{Pods: get, Metrics: metrics.NewEvictionCheck(prometheus.NewRegistry()),
		Sources: admission.NewSources(shareOf, slog.New(slog.DiscardHandler)), Nodes: &admission.PodNodes{},
		Clock: clocktesting.NewFakeClock(testTime), Logger: slog.New(slog.DiscardHandler)}
	serve := func(from string, body []byte) bool {
		r := httptest.NewRequest(http.MethodPost, admission.Path, bytes.NewReader(body))
		r.RemoteAddr = from
		rec := httptest.NewRecorder()
		check.ServeHTTP(rec, r)
		return bytes.Contains(rec.Body.Bytes(), []byte(`"allowed":true`))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	b.Cleanup(func() { cancel(); _ = g.Wait() })
	var next atomic.Int64
	for w := range 8 {
		g.Go(func() error {
			for ctx.Err() == nil {
				i := next.Add(1)
				serve(fmt.Sprintf("10.0.1.%d:4000", 2+w), evictionReview("node-1", fmt.Sprint("gone-", i), types.UID(fmt.Sprint("uid-", i))))
			}
			return nil
		})
	}
	lat := make([]time.Duration, 0, 200)
	var round int
	for b.Loop() {
		lat = lat[:0]
		for i := range 200 {
			name := fmt.Sprintf("real-%d-%d", round, i)
			start := time.Now()
			if !serve("192.168.0.1:4000", evictionReview("node-0", name, types.UID("uid-"+strings.TrimPrefix(name, "real-")))) {
				b.Fatalf("the API server's review of %s: refused", name)
			}
			lat = append(lat, time.Since(start))
		}
		round++
	}
	reportLatencies(b, lat)
	b.ReportMetric(float64(flooded.Load())/float64(round), "flood-reads/op")
}

// TestSourcesForgetOnlyFullBudgets: an address in no node's range that
// names a new node with each review it has refused fills the budgets
// remembered; making room forgets those full again (each node's, here
// refilled at once), not the address's own, which it spends.
func TestSourcesForgetOnlyFullBudgets(t *testing.T) {
	clk := clocktesting.NewFakeClock(testTime)
	s := admission.NewSources(nil, slog.New(slog.DiscardHandler))
	s.Clock, s.Rate, s.AddressRate, s.AddressBurst = clk, 1000, 0, 2000
	const from = "192.168.0.7"
	for i := range s.AddressBurst {
		s.Refused(from, fmt.Sprint("made-up-", i))
		clk.Step(time.Second)
	}
	if !s.Spent(from, "made-up-again") {
		t.Errorf("the address that named a new node with each of %d refusals: its budget forgotten, want spent", s.AddressBurst)
	}
}
