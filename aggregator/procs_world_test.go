package aggregator_test

import (
	"path/filepath"
	"testing"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// procs starts real agent and aggregator processes for a test, and stops
// them when it ends.
type procs struct {
	t    testing.TB
	bins string
	ns   string
	f    *vms.Fleet
}

// newProcs returns the test's processes: agents started with agentArgs
// (and --log-level warn), in the test's namespace.
func newProcs(t testing.TB, agentArgs ...string) *procs {
	t.Helper()
	f := vms.ForTest(t, world, agentArgs...)
	bins, err := vms.Binaries()
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
	return p.aggregatorWith(id, addr, "")
}

// aggregatorWith is aggregator reading the policy ConfigMap configMap ("":
// none) of the test's namespace, with extra flags. Where p's agents make
// their own Compute calls (no p.f.Project), so does it know
// (--compute-caller node).
func (p *procs) aggregatorWith(id, addr, configMap string, extra ...string) *testworld.Process {
	p.t.Helper()
	args := []string{"--kubeconfig", world.AggregatorKubeconfigT(p.t, p.ns), "--namespace", p.ns,
		"--identity", id, "--config-map", configMap, "--interval", "1s", "--listen-address", addr, "--log-level", "warn"}
	if p.f.Project == nil {
		args = append(args, "--compute-caller", "node")
	}
	agg, err := world.StartProcess("aggregator-"+id, filepath.Join(p.bins, "aggregator"), append(args, extra...)...)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = agg.Kill() })
	return agg
}
