package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/internal/lease"
)

// Fencing. A trigger is decided from the Nodes, then written; between the
// two, a leader may be deposed (paused, partitioned) while a new one
// triggers other nodes, and the deposed leader's late write would then
// exceed the caps. So every trigger is first claimed in one object, the
// claims Lease, by an update conditional on the version of it that the
// pass read:
//
//   - a claim records the node's resourceVersion, the one the trigger's
//     write is conditional on;
//   - a pass counts every claim whose write may still land as a node in
//     voluntary maintenance;
//   - a claim is dropped once the node's resourceVersion differs from the
//     claimed one (the write landed, and the Node itself shows the
//     maintenance, or it can never land) and the node cache is that recent;
//   - a deposed leader's claim fails, since the new leader's claims changed
//     the Lease; a claim it made before it was deposed is counted by the
//     new leader until it is resolved.
//
//   - a new leader writes the claims Lease once when it takes over, before
//     its first pass (fence), so that a deposed leader's claim made on
//     what it read before fails even when the new leader has nothing to
//     claim itself.
//
// The claims Lease is never renewed and holds no holder: it is only a
// versioned record, in annotationClaims (and annotationFence, the last
// takeover).

// annotationClaims holds the claims, as JSON {"node": "resourceVersion"}.
// It is on the claims Lease, not on a Node.
const annotationClaims = "maintenance-handler.io/voluntary-claims"

// annotationFence records the last leader to take over the claims, as
// "identity at time": writing it changes the Lease's version.
const annotationFence = "maintenance-handler.io/claims-fenced-by"

// ClaimsLeaseName is the claims Lease's name for a leader-election Lease.
func ClaimsLeaseName(leaseName string) string { return leaseName + "-claims" }

// ErrFenced: the claims changed since this replica read them (another
// leader claimed); nothing was claimed.
var ErrFenced = errors.New("claims changed since read (another leader claims): fenced")

// claims is the claims Lease as read: its resourceVersion ("" when it does
// not exist yet) and node -> the resourceVersion the trigger's write is
// conditional on.
type claims struct {
	version string
	nodes   map[string]string
}

func readClaims(ctx context.Context, c *lease.Client, namespace, name string) (claims, error) {
	l, err := c.Get(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return claims{nodes: map[string]string{}}, nil
	}
	if err != nil {
		return claims{}, err
	}
	out := claims{version: l.ResourceVersion, nodes: map[string]string{}}
	if raw := l.Annotations[annotationClaims]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &out.nodes); err != nil {
			// Unreadable claims cannot be counted: claim nothing until a
			// write replaces them (ours, with what the Nodes say).
			return out, fmt.Errorf("claims Lease %s/%s: %s is not JSON: %w", namespace, name, annotationClaims, err)
		}
	}
	return out, nil
}

// writeClaims replaces the claims with nodes, conditional on the Lease
// being at prev.version. It returns ErrFenced when it is not.
func writeClaims(ctx context.Context, c *lease.Client, namespace, name string, prev claims, nodes map[string]string) (claims, error) {
	return putClaims(ctx, c, namespace, name, prev, nodes, "")
}

// fenceClaims writes the claims Lease as it is (its claims kept) with
// fencedBy, so that its version changes: every claim conditional on an
// earlier read fails from then on. It returns the claims as written, or
// ErrFenced when another replica wrote between the read and the write.
func fenceClaims(ctx context.Context, c *lease.Client, namespace, name, fencedBy string) (claims, error) {
	cl, err := readClaims(ctx, c, namespace, name)
	if err != nil {
		if cl.nodes == nil {
			return cl, err // not read
		}
		// Unreadable claims are replaced by none: the passes then count
		// what the Nodes say.
		cl.nodes = map[string]string{}
	}
	return putClaims(ctx, c, namespace, name, cl, cl.nodes, fencedBy)
}

// putClaims writes nodes (and fencedBy when set) conditional on
// prev.version.
func putClaims(ctx context.Context, c *lease.Client, namespace, name string, prev claims, nodes map[string]string, fencedBy string) (claims, error) {
	raw, _ := json.Marshal(nodes)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, ResourceVersion: prev.version,
		Annotations: map[string]string{annotationClaims: string(raw)}}}
	if fencedBy != "" {
		l.Annotations[annotationFence] = fencedBy
	}
	var err error
	if prev.version == "" {
		l, err = c.Create(ctx, l, fieldManager)
	} else {
		l, err = c.Update(ctx, l, fieldManager)
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return prev, ErrFenced
	}
	if err != nil {
		return prev, err
	}
	return claims{version: l.ResourceVersion, nodes: maps.Clone(nodes)}, nil
}

// claimState is what a claim's node says of it.
type claimState int

const (
	// claimLive: the claimed write may still land; count the node.
	claimLive claimState = iota
	// claimResolved: the write landed or never will, and the node cache
	// shows the node as it is: the Node alone is counted.
	claimResolved
)

// resolve tells whether the claim of a node at claimedRV is resolved.
// cached is the node cache's object (nil if the cache has none); current
// is the API server's, read when the cache is not at claimedRV (nil: not
// found).
func resolve(claimedRV string, cached, current *corev1.Node) claimState {
	if cached != nil && cached.ResourceVersion == claimedRV {
		return claimLive // unchanged since the claim: the write may still land
	}
	if current == nil {
		return claimResolved // deleted: no write can land
	}
	if current.ResourceVersion == claimedRV {
		return claimLive
	}
	// Changed since the claim, so the conditional write landed or never
	// will; count from the cache only once it shows the node as it is.
	if cached != nil && cached.ResourceVersion == current.ResourceVersion {
		return claimResolved
	}
	return claimLive
}
