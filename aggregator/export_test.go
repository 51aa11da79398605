package aggregator

import (
	"context"
	"time"

	"github.com/maintenance-handler/maintenance-handler/internal/lease"
)

// ReadClaims and WriteClaims let a test play a replica that claims: a
// deposed leader, whose claims the live one must count or fence.
func ReadClaims(ctx context.Context, c *lease.Client, namespace, name string) (version string, nodes map[string]string, err error) {
	cl, err := readClaims(ctx, c, namespace, name)
	return cl.version, cl.nodes, err
}

func WriteClaims(ctx context.Context, c *lease.Client, namespace, name, version string, nodes map[string]string) (string, error) {
	cl, err := writeClaims(ctx, c, namespace, name, claims{version: version}, nodes)
	return cl.version, err
}

// now is the tests' moment.
var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
