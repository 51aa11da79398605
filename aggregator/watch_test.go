package aggregator

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/maintenance-handler/maintenance-handler/kube"
)

// TestHealthyReadsTheWatches: an aggregator whose API server does not
// answer says so on /healthz (Healthy), naming the watch, once the
// failure has lasted its bound; before its watches start, and within the
// bound, it is healthy.
func TestHealthyReadsTheWatches(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"} // nothing listens there
	client, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Client: client, Leases: leases.CoordinationV1(), Namespace: "mh", Identity: "a-0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Healthy(0); err != nil {
		t.Fatalf("before its watches start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// The failure, once it has lasted longer than a zero bound (a stable
	// state, not a transient one).
	var why error
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		why = a.Healthy(0)
		return why != nil, nil
	}); err != nil {
		t.Fatal("an aggregator whose API server does not answer says it is healthy")
	}
	if !strings.Contains(why.Error(), "nodes watch has failed") {
		t.Errorf("Healthy: %v; want the nodes watch named", why)
	}
	if err := a.Healthy(time.Hour); err != nil {
		t.Errorf("within its bound: %v", err)
	}
}
