package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/drain"
)

// hangingAPI is an API server that holds every Node read and write (a
// throttled one, whose client-go retries wait out each Retry-After) until
// the caller gives up.
type hangingAPI struct {
	nopAPI
	deadlines chan bool
}

func (h hangingAPI) hang(ctx context.Context) error {
	_, ok := ctx.Deadline()
	h.deadlines <- ok
	<-ctx.Done()
	return ctx.Err()
}

func (h hangingAPI) GetNode(ctx context.Context, _ string) (*corev1.Node, error) {
	return nil, h.hang(ctx)
}

func (h hangingAPI) UpdateNode(ctx context.Context, _ *corev1.Node, _ string) (*corev1.Node, error) {
	return nil, h.hang(ctx)
}

func (h hangingAPI) PatchNodeStatus(ctx context.Context, _ string, _ []byte) error {
	return h.hang(ctx)
}

// TestNodeWritesAreBounded: a read or write of the agent's own Node that
// the API server holds is given up within nodeWriteTimeout, client-go's
// retries included (the call's context has a deadline), so that the next
// pass steps again rather than wait minutes while the VM's stop nears.
func TestNodeWritesAreBounded(t *testing.T) {
	nodeWriteTimeout = 20 * time.Millisecond
	t.Cleanup(func() { nodeWriteTimeout = 10 * time.Second })
	api := hangingAPI{deadlines: make(chan bool, 4)}
	a, err := New(Options{Client: api, NodeName: "n", Watcher: nopWatcher{}, Pods: &drain.NodePods{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background() // the loop's: no deadline of its own
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	for what, call := range map[string]func() error{
		"read":  func() error { _, err := a.readNode(ctx); return err },
		"write": func() error { return a.writeNode(ctx, node) },
	} {
		done := make(chan error, 1)
		go func() { done <- call() }()
		if bounded := <-api.deadlines; !bounded {
			t.Errorf("the Node %s has no deadline", what)
		}
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the held Node %s: %v, want given up at its deadline", what, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the held Node %s never gave up", what)
		}
	}
}
