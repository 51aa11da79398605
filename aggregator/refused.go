package aggregator

// Writes the API server refuses for good. A node's kubelet may fill its
// own Node's annotations to the API server's limit, so that every update
// of the aggregator's to it is refused (422): a claim made for such a
// write would otherwise count as live for as long as the Node stays as it
// is, and its node would hold its pool's place in repair (and take it
// again each pass, first in the queue) with no approval ever landing.

import (
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/maintenance-handler/maintenance-handler/fleet"
)

// refusedFor is how long a refused approval counts as one (for the node's
// place in the queue and its cool-down): longer than any cool-down a pool
// is likely to set; a Node that changes is approved anew past its own.
const refusedFor = 7 * 24 * time.Hour

// refusals are the writes the API server refused for good, by node. Safe
// for concurrent use (the pass's writes run in parallel).
type refusals struct {
	mu sync.Mutex
	// at: node -> the resourceVersion a write to it was refused at.
	at map[string]string
	// approvals: node -> when the write of its approval was last refused.
	approvals map[string]time.Time
}

// definitive: err is the API server refusing the write itself, which no
// retry of the same write at the same version changes.
func definitive(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err)
}

// write records that a write to node at rv was refused with err, if for
// good.
func (r *refusals) write(node, rv string, err error) {
	if !definitive(err) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string]string{}
	}
	r.at[node] = rv
}

// refusedAt: a write to node at rv was refused for good.
func (r *refusals) refusedAt(node, rv string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[node] == rv && rv != ""
}

// approval records that node's approval, decided at now, was refused.
func (r *refusals) approval(node string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.approvals == nil {
		r.approvals = map[string]time.Time{}
	}
	r.approvals[node] = now
}

// amend marks, on nodes, the approvals refused within refusedFor of now
// (fleet.Node.ApprovalRefused), forgetting older ones and the versions of
// nodes gone.
func (r *refusals) amend(nodes *fleet.Fleet, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for node, at := range r.approvals {
		if now.Sub(at) >= refusedFor {
			delete(r.approvals, node)
			continue
		}
		nodes.Amend(node, func(v *fleet.Node) { v.ApprovalRefused = at })
	}
	for node := range r.at {
		if nodes.Node(node) == nil {
			delete(r.at, node)
		}
	}
}
