// Package aggregator is the cluster-wide half of maintenance-handler: a
// leader-elected controller that starts pending maintenance early on nodes
// whose accelerators are idle (opportunistic maintenance), per node pool,
// without taking a pool below its min-nodes, inside maintenance windows and
// outside exclusions, and that exports per-pool metrics.
//
// Decide is the decision pass, a pure function of the Nodes (what the
// agents publish on them), the configuration and the time. Aggregator runs
// it while it holds the Lease and writes triggers (the perform-maintenance
// label and the maintenance-state annotation) onto Nodes; the node's agent
// does the maintenance.
//
// What it does not do: drain, call Compute Engine, or remember anything
// that is not on the Nodes or in the claims: a new leader continues from
// them alone.
//
// Concurrency: one goroutine decides and writes, and only while leading;
// losing the Lease cancels it before its next write. Triggers are claimed
// first in one versioned record (claims.go), so that a deposed leader's
// late write cannot exceed a cap either.
package aggregator
