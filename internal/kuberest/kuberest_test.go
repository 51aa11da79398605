package kuberest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/maintenance-handler/maintenance-handler/metrics"
)

// TestCountRequests: the requests of both of a Client's clients (the JSON
// one and the protobuf watch of every Node) are counted by method and
// code, and so are those of a client made later from the same config.
func TestCountRequests(t *testing.T) {
	agents := make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents <- r.UserAgent()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/nodes":
			_ = json.NewEncoder(w).Encode(corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
				Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}})
		case "/api/v1/nodes/n1":
			_ = json.NewEncoder(w).Encode(corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: 404})
		}
	}))
	defer srv.Close()
	reg := metrics.NewRegistry()
	c := metrics.NewCounterVec(metrics.Opts{Name: "requests_total", Help: "h"}, []string{"method", "code"})
	reg.MustRegister(c)
	cfg := &rest.Config{Host: srv.URL, UserAgent: "aggregator/test"}
	CountRequests(cfg, c)
	client, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.GetNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cache.ToListerWatcherWithContext(client.AllNodesListWatch()).ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	later, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := later.GetNode(ctx, "n2"); !apierrors.IsNotFound(err) {
		t.Fatalf("GET of a missing node: %v", err)
	}
	var out bytes.Buffer
	if err := reg.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`requests_total{code="200",method="GET"} 2`, `requests_total{code="404",method="GET"} 1`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics:\n%s\nwant %s", out.String(), want)
		}
	}
	close(agents)
	for ua := range agents {
		if ua != "aggregator/test" {
			t.Errorf("a request as %q", ua)
		}
	}
}
