package aggregator_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/test/fleet"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// procs starts real agent and aggregator processes for a test, and stops
// them when it ends.
type procs struct {
	t    *testing.T
	bins string
	ns   string
	f    *fleet.Fleet
}

// newProcs returns the test's processes: agents started with agentArgs
// (and --log-level warn), in the test's namespace.
func newProcs(t *testing.T, agentArgs ...string) *procs {
	t.Helper()
	f := fleet.ForTest(t, world, agentArgs...)
	bins, err := fleet.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	return &procs{t: t, bins: bins, ns: world.Namespace(t), f: f}
}

// aggregator starts an aggregator process named id on the test's
// namespace, with no policy ConfigMap and a pass every second at least,
// serving metrics at addr.
func (p *procs) aggregator(id, addr string) *testworld.Process {
	p.t.Helper()
	agg, err := world.StartProcess("aggregator-"+id, filepath.Join(p.bins, "aggregator"), "--kubeconfig", world.Kubeconfig, "--namespace", p.ns,
		"--identity", id, "--config-map", "", "--interval", "1s", "--listen-address", addr, "--log-level", "warn")
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = agg.Kill() })
	return agg
}

// waitNodes waits until every node of names satisfies cond.
func waitNodes(t *testing.T, names []string, what string, cond func(*corev1.Node) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 2*time.Minute), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !cond(n) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v never %s", names, what)
	}
}
