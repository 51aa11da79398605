package aggregator

import (
	"context"
	"maps"
	"slices"
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

// GKEClaims are n claims of GKE-named nodes (gkeClaims).
var GKEClaims = gkeClaims

// now is the tests' moment.
var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// Lead starts a's watches and has it lead without an election, its claims
// fenced, for a benchmark that times whole passes one at a time: pass runs
// one (it reports how many pools it decided again), await waits until the
// node cache has told the aggregator of each Node at the resourceVersion
// given, and stop ends it all.
func (a *Aggregator) Lead(ctx context.Context) (pass func() int, await func(versions map[string]string), stop func(), err error) {
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
	return pass, func(versions map[string]string) {
		names := slices.Collect(maps.Keys(versions))
		a.views.awaitMarked(names, func(name string) bool {
			obj, ok := a.nodes.Get(name)
			return ok && obj.GetResourceVersion() == versions[name]
		})
	}, stop, nil
}
