package aggregator

import (
	"context"
	"time"

	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// ReadClaims and WriteClaims let a test play a replica that claims: a
// deposed leader, whose claims the live one must count or fence.
func ReadClaims(ctx context.Context, c coordinationv1client.LeasesGetter, namespace, name string) (version string, nodes map[string]string, err error) {
	cl, err := readClaims(ctx, c, namespace, name)
	return cl.version, cl.nodes, err
}

func WriteClaims(ctx context.Context, c coordinationv1client.LeasesGetter, namespace, name, version string, nodes map[string]string) (string, error) {
	cl, err := writeClaims(ctx, c, namespace, name, claims{version: version}, nodes)
	return cl.version, err
}

// now is the tests' moment.
var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// Lead starts a's watches and has it lead without an election, its claims
// fenced, for a benchmark that times whole passes one at a time: pass runs
// one (it reports how many pools it decided again), await waits until the
// node cache has told the aggregator of a change of each of names, and stop
// ends it all.
func (a *Aggregator) Lead(ctx context.Context) (pass func() int, await func(names ...string), stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	shutdown := a.record()
	stop = func() { cancel(); shutdown() }
	if err := a.watch(ctx); err != nil {
		stop()
		return nil, nil, nil, err
	}
	a.beginLead()
	if !a.fence(ctx) {
		stop()
		return nil, nil, nil, ctx.Err()
	}
	pass = func() int {
		a.pass(ctx)
		fresh, _ := a.views.fleet.Changes()
		return len(fresh)
	}
	return pass, func(names ...string) { a.views.awaitMarked(names) }, stop, nil
}
