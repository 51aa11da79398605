// Package aggregator is the cluster-wide half of maintenance-handler: a
// leader-elected controller that starts pending maintenance early on nodes
// whose accelerators are idle (opportunistic maintenance), per node pool,
// without taking a pool below its min-nodes, inside maintenance windows and
// outside exclusions, and that exports per-pool metrics.
//
// The decision pass is package fleet (Decide, SliceAsks), a pure function
// of the Nodes (what the agents publish on them), the configuration and
// the time. Aggregator runs it while it holds the Lease and writes
// triggers (the perform-maintenance label and the maintenance-state
// annotation) onto Nodes; the node's agent does the maintenance. Its
// files: the leadership and the pass (aggregator.go, options.go), the
// incremental cache of the Node view (nodeview.go), the claims that fence
// triggers (claims.go), the gangs, read from the pods their nodes name
// (gangs.go), the slice asks written on every host of a slice or gang
// (slices.go), the interruption accounting only a cluster view sees
// (accounting.go: Nodes recreated or vanished), the cluster autoscaler's
// status (autoscaler.go), what it tells people (announce.go) and posts to
// a webhook, in the receiver's format, a window's steps as one digest
// (notify.go, notifyformat.go, notifydigest.go), and the
// Compute Engine calls it makes for the agents, which hold no permission
// of their own (relay.go), once it has vouched for each ask from what the
// asking node cannot write (vouch.go), within bounds per node
// (relaylimit.go). On a node
// observed only, its writes are kept and shown instead of made, and the
// node is read through its agent's Lease (observe.go).
//
// What it does not do: drain, call Compute Engine on its own account for
// a node (only on its agent's ask, for the maintenance under way there
// that a person, the aggregator's own pick or its approval stands behind,
// or for --reservations' spare capacity), or remember anything that is
// not on the Nodes, in the claims or on observed nodes' Leases: a new
// leader continues from them alone (but for its own unmade writes on
// observed nodes, which a new leader decides again).
//
// Concurrency: one goroutine decides and writes, and only while leading;
// losing the Lease cancels it before its next write. Triggers are claimed
// first in one versioned record (claims.go), so that a deposed leader's
// late write cannot exceed a cap either.
package aggregator
