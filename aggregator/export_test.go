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
