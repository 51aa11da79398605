package fleet

// The caps a pool's turn takes nodes from: min-nodes' spare, the pool's cap
// on nodes in voluntary maintenance, and the cluster's, shared by the pools
// in order.

import (
	"fmt"

	"github.com/maintenance-handler/maintenance-handler/policy"
)

// caps is what a pool may still take in one pass: the nodes min-nodes
// spares, and what is left of the pool's and the cluster's caps on nodes
// in voluntary maintenance (the cluster's shared by the pools in order).
type caps struct {
	spare, poolLeft int
	clusterLeft     *int
	// clusterIn is what was left of the cluster's cap when the pool's
	// turn came; the plan is the same for any amount in lo..hi (what its
	// takes found of the cluster's cap, passed or refused).
	clusterIn, lo, hi int

	pool                      string
	minNodes, available       int
	poolBudget, clusterBudget policy.Budget
	nodes                     int
	// refusals say why min-nodes, the pool's cap or the cluster's refuse:
	// one of each for every node refused.
	refusals [3]func() string
}

// take takes k nodes (a node, or every host of a slice) from every cap,
// or says which cap refuses them ("" when none does).
func (c *caps) take(k int) (reason Reason, detail func() string) {
	switch {
	case c.spare < k:
		return ReasonMinNodes, c.refusals[0]
	case c.poolLeft < k:
		return ReasonMaxVoluntary, c.refusals[1]
	case c.refusedByCluster(k):
		return ReasonMaxVoluntary, c.refusals[2]
	}
	c.spare -= k
	c.poolLeft -= k
	*c.clusterLeft -= k
	return "", nil
}

// The details of the caps' refusals (caps.refusals): what they read does
// not change in the pool's turn.
func (c *caps) minNodesDetail() string {
	return fmt.Sprintf("the pool %s must keep min-nodes=%d nodes Ready and out of maintenance (%d are)", c.pool, c.minNodes, c.available)
}

func (c *caps) poolCapDetail() string {
	return fmt.Sprintf("the pool %s has as many nodes in voluntary maintenance as its cap allows (max-unavailable=%s, %d nodes)", c.pool, c.poolBudget, c.nodes)
}

func (c *caps) clusterCapDetail() string {
	return fmt.Sprintf("the cluster has as many nodes in voluntary maintenance as its cap allows (maxVoluntaryMaintenance=%s)", c.clusterBudget)
}

// refusedByCluster: the cluster's cap has fewer than k nodes left, and
// the answer narrows the range of what the pool's turn may find left for
// the same plan.
func (c *caps) refusedByCluster(k int) bool {
	need := c.clusterIn - *c.clusterLeft + k // what the pool's turn must find left
	if *c.clusterLeft < k {
		c.hi = min(c.hi, need-1)
		return true
	}
	c.lo = max(c.lo, need)
	return false
}
